"""zarr's format notices kept off the terminal. (The package's import graph is checked by the
import-linter contracts in pyproject.toml, ``make lint``.)"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from store import Store, validate
from tests.conftest import synthetic_arrays


def test_ordinary_use_shows_no_zarr_format_notices_and_leaves_no_filter(tmp_path):
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        st = Store.create(str(tmp_path / "s.zarr"))
        st.add_run("r0", task="parity", arch="lstm", seed=0)
        st.write_length("r0", 12, **synthetic_arrays(np.random.default_rng(0), n=8))
        st.write_weights("r0", {"w": np.ones((2, 3))})
        st.write_result("r", xr.Dataset({"name": ("x", np.array(["a", "b"]))}))
        ro = Store.open(str(tmp_path / "s.zarr"))
        ro.compute(ro.open_length("r0", 12).hidden)
        ro.load_length("r0", 12)
        ro.read_result("r")
        assert validate(ro).ok
        Store.open(str(tmp_path / "s.zarr"), mode="r+").add_run("r1", task="parity", arch="lstm", seed=1)
    assert [str(w.message) for w in caught] == []
    assert warnings.filters == filters
