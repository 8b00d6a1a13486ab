"""Claims across stores: the parts of a grid, each task in its own store, read as one view, so a
profile claim comparing Parity, S3 and Dyck is evaluated where the cells lie; nothing is copied."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from analysis.claims import combine_parts, evaluate_claims, parse_claims
from analysis.claims.evaluate import stored_probe_profiles
from store import Store
from store.view import ReadOnlyViewError, StoreView

SHAPES = {"parity": [0.5, 0.52, 0.55, 0.6, 0.98], "s3": [0.2, 0.22, 0.25, 0.3, 0.97],
          "dyck": [0.6, 0.95, 0.97, 0.98, 0.98]}
LAYERS = ["embed", "L0", "L1", "L2", "L3"]
CLAIMS = [
    {"id": "s3-like-parity", "statement": "S3 matches Parity, not Dyck", "kind": "profile_match",
     "metric": "probe_accuracy", "task": "s3", "matches": "parity", "differs_from": "dyck", "archs": ["lstm"],
     "length": 40},
    {"id": "dyck-early", "statement": "Dyck readable by L0", "kind": "readable_by", "metric": "probe_accuracy",
     "task": "dyck", "arch": "lstm", "layer": "L0", "threshold": 0.9, "length": 40},
]


def _part(path, task: str, rng, into: Store | None = None) -> Store:
    st = into or Store.create(str(path))
    runs, prof = [], []
    for seed in range(5):
        rid = f"{task}-lstm-{seed}"
        st.add_run(rid, task=task, arch="lstm", seed=seed)
        runs.append(rid)
        prof.append(np.clip(np.array(SHAPES[task]) + rng.normal(0, 0.01, 5), 0, 1))
    st.write_result(f"probes/{task}", xr.Dataset(
        {"profile": (("run", "length", "layer"), np.array(prof)[:, None, :])},
        coords={"run": runs, "length": [40], "layer": LAYERS}, attrs={"analysis": "probes"}))
    return st


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    base = tmp_path_factory.mktemp("view")
    stores = {t: _part(base / f"{t}.zarr", t, np.random.default_rng(i)) for i, t in enumerate(SHAPES)}
    whole = Store.create(str(base / "whole.zarr"))
    for i, t in enumerate(SHAPES):
        _part(None, t, np.random.default_rng(i), into=whole)
    return base, stores, whole


def test_a_claim_over_three_parts_decides_as_one_store_holding_them_all(parts):
    base, stores, whole = parts
    claims = parse_claims(CLAIMS)
    one = evaluate_claims(whole, claims, probes=stored_probe_profiles(whole))
    view = StoreView(list(stores.values()))
    assert sorted(view.run_ids()) == sorted(whole.run_ids()) and len(view.runs()) == 15
    # each part alone holds one task: the profile claim is not evaluable there, the rest is
    dyck = evaluate_claims(stores["dyck"], claims[1:], probes=stored_probe_profiles(stores["dyck"]),
                           absent=claims[:1])
    combined = combine_parts(claims, [("dyck", dyck)], view=view)
    row = combined.sel(claim="s3-like-parity[lstm]")
    assert str(row.part.values) == "view" and str(row.verdict.values) == str(
        one.sel(claim="s3-like-parity[lstm]").verdict.values) == "supported"
    for col in ("estimate", "p", "p_adjusted"):
        assert float(row[col]) == pytest.approx(float(one.sel(claim="s3-like-parity[lstm]")[col]))
    without = combine_parts(claims, [("dyck", dyck)])
    assert str(without.sel(claim="s3-like-parity[lstm]").verdict.values) == "not evaluable"
    with pytest.raises(ReadOnlyViewError, match="read-only"):
        view.write_result("x", xr.Dataset())


def test_a_run_in_two_parts_is_refused(parts):
    _, stores, whole = parts
    with pytest.raises(ValueError, match="is in two parts"):
        StoreView([stores["dyck"], whole])


def test_the_combine_command_evaluates_claims_across_part_stores(parts, tmp_path):
    from layerstate.cli import main

    base, stores, _ = parts
    exp = tmp_path / "claims.toml"
    exp.write_text("".join("[[claims]]\n" + "".join(
        f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    for t, st in stores.items():  # each part evaluated its own claims, as `layerstate run --task` does
        own = [c for c in parse_claims(CLAIMS) if c.task == t and c.kind != "profile_match"]
        if own:
            st.write_result("claims", evaluate_claims(st, own, probes=stored_probe_profiles(st)))
    paths = [str(base / f"{t}.zarr") for t in ("dyck",)] + [str(base / f"{t}.zarr") for t in ("parity", "s3")]
    for t in ("parity", "s3"):  # parts without claims of their own still hold a claims table
        stores[t].write_result("claims", stores["dyck"].read_result("claims").isel(claim=[]))
    res = CliRunner().invoke(main, ["combine", *paths, "--claims", str(exp)])
    assert res.exit_code == 0, res.output
    assert "s3-like-parity[lstm]: supported" in res.output
