"""Capture on an accelerator's path: several store blocks per forward, outputs cast to the
stored dtype before they reach the host, written while the next forward runs.

On a CPU the path runs when ``blocks_per_pass`` is given: its stored bytes must equal the
one-block-per-forward capture's bit for bit (the models here give the same values whatever
the batch), and a capture stopped part-way resumes to the same store. On the ``meta`` device
(tests/capture/meta_device.py) it must build nothing on the wrong device.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from capture.device import Device
from capture.record import blocks_per_forward, capture_counterfactuals, capture_length
from capture.train import train_run
from store import Store, validate
from tests.capture.meta_device import HostReads
from tests.capture.test_train import tiny_experiment

pytestmark = pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter:UserWarning")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("passes") / "s.zarr"
    st = Store.create(str(path))
    spec = tiny_experiment(task="dyck", arch="transformer", steps=4,
                           models={"transformer": {"d_model": 16, "n_layers": 2}}).runs()[0]
    train_run(st, spec)
    return path, spec.run_id


def _copy(trained, dest) -> Store:
    shutil.copytree(trained[0], dest)
    return Store.open(str(dest), mode="r+")


def _arrays(st: Store, rid: str, L: int, kind: str = "len") -> dict[str, np.ndarray]:
    ds = Store.open(str(st.location)).open_length(rid, L, kind=kind)
    return {k: ds[k].values for k in ds.data_vars}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("k", [1, 3])
def test_several_blocks_per_forward_store_the_same_bytes(trained, tmp_path, k):
    rid = trained[1]
    one = _copy(trained, tmp_path / "one.zarr")
    many = _copy(trained, tmp_path / "many.zarr")
    kw = dict(n_sequences=70, block_size=16, sites=["L0.*"])
    capture_length(one, rid, 12, **kw)
    capture_length(many, rid, 12, blocks_per_pass=k, **kw)
    _same(_arrays(one, rid, 12), _arrays(many, rid, 12))
    assert validate(many).ok


def test_a_pass_stopped_part_way_resumes_to_the_same_store(trained, tmp_path):
    rid = trained[1]
    whole = _copy(trained, tmp_path / "whole.zarr")
    cut = _copy(trained, tmp_path / "cut.zarr")
    kw = dict(n_sequences=100, block_size=10, blocks_per_pass=4)
    capture_length(whole, rid, 12, **kw)
    seen = []

    def stop(n):
        seen.append(n)
        if len(seen) == 6:  # inside the second pass (blocks 4-7)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture_length(cut, rid, 12, progress=stop, **kw)
    done = set(cut.run_group(rid)["len_012"].attrs["completed_blocks"])
    assert 0 < len(done) < 10
    res = capture_length(cut, rid, 12, **kw)
    assert res.blocks_written == 10 - len(done)
    _same(_arrays(whole, rid, 12), _arrays(cut, rid, 12))


def test_capture_records_the_devices_it_ran_on(trained, tmp_path):
    st = _copy(trained, tmp_path / "s.zarr")
    capture_length(st, trained[1], 12, n_sequences=20)
    assert st.run_group(trained[1])["len_012"].attrs["devices"] == ["cpu"]


def test_blocks_per_forward_is_one_on_the_cpu_and_bounded_elsewhere():
    def gpu(name: str) -> Device:  # not parse_device: no GPU need be here
        return Device(torch.device(name))

    assert blocks_per_forward("cpu", 42, 10**6) == 1
    assert blocks_per_forward(gpu("cuda"), 42, 1000) == 512 // 42
    assert blocks_per_forward(gpu("cuda:1"), 42, 2**26) == 1  # 2.8 GB a block: one at a time
    assert blocks_per_forward(gpu("cuda"), 1000, 10) == 1


@pytest.mark.parametrize("arch", ["lstm", "mamba", "deltanet"])
def test_capture_twins_and_sites_run_on_another_device(tmp_path, arch):
    st = Store.create(str(tmp_path / "s.zarr"))
    spec = tiny_experiment(task="dyck", arch=arch, steps=2,
                           models={arch: {"d_model": 16, "n_layers": 2}}).runs()[0]
    train_run(st, spec)
    with HostReads():
        res = capture_length(st, spec.run_id, 12, n_sequences=30, block_size=8, sites=["L0.*"],
                             device="meta")
        cf = capture_counterfactuals(st, spec.run_id, 12, n_pairs=10, device="meta")
    assert res.blocks_written == 4 and cf.blocks_written == 1
    grp = st.run_group(spec.run_id)
    assert grp["len_012"].attrs["devices"] == ["meta"]
    assert grp["cfclean_012"].attrs["devices"] == ["meta"]


def test_a_writer_with_one_more_block_in_flight_stores_the_same_bytes(tmp_path):
    """``in_flight=1`` (capture on a device) records blocks one later, never fewer at the end."""
    from tests.conftest import synthetic_arrays

    arrays = synthetic_arrays(np.random.default_rng(0), n=90, length=12, n_layers=2)
    out = {}
    for k in (0, 1):
        st = Store.create(str(tmp_path / f"s{k}.zarr"))
        st.add_run("r0", task="parity", arch="x", seed=0)
        hidden = arrays["hidden"]
        with st.length_writer("r0", 12, n_sequences=90, n_layers=2, n_features=hidden.shape[-1],
                              labels=["parity"], block_size=20, in_flight=k) as w:
            recorded = []
            for b in range(w.n_blocks):
                lo, hi = w.block_range(b)
                w.write_block(b, hidden=hidden[lo:hi], tokens=arrays["tokens"][lo:hi],
                              labels={"parity": arrays["labels"]["parity"][lo:hi]})
                recorded.append(len(w._recorded()))
        assert recorded == ([0, 1, 2, 3, 4] if k == 0 else [0, 0, 1, 2, 3])
        out[k] = _arrays(st, "r0", 12)
        assert validate(st).ok
    _same(out[0], out[1])
