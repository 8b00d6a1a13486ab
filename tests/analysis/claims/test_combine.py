"""Combining the parts of a grid: the parts' claims, corrected once over the declared family,
give exactly the verdicts one store holding the whole grid gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from analysis.claims import ClaimError, combine_parts, evaluate_claims, parse_claims, read_part
from reports.claims import claims_frame
from store import Store
from tests.analysis.claims.test_claims import _write_run

RAW = [
    {"id": "s3-drop", "statement": "Removing Conv1D lowers Mamba's S3 accuracy", "kind": "difference",
     "task": "s3", "arch": "mamba", "treatment": "no_conv", "reference": "default",
     "direction": "less", "length": 12, "margin": 0.05},
    {"id": "s3-small", "statement": "Removing Conv1D costs S3 less than 2 pp", "kind": "equivalence",
     "task": "s3", "arch": "mamba", "treatment": "no_conv", "reference": "default", "margin": 0.02,
     "length": 12},
    {"id": "s3-gee", "statement": "Removing Conv1D lowers S3 accuracy (GEE)", "kind": "difference",
     "task": "s3", "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less",
     "length": 12, "margin": 0.05, "model": "gee"},
    {"id": "dyck-null", "statement": "Removing Conv1D leaves Dyck accuracy within ±5 pp",
     "kind": "equivalence", "task": "dyck", "arch": "mamba", "treatment": "no_conv",
     "reference": "default", "margin": 0.05, "length": 12},
    {"id": "dyck-diff", "statement": "Removing Conv1D changes Dyck accuracy", "kind": "difference",
     "task": "dyck", "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 12},
    {"id": "dyck-above", "statement": "Mamba's Dyck accuracy is above 0.8", "kind": "bound",
     "metric": "accuracy", "task": "dyck", "arch": "mamba", "threshold": 0.8, "direction": "greater",
     "length": 12},
]
CLAIMS = parse_claims(RAW)
S3 = [c for c in CLAIMS if c.task == "s3"]
DYCK = [c for c in CLAIMS if c.task == "dyck"]
DECIDED = ("verdict", "outcome", "reason", "p_adjusted", "p_zero_adjusted", "p_equivalence_adjusted",
           "p_margin_adjusted", "crosscheck_verdict", "disagreement")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """4 seeds of a 3 pp S3 drop (close to the margins, so Holm's family size moves verdicts)
    and no Dyck drop; the whole store and its two parts' claims."""
    st = Store.create(str(tmp_path_factory.mktemp("combine") / "s.zarr"))
    rng = np.random.default_rng(3)
    with st.deferred_consolidation():
        for seed in range(4):
            offset = rng.normal(0, 0.02)
            for task, drop in (("s3", 0.06), ("dyck", 0.0)):
                base = 0.85 + offset
                _write_run(st, f"{task}-d-{seed}", task, "default", seed, base, rng, n=300)
                _write_run(st, f"{task}-n-{seed}", task, "no_conv", seed, base - drop, rng, n=300)
    whole = evaluate_claims(st, CLAIMS)
    parts = {"s3": evaluate_claims(st, S3, absent=DYCK), "dyck": evaluate_claims(st, DYCK, absent=S3)}
    return whole, parts


def _same(a, b, cols=DECIDED):
    for col in cols:
        x, y = a[col].values, b[col].values
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=0, err_msg=col)
        else:
            assert list(x) == list(y), col


def test_combined_parts_decide_as_the_whole_grid_does(grid):
    whole, parts = grid
    combined = combine_parts(CLAIMS, list(parts.items()))
    assert list(combined.claim.values) == list(whole.claim.values)
    _same(combined, whole)
    assert list(combined.part.values) == ["s3"] * 3 + ["dyck"] * 3
    assert set(combined.crosscheck_from.values) <= {"combined", ""} and "combined" in combined.crosscheck_from
    # each part alone was corrected against the worst case: never below the combined p
    for part in parts.values():
        held = combined.sel(claim=part.claim.values)
        assert (part.p_adjusted.values >= held.p_adjusted.values - 1e-12).all()
    # and strictly above it where a part's claim ranks behind another part's smaller p
    assert float(parts["dyck"].p_adjusted.sel(claim="dyck-null")) > float(combined.p_adjusted.sel(claim="dyck-null"))


