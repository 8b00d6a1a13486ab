"""Removing results, captures and runs (store.contents.forget, `layerstate forget`)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from layerstate.cli import main
from store import MissingError, Store, validate
from tests.conftest import synthetic_arrays


def _full_store(make_store):
    st = make_store(runs=("r0", "r1"), lengths=(12, 20))
    st.write_weights("r0", {"w": np.ones((3, 2), dtype="float32")})
    st.write_result("probes/parity", xr.Dataset({"accuracy": ("run", [0.5, 0.6])},
                                                coords={"run": ["r0", "r1"]}))
    return st


def test_forgetting_captures_keeps_the_run_and_a_valid_store(make_store):
    st = _full_store(make_store)
    assert st.forget_captures("r0", [20]) == ["len_020"]
    fresh = Store.open(str(st.location.local_path))
    assert fresh.lengths("r0") == [12] and fresh.lengths("r1") == [12, 20]
    assert fresh.has_weights("r0")
    assert validate(str(st.location.local_path)).ok
    # the length can be captured again, with another dtype (a complete group would refuse it)
    arrs = synthetic_arrays(np.random.default_rng(1), n=64, length=20)
    st.write_length("r0", 20, **arrs, block_size=16, dtype="float32")
    assert Store.open(str(st.location.local_path)).load_length("r0", 20).hidden.dtype == np.float32
    with pytest.raises(MissingError, match="no captures at length.*its captured lengths: 12, 20"):
        st.forget_captures("r0", [40])


def test_forgetting_a_run_and_a_result(make_store):
    st = _full_store(make_store)
    st.forget_run("r0")
    st.forget_result("probes/parity")
    fresh = Store.open(str(st.location.local_path))
    assert fresh.run_ids() == ["r1"] and fresh.results() == []
    assert validate(str(st.location.local_path)).ok
    with pytest.raises(MissingError, match="no result 'probes/parity'"):
        st.forget_result("probes/parity")
    # the run id can be used again
    st.add_run("r0", task="parity", arch="gru", seed=5)
    assert Store.open(str(st.location.local_path)).run_attrs("r0")["arch"] == "gru"


def test_a_read_only_store_is_not_changed(make_store):
    st = _full_store(make_store)
    ro = Store.open(str(st.location.local_path))
    with pytest.raises(Exception, match="read-only"):
        ro.forget_run("r0")
    assert Store.open(str(st.location.local_path)).run_ids() == ["r0", "r1"]


def test_cli_forget(make_store):
    st = _full_store(make_store)
    path = str(st.location.local_path)
    cli = CliRunner()
    res = cli.invoke(main, ["forget", path, "--runs", "r0", "--captures", "--lengths", "20", "--dry-run"])
    assert res.exit_code == 0 and "would remove r0: len_020" in res.output
    assert Store.open(path).lengths("r0") == [12, 20]
    res = cli.invoke(main, ["forget", path, "--runs", "r0", "--captures", "--lengths", "20"])
    assert res.exit_code == 0 and "removed r0: len_020" in res.output
    assert Store.open(path).lengths("r0") == [12]
    # whole runs need --yes; nothing is removed without it
    res = cli.invoke(main, ["forget", path, "--runs", "r1"])
    assert res.exit_code == 2 and "deletes their weights; pass --yes" in res.output
    assert Store.open(path).run_ids() == ["r0", "r1"]
    res = cli.invoke(main, ["forget", path, "--runs", "r1", "--yes", "--result", "probes/parity"])
    assert res.exit_code == 0, res.output
    assert Store.open(path).run_ids() == ["r0"] and Store.open(path).results() == []
    for args, message in [
        ([], "name what to forget"),
        (["--runs", "r0", "--lengths", "12"], "--lengths applies to --captures"),
        (["--result", "nope"], "no result 'nope'"),
        (["--runs", "zz", "--captures"], "no run 'zz'"),
        (["--runs", "r0", "--captures", "--lengths", "99"], "hold no captures at length(s) [99]"),
    ]:
        res = cli.invoke(main, ["forget", path, *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)
    assert validate(path).ok


def test_forgetting_the_captures_of_a_run_that_has_none_names_that(make_store):
    st = make_store(runs=("r0",), lengths=(12,))
    st.forget_captures("r0")
    with pytest.raises(MissingError, match=r"run 'r0' has no captures; its captured lengths: \(none\)"):
        st.forget_captures("r0")
