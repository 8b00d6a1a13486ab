"""Writing a result reads no metadata document above it: zarr's check that no parent of a new
array is an array parsed the store root's document (every node's snapshot: 4 MB, 0.11 s an array
on the demo store) once per array; through a view rooted at the result it parses the result's."""

from __future__ import annotations

import numpy as np
import xarray as xr
import zarr.storage._common as zarr_common

from store import Store


def test_a_result_write_checks_no_parent_above_the_result(tmp_path, monkeypatch):
    st = Store.create(str(tmp_path / "s.zarr"))
    ds = xr.Dataset({f"v{i}": (("run", "x"), np.arange(6.0).reshape(2, 3)) for i in range(5)},
                    coords={"run": ["a", "b"]}, attrs={"setting": 1})
    st.write_result("probes/first", ds)
    checked, real = [], zarr_common._contains_node_v3

    async def spy(store_path):
        checked.append((str(store_path.path), getattr(store_path.store, "prefix", "")))
        return await real(store_path)

    monkeypatch.setattr(zarr_common, "_contains_node_v3", spy)
    st.write_result("probes/second", ds)
    st.write_result("probes/second", ds.assign(v0=ds.v0 * 2))  # written again, replaced whole
    assert checked and all(prefix == "results/probes/second" for _, prefix in checked), checked
    again = Store.open(str(tmp_path / "s.zarr"))
    assert set(again.results()) >= {"probes/first", "probes/second"}
    back = again.read_result("probes/second")
    xr.testing.assert_identical(back.drop_attrs(), ds.assign(v0=ds.v0 * 2).drop_attrs())
    assert back.attrs["setting"] == 1