def test_combined_from_the_reports_csv_tables_decides_the_same(grid, tmp_path):
    whole, parts = grid
    tables = []
    for name, part in parts.items():
        path = tmp_path / name / "tables" / "claims.csv"
        path.parent.mkdir(parents=True)
        claims_frame(part).to_csv(path, index=False)  # what a report writes
        tables.append((name, read_part(tmp_path / name)))  # the report folder finds its table
    assert all(isinstance(t, pd.DataFrame) for _, t in tables)
    _same(combine_parts(CLAIMS, tables), whole)


def test_a_part_stored_before_the_cross_check_kept_its_se_keeps_its_own_cross_check_verdict(grid):
    whole, parts = grid
    old = {n: p.drop_vars(["crosscheck_se", "crosscheck_df"]) for n, p in parts.items()}
    combined = combine_parts(CLAIMS, list(old.items()))
    _same(combined, whole, cols=("verdict", "reason", "p_adjusted"))
    has_cross = combined.crosscheck_model.values != ""
    assert (combined.crosscheck_from.values[has_cross] == "part").all()
    part_verdicts = np.concatenate([parts["s3"].crosscheck_verdict.values, parts["dyck"].crosscheck_verdict.values])
    assert list(combined.crosscheck_verdict.values) == list(part_verdicts)


def test_a_part_not_given_counts_with_p_one_as_each_part_did(grid):
    whole, parts = grid
    alone = combine_parts(CLAIMS, [("s3", parts["s3"])])
    s3 = alone.sel(claim=[c.id for c in S3])
    _same(s3, parts["s3"], cols=("verdict", "p_adjusted", "p_zero_adjusted", "p_equivalence_adjusted"))
    dyck = alone.sel(claim=[c.id for c in DYCK])
    assert set(dyck.verdict.values) == {"not evaluable"}
    assert all("no part given evaluated it (it reads task dyck; add the part that ran it)" in str(t) for t in dyck.test.values)
    assert alone.attrs["absent_claims"] == [c.id for c in DYCK] and "count with p = 1" in alone.attrs["correction"]


def test_parts_that_do_not_belong_together_are_refused(grid, tmp_path):
    _, parts = grid
    with pytest.raises(ClaimError, match="does not declare"):
        combine_parts(S3, list(parts.items()))
    changed = parts["s3"].assign(statement=("claim", np.array(["another"] * 3)))
    with pytest.raises(ClaimError, match="another statement"):
        combine_parts(CLAIMS, [("s3", changed), ("dyck", parts["dyck"])])
    moved = parts["s3"].assign(p=parts["s3"].p * 0.5)
    with pytest.raises(ClaimError, match="evaluated differently in parts s3 and again"):
        combine_parts(CLAIMS, [("s3", parts["s3"]), ("again", moved)])
    # the same part given twice is harmless
    _same(combine_parts(CLAIMS, [("s3", parts["s3"]), ("s3b", parts["s3"]), ("dyck", parts["dyck"])]), grid[0])
    hidden = claims_frame(parts["dyck"]).assign(interval_note="too few seeds", lower=np.nan, upper=np.nan)
    with pytest.raises(ClaimError, match="interval is hidden in this table"):
        combine_parts(CLAIMS, [("dyck", hidden)])
    with pytest.raises(ClaimError, match="no parts to combine"):
        combine_parts(CLAIMS, [])
    # a combined table is not a part: its rows for absent claims would leave the family
    with pytest.raises(ClaimError, match="is a combined table already"):
        combine_parts(CLAIMS, [("combined", combine_parts(CLAIMS, [("s3", parts["s3"])]))])
    # a part evaluated under a claim since edited answers another question
    edited = parse_claims([{**RAW[0], "margin": 0.5}, *RAW[1:]])
    with pytest.raises(ClaimError, match="another margin"):
        combine_parts(edited, list(parts.items()))
    flipped = parse_claims([{**RAW[0], "direction": "greater"}, *RAW[1:]])
    with pytest.raises(ClaimError, match="another test"):
        combine_parts(flipped, list(parts.items()))
    raised = parse_claims([*RAW[:5], {**RAW[5], "threshold": 0.7}])
    with pytest.raises(ClaimError, match="another threshold"):
        combine_parts(raised, list(parts.items()))
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("# a report of a store without claims\n")
    with pytest.raises(ClaimError, match="a report without a claims table"):
        read_part(report)


