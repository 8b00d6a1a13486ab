"""A profile claim across parts decided from what the parts kept: each part's per-seed profiles
(results/claim_profiles, a report's tables/claim_profiles.csv) give the same row as one store
holding every task, after the stores themselves are gone."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from analysis.claims import combine_parts, evaluate_claims, parse_claims
from analysis.claims.combine import read_part, read_profiles
from analysis.claims.evaluate import stored_probe_profiles
from analysis.claims.profiles import CLAIM_PROFILES, COLUMNS
from analysis.claims.spec import StaleResultError
from analysis.claims.stored import evaluate_stored_claims, keep_profiles
from layerstate.experiment import load_claims
from store import Store
from tests.analysis.claims.test_view import CLAIMS as VIEW_CLAIMS
from tests.analysis.claims.test_view import SHAPES, _part

ROW = "s3-like-parity[lstm]"
#: every part holds claims of its own besides the profile claim none of them can evaluate alone
CLAIMS = [*VIEW_CLAIMS, *({"id": f"{t}-late", "statement": f"{t} readable by L3", "kind": "readable_by",
                           "metric": "probe_accuracy", "task": t, "arch": "lstm", "layer": "L3", "threshold": 0.9,
                           "length": 40} for t in ("parity", "s3"))]


def _own(task: str):
    claims = parse_claims(CLAIMS)
    own = [c for c in claims if c.kind != "profile_match" and c.task == task]
    return own, [c for c in claims if c not in own]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """Three parts, each evaluated as `layerstate run --task` does (its own claims; the rest
    absent), their reports built; and one store holding all three tasks."""
    from reports import build_report

    base = tmp_path_factory.mktemp("kept")
    whole = Store.create(str(base / "whole.zarr"))
    reports = {}
    for i, t in enumerate(SHAPES):
        st = _part(base / f"{t}.zarr", t, np.random.default_rng(i))
        _part(None, t, np.random.default_rng(i), into=whole)
        own, absent = _own(t)
        evaluate_stored_claims(st, own, absent=absent)
        reports[t] = build_report(st, base / f"report-{t}", check_chunks=False).parent
    one = evaluate_claims(whole, parse_claims(CLAIMS), probes=stored_probe_profiles(whole))
    return base, reports, one


def test_each_part_keeps_the_profiles_of_its_own_task(kept):
    base, reports, _ = kept
    for t in SHAPES:
        st = Store.open(str(base / f"{t}.zarr"))
        frame = read_profiles(str(base / f"{t}.zarr"))
        assert frame is not None and list(frame.columns) == list(COLUMNS)
        assert set(frame["task"]) == {t} and set(frame["claim"]) == {ROW}
        assert sorted(set(frame["seed"])) == list(range(5)) and len(frame) == 5 * 5
        # the numbers are the stored probe profile's, seed by seed and layer by layer
        probes = st.read_result(f"probes/{t}")
        got = frame.set_index(["seed", "layer"])["accuracy"]
        for s in range(5):
            want = probes["profile"].sel(run=f"{t}-lstm-{s}", length=40).values
            assert got.loc[s].reindex(["embed", "L0", "L1", "L2", "L3"]).to_numpy() == pytest.approx(want, abs=0)
        csv = pd.read_csv(reports[t] / "tables" / f"{CLAIM_PROFILES}.csv")
        assert len(csv) == len(frame)


@pytest.mark.parametrize("source", ["store", "report"])
def test_a_claim_across_parts_is_decided_from_the_kept_profiles_as_one_store_decides_it(kept, source):
    base, reports, one = kept
    paths = [str(base / f"{t}.zarr") if source == "store" else str(reports[t]) for t in SHAPES]
    parts = [(p, read_part(p)) for p in paths]
    profiles = [(p, read_profiles(p)) for p in paths]
    combined = combine_parts(parse_claims(CLAIMS), parts, profiles=[(p, k) for p, k in profiles if k is not None])
    row, want = combined.sel(claim=ROW), one.sel(claim=ROW)
    assert str(row.part.values).startswith("profiles: ") and str(row.verdict.values) == "supported"
    for col in ("estimate", "lower", "upper", "p", "min_p", "p_adjusted", "treatment_mean", "n_seeds"):
        assert float(row[col]) == float(want[col]), col  # the same numbers, to the last bit
    assert str(combined.sel(claim="dyck-early").verdict.values) == str(one.sel(claim="dyck-early").verdict.values)
    # without the kept profiles the claim is not evaluable, and says what would decide it
    without = combine_parts(parse_claims(CLAIMS), parts)
    assert str(without.sel(claim=ROW).verdict.values) == "not evaluable"


def test_the_combine_command_reads_report_folders(kept, tmp_path):
    from layerstate.cli import main

    base, reports, _ = kept
    exp = tmp_path / "claims.toml"
    exp.write_text("".join("[[claims]]\n" + "".join(
        f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    res = CliRunner().invoke(main, ["combine", *map(str, reports.values()), "--claims", str(exp)])
    assert res.exit_code == 0, res.output
    assert f"{ROW}: supported" in res.output


def test_combine_does_not_repeat_what_the_files_grid_of_3_seeds_can_reach(kept, tmp_path):
    # the experiment's [grid] holds 3 seeds, which cannot decide a profile claim; the parts hold
    # 5 each and decide it, so the file's warning would be noise here
    from layerstate.cli import main

    _, reports, _ = kept
    exp = tmp_path / "exp.toml"
    exp.write_text('[experiment]\nname = "x"\n[grid]\ntasks = ["parity", "s3", "dyck"]\narchs = ["lstm"]\n'
                   'seeds = [0, 1, 2]\n' + "".join("[[claims]]\n" + "".join(
                       f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    with pytest.warns(UserWarning, match="cannot be supported with 3 seeds"):
        load_claims(exp)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = CliRunner().invoke(main, ["combine", *map(str, reports.values()), "--claims", str(exp)])
    assert res.exit_code == 0, res.output
    assert f"{ROW}: supported" in res.output
    assert not [w for w in seen if "cannot be supported" in str(w.message)]


def test_a_task_no_part_kept_is_named(kept):
    base, reports, _ = kept
    paths = [str(reports[t]) for t in ("parity", "s3")]
    combined = combine_parts(parse_claims(CLAIMS), [(p, read_part(p)) for p in paths],
                             profiles=[(p, read_profiles(p)) for p in paths])
    row = combined.sel(claim=ROW)
    assert str(row.verdict.values) == "not evaluable" and "hold dyck" in str(row.test.values)


def test_a_task_kept_by_two_parts_or_at_another_length_leaves_the_row_not_evaluable(kept, tmp_path):
    base, reports, _ = kept
    twice = tmp_path / "again"
    shutil.copytree(reports["dyck"], twice)
    paths = [str(reports[t]) for t in SHAPES] + [str(twice)]
    combined = combine_parts(parse_claims(CLAIMS), [(p, read_part(p)) for p in paths[:3]],
                             profiles=[(p, read_profiles(p)) for p in paths])
    row = combined.sel(claim=ROW)
    assert str(row.verdict.values) == "not evaluable" and "both keep task 'dyck'" in str(row.test.values)
    assert str(combined.sel(claim="dyck-early").verdict.values) != "not evaluable"  # the others are decided
    # the file now reads the claim at another length than the parts kept: another question
    other = parse_claims([{**c, "length": 20} if c["kind"] == "profile_match" else c for c in CLAIMS])
    paths = paths[:3]
    combined = combine_parts(other, [(p, read_part(p)) for p in paths], profiles=[(p, read_profiles(p)) for p in paths])
    assert "kept its profiles at length 40, and the claim now reads length 20" in str(
        combined.sel(claim=ROW).test.values)


def test_profiles_kept_before_more_seeds_were_trained_are_not_read(kept, tmp_path):
    base, _, _ = kept
    path = tmp_path / "dyck.zarr"
    shutil.copytree(base / "dyck.zarr", path)
    st = Store.open(str(path), mode="r+")
    st.add_run("dyck-lstm-5", task="dyck", arch="lstm", seed=5)
    with pytest.raises(StaleResultError, match="kept claim profiles are out of date"):
        read_profiles(str(path))


def test_a_part_without_claims_of_its_own_keeps_the_profiles_and_its_report_writes_them(tmp_path):
    from reports import build_report

    st = _part(tmp_path / "s3.zarr", "s3", np.random.default_rng(1))
    assert not keep_profiles(st, [c for c in parse_claims(CLAIMS) if c.kind != "profile_match"])
    assert keep_profiles(st, parse_claims(CLAIMS))  # the grid's profile claim, absent from this part
    folder = build_report(st, tmp_path / "report", check_chunks=False).parent
    frame = read_profiles(str(folder))
    assert frame is not None and set(frame["task"]) == {"s3"} and len(frame) == 25
    # combine takes such a part, from its store or its report: no claim rows, its profiles
    for where in (str(tmp_path / "s3.zarr"), str(folder)):
        assert read_part(where).empty


def test_combine_takes_a_part_without_claims_of_its_own(kept, tmp_path):
    from layerstate.cli import main

    base, reports, _ = kept
    st = _part(tmp_path / "s3.zarr", "s3", np.random.default_rng(1))  # the S3 part, no claim of its own
    keep_profiles(st, parse_claims(CLAIMS))
    exp = tmp_path / "claims.toml"
    exp.write_text("".join("[[claims]]\n" + "".join(
        f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    res = CliRunner().invoke(main, ["combine", str(reports["parity"]), str(reports["dyck"]), str(tmp_path / "s3.zarr"),
                                    "--claims", str(exp)])
    assert res.exit_code == 0, res.output
    assert f"{ROW}: supported" in res.output and "s3-late: not evaluable" in res.output


def test_a_report_leaves_out_profiles_kept_before_more_seeds_were_trained(kept, tmp_path):
    from reports import build_report

    base, _, _ = kept
    shutil.copytree(base / "dyck.zarr", tmp_path / "dyck.zarr")
    st = Store.open(str(tmp_path / "dyck.zarr"), mode="r+")
    st.add_run("dyck-lstm-5", task="dyck", arch="lstm", seed=5)
    folder = build_report(st, tmp_path / "report", check_chunks=False).parent
    assert not (folder / "tables" / f"{CLAIM_PROFILES}.csv").exists()
