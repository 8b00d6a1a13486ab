"""Sharing: zip packs, fsspec URLs (memory, S3 via moto) and plain-xarray interoperability.

The backends share one round-trip check, like xarray's test_backends.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
import zipfile

import numpy as np
import pytest

from store import Store, UnsafeArchiveError, pack, unpack, validate
from tests.conftest import synthetic_arrays


def _write_and_read_back(url: str, storage_options: dict | None = None) -> None:
    arrs = synthetic_arrays(np.random.default_rng(3), n=40)
    st = Store.create(url, title="backend", storage_options=storage_options)
    st.add_run("r0", task="parity", arch="gru", seed=1)
    st.write_length("r0", 12, **arrs, block_size=16)
    st.write_weights("r0", {"w": np.eye(3, dtype="float32")})
    back = Store.open(url, storage_options=storage_options)
    assert back.run_ids() == ["r0"]
    ds = back.open_length("r0", 12)
    np.testing.assert_array_equal(ds.hidden.values, arrs["hidden"].astype("float16"))
    np.testing.assert_array_equal(ds.parity.values, arrs["labels"]["parity"])
    np.testing.assert_array_equal(back.read_weights("r0")["w"], np.eye(3))
    assert validate(back).ok


def test_memory_url_round_trip():
    _write_and_read_back(f"memory://layerstate-{uuid.uuid4().hex}/s.zarr")


def test_s3_round_trip_against_moto(s3_server):
    pytest.importorskip("s3fs")
    _write_and_read_back(f"s3://layerstate-test/{uuid.uuid4().hex}.zarr", s3_server)


def test_pack_gives_one_file_every_reader_opens(make_store, tmp_path):
    st = make_store(runs=("r0", "r1"), n=40)
    out = pack(st, tmp_path / "shared.zip")
    z = Store.open(str(out))
    assert z.run_ids() == ["r0", "r1"]
    np.testing.assert_array_equal(z.open_length("r1", 12).hidden.values,
                                  st.open_length("r1", 12).hidden.values)
    assert validate(z).ok
    with pytest.raises(Exception, match="exists"):
        pack(st, out)
    back = unpack(out, tmp_path / "unpacked")
    assert Store.open(str(back)).run_ids() == ["r0", "r1"]


def test_zip_with_path_traversal_is_refused(make_store, tmp_path):
    out = pack(make_store(), tmp_path / "ok.zip")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(evil, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
        dst.writestr("../../escaped.txt", b"gotcha")
    with pytest.raises(UnsafeArchiveError, match="escapes the store root"):
        Store.open(str(evil))
    with pytest.raises(UnsafeArchiveError):
        unpack(evil, tmp_path / "target")
    assert not (tmp_path / "escaped.txt").exists()


READER = r"""
import sys, xarray as xr
assert "store" not in sys.modules and "layerstate" not in sys.modules
tree = xr.open_datatree(sys.argv[1], engine="zarr", zarr_format=3)
ds = tree["runs/r0/len_012"].to_dataset()
print(float(ds.hidden.isel(sequence=5, position=3, layer=1, feature=2)), list(ds.layer.values))
assert not any(m.startswith(("store", "capture", "analysis", "layerstate")) for m in sys.modules)
"""


@pytest.mark.parametrize("packed", [False, True])
def test_plain_xarray_opens_the_store_without_layerstate(make_store, tmp_path, packed):
    st = make_store(n=40)
    # plain xarray reads a packed store through fsspec's zip:: protocol (docs/guide/store-and-api.md)
    target = f"zip::{pack(st, tmp_path / 'x.zip')}" if packed else str(st.location)
    # run from a neutral directory so the project's packages are not importable by accident
    out = subprocess.run([sys.executable, "-I", "-c", READER, target], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    want = float(st.open_length("r0", 12).hidden.isel(sequence=5, position=3, layer=1, feature=2))
    value, layers = out.stdout.split(" ", 1)
    assert float(value) == want and "'embed', 'L0', 'L1'" in layers