def test_combine_command_prints_and_writes_the_table(grid, tmp_path):
    import json

    from click.testing import CliRunner

    from layerstate.cli import main

    _, parts = grid
    claims = tmp_path / "claims.toml"
    claims.write_text("".join("[[claims]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
                              for table in RAW))
    paths = []
    for name, part in parts.items():
        path = tmp_path / f"{name}.csv"
        claims_frame(part).to_csv(path, index=False)
        paths.append(str(path))
    out = tmp_path / "combined"
    res = CliRunner().invoke(main, ["combine", *paths, "--claims", str(claims), "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("s3-drop: ") and len(lines) == len(CLAIMS) + 2
    table = pd.read_csv(out / "claims.csv")
    assert list(table["claim"]) == [c.id for c in CLAIMS] and "part" in table
    md = (out / "claims.md").read_text()
    assert md.count("\n| ") == len(CLAIMS) + 1 and "| s3-drop |" in md and "combined over 2 parts" in md
    res = CliRunner().invoke(main, ["combine", str(tmp_path / "nope.csv"), "--claims", str(claims)])
    assert res.exit_code != 0 and "no such claims table" in res.output


def test_a_part_is_read_from_its_store_and_a_store_without_claims_is_named(tmp_path):
    from analysis.claims import evaluate_stored_claims
    from store import MissingError

    st = Store.create(str(tmp_path / "part.zarr"))
    rng = np.random.default_rng(0)
    with st.deferred_consolidation():
        for seed in range(3):
            for variant, p in (("default", 0.85), ("no_conv", 0.8)):
                _write_run(st, f"dyck-{variant}-{seed}", "dyck", variant, seed, p, rng)
    with pytest.raises(MissingError, match="holds no evaluated claims.*layerstate stats"):
        read_part(str(tmp_path / "part.zarr"))
    stored = evaluate_stored_claims(st, DYCK, absent=S3)
    read = read_part(str(tmp_path / "part.zarr"))
    assert list(read.claim.values) == list(stored.claim.values)
    np.testing.assert_array_equal(read.p.values, stored.p.values)
    combined = combine_parts(CLAIMS, [("part.zarr", read)])
    assert list(combined.part.values) == [""] * 3 + ["part.zarr"] * 3


def test_probe_claims_combine_as_the_whole_store_decides_them(tmp_path):
    """A profile_match claim (one row per architecture), readable_by claims supported and
    contradicted, and a part's own not-evaluable claim. 8 seeds: the exact sign test that decides
    readable_by claims (docs/ceiling.md) cannot decide 5 in a family of four. By hand: Dyck's 8 of 8
    above 0.9 give p = 1/256, at most 4/256 after Holm; Parity's 8 of 8 below give its opposite
    side p = 2/256 at the two-sided level, at most 3 x 2/256 after Holm: both below 0.05."""
    from tests.analysis.claims.test_claims import PROFILE_CLAIMS, _fake_probes

    st = Store.create(str(tmp_path / "p.zarr"))
    probes = _fake_probes(st, np.random.default_rng(0), n_seeds=8)
    st.add_run("parity-gru-0", task="parity", arch="gru", seed=0)  # one seed: not evaluable
    one = probes.isel(run=[0]).assign_coords(run=["parity-gru-0"])
    probes = xr.concat([probes, one], dim="run")
    raw = [*PROFILE_CLAIMS,
           {"id": "parity-early", "statement": "Parity readable by L0", "kind": "readable_by",
            "metric": "probe_accuracy", "task": "parity", "arch": "lstm", "layer": "L0", "threshold": 0.9},
           {"id": "gru-early", "statement": "A GRU readable by L0", "kind": "readable_by",
            "metric": "probe_accuracy", "task": "parity", "arch": "gru", "layer": "L0", "threshold": 0.9}]
    claims = parse_claims(raw)
    whole = evaluate_claims(st, claims, probes=probes)
    assert dict(zip(whole.claim.values, whole.verdict.values, strict=True)) == {
        "s3-like-parity[lstm]": "supported", "dyck-early": "supported", "parity-early": "contradicted",
        "gru-early": "not evaluable"}
    first, second = claims[:2], claims[2:]
    parts = [("a", evaluate_claims(st, first, probes=probes, absent=second)),
             ("b", evaluate_claims(st, second, probes=probes, absent=first))]
    combined = combine_parts(claims, parts)
    _same(combined, whole, cols=(*DECIDED, "p_contra", "p_contra_adjusted"))
    assert list(combined.claim.values) == ["s3-like-parity[lstm]", "dyck-early", "parity-early", "gru-early"]
