"""Checksums and validation: a damaged chunk is named, never read as garbage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from store import CorruptStoreError, Store, validate


def _chunk_file(st: Store, run="r0", group="len_012", var="hidden") -> Path:
    files = sorted((Path(str(st.location)) / "runs" / run / group / var / "c").rglob("*"))
    return [f for f in files if f.is_file()][0]


def test_healthy_store_validates(make_store):
    rep = validate(make_store(n=64, block_size=16))
    assert rep.ok, rep.problems
    assert rep.n_chunks > 20  # every chunk of every array was decoded


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_chunk_is_named_by_validate_and_refused_on_read(make_store, damage):
    st = make_store(n=64, block_size=16)
    f = _chunk_file(st)
    raw = bytearray(f.read_bytes())
    if damage == "flip":
        raw[10] ^= 0xFF
        f.write_bytes(bytes(raw))
    else:
        f.write_bytes(bytes(raw[: len(raw) // 2]))
    st = Store.open(str(st.location))
    rep = validate(st)
    assert not rep.ok
    assert any("runs/r0/len_012/hidden: chunk (0, 0, 0, 0)" in p and "corrupt" in p for p in rep.problems)
    with pytest.raises(CorruptStoreError, match=r"runs/r0/len_012/hidden: chunk \(0, 0, 0, 0\)"):
        st.compute(st.open_length("r0", 12).hidden)


def test_missing_chunk_of_a_completed_block_is_reported(make_store):
    st = make_store(n=64, block_size=16)
    _chunk_file(st, var="tokens").unlink()
    rep = validate(Store.open(str(st.location)))
    assert any("tokens: chunk (0, 0) is missing" in p for p in rep.problems)


def test_incomplete_length_is_a_warning_not_a_problem(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    w = st.length_writer("r0", 12, n_sequences=32, n_layers=2, n_features=8,
                         labels=["parity"], block_size=16)
    rng = np.random.default_rng(0)
    w.write_block(1, hidden=rng.standard_normal((16, 12, 3, 8)), tokens=np.zeros((16, 12), int),
                  labels={"parity": np.zeros((16, 12), int)})
    w.close()
    rep = validate(Store.open(str(st.location)))
    assert rep.ok, rep.problems
    assert any("incomplete, 1 of 2 blocks" in x for x in rep.warnings)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_load_length_names_a_damaged_chunk(make_store, damage):
    st = make_store(n=64, block_size=16)
    f = _chunk_file(st)
    raw = bytearray(f.read_bytes())
    f.write_bytes(bytes(raw[: len(raw) // 2]) if damage == "truncate" else bytes(raw[:10]) + bytes([raw[10] ^ 1]) + bytes(raw[11:]))
    with pytest.raises(CorruptStoreError, match=r"runs/r0/len_012/hidden: chunk \(0, 0, 0, 0\)"):
        Store.open(str(st.location)).load_length("r0", 12)


def test_a_failed_read_names_the_chunk_it_read_not_the_first_damage_in_the_store(make_store):
    """The chunk comes from the error itself: no scan of the store, which would name r0's."""
    st = make_store(runs=("r0", "r1"), n=64, block_size=16)
    for run in ("r0", "r1"):
        f = _chunk_file(st, run=run)
        raw = bytearray(f.read_bytes())
        raw[10] ^= 0xFF
        f.write_bytes(bytes(raw))
    st = Store.open(str(st.location))
    for read in (lambda: st.compute(st.open_length("r1", 12).hidden), lambda: st.load_length("r1", 12)):
        with pytest.raises(CorruptStoreError, match=r"runs/r1/len_012/hidden: chunk \(0, 0, 0, 0\)"):
            read()


def test_a_damaged_result_chunk_is_named_on_read(make_store):
    import xarray as xr

    st = make_store()
    st.write_result("probes/acc", xr.Dataset({"accuracy": ("layer", np.linspace(0.5, 1.0, 3))}))
    f = Path(str(st.location)) / "results" / "probes" / "acc" / "accuracy" / "c" / "0"
    raw = bytearray(f.read_bytes())
    raw[0] ^= 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=r"results/probes/acc/accuracy: chunk \(0,\)"):
        Store.open(str(st.location)).read_result("probes/acc")
