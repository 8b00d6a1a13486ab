"""A claim is decided only on results that hold every run the store has in its cells: a probe or
ablation result computed before more seeds were trained is refused in one line naming the command
that brings it up to date, a complete result is preferred to a stale one, and a choice between
complete results names what differs (settings and seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.claims import StaleResultError, evaluate_claims, parse_claims, stored_probe_profiles
from analysis.claims.spec import ClaimError, make_claim
from store import Store
from store.view import StoreView

LAYERS = ["embed", "L0", "L1"]
L = 12


def _store(path, n_seeds: int) -> Store:
    """Dyck, LSTM and GRU, ``n_seeds`` seeds each, captured at length 12."""
    st = Store.create(str(path))
    rng = np.random.default_rng(0)
    for arch in ("lstm", "gru"):
        for seed in range(n_seeds):
            rid = f"dyck-{arch}-s{seed}"
            st.add_run(rid, task="dyck", arch=arch, seed=seed)
            labels = rng.integers(0, 3, size=(16, L))
            st.write_length(rid, L, hidden=rng.standard_normal((16, L, 3, 4)).astype("float32"),
                            tokens=labels, labels={"state": labels})
    return st


def _probes(st: Store, name: str, seeds: int, level: float, **attrs) -> None:
    """A probe result over the first ``seeds`` seeds of each cell, profile ``level`` at L1."""
    runs = [r for r in st.run_ids() if int(st.run_attrs(r)["seed"]) < seeds]
    prof = np.tile(np.array([0.5, 0.6, level]), (len(runs), 1))[:, None, :]
    prof = prof + np.random.default_rng(seeds).normal(0, 0.01, prof.shape)
    ds = xr.Dataset({"profile": (("run", "length", "layer"), prof)},
                    coords={"run": runs, "length": [L], "layer": LAYERS}, attrs=attrs)
    st.write_result(name, ds)


CLAIM = {"id": "gru-readable-L1", "statement": "the GRU reads the state at L1", "kind": "readable_by",
         "task": "dyck", "arch": "gru", "layer": "L1", "threshold": 0.9, "length": L}


def _evaluate(st, **over):
    return evaluate_claims(st, parse_claims([CLAIM | over]), probes=stored_probe_profiles(st))


def test_a_readable_by_claim_reads_probes_whatever_its_metric():
    claim = make_claim(**CLAIM)
    assert claim.metric == "accuracy" and claim.reads() == "probes"
    assert make_claim(**CLAIM | {"kind": "bound", "direction": "greater"}).reads() == "behaviour"
    assert make_claim(**CLAIM | {"kind": "bound", "direction": "greater", "metric": "probe_accuracy"}).reads() == "probes"


def test_a_probe_result_lacking_seeds_the_store_holds_is_refused(tmp_path):
    st = _store(tmp_path / "s.zarr", 5)
    _probes(st, "probes/dyck", 3, 0.99, folds=5)
    with pytest.raises(StaleResultError) as err:
        _evaluate(st)
    msg = str(err.value)
    assert "probes/dyck" in msg and "dyck/gru seeds 3-4" in msg and "dyck/lstm" not in msg  # the claim's cells only
    assert "layerstate probe STORE --task dyck" in msg and "\n" not in msg


def test_the_complete_result_is_read_and_a_stage_view_reads_its_own_seeds(tmp_path):
    st = _store(tmp_path / "s.zarr", 5)
    _probes(st, "probes/dyck", 3, 0.80, folds=5)  # stale (seeds 0-2): would say 'contradicted'
    _probes(st, "probes/dyck-2", 5, 0.99, folds=5)
    res = _evaluate(st).sel(claim="gru-readable-L1")
    assert int(res.n_seeds) == 5 and str(res.result.item()) == "probes/dyck-2"
    # the first stage of a design (seeds 0-2): both results hold its runs, so it must be told which
    view = StoreView([st], seed_below=3)
    with pytest.raises(ClaimError, match=r"2 probe results hold every run.*probes/dyck \(folds 5.*dyck/gru seeds 0-2"):
        evaluate_claims(view, parse_claims([CLAIM]), probes=stored_probe_profiles(view))
    one = evaluate_claims(view, parse_claims([CLAIM | {"result": "dyck-2"}]),
                          probes=stored_probe_profiles(view)).sel(claim="gru-readable-L1")
    assert int(one.n_seeds) == 3


def test_a_choice_between_complete_results_says_what_differs(tmp_path):
    st = _store(tmp_path / "s.zarr", 3)
    _probes(st, "probes/dyck", 3, 0.99, folds=5)
    _probes(st, "probes/dyck-2", 3, 0.99, folds=2)
    with pytest.raises(ClaimError, match=r"probes/dyck \(folds 5; .*seeds 0-2\); probes/dyck-2 \(folds 2; .*seeds 0-2\)"):
        _evaluate(st)


def test_a_named_stale_result_is_refused_pointing_at_the_complete_one(tmp_path):
    st = _store(tmp_path / "s.zarr", 5)
    _probes(st, "probes/dyck", 3, 0.99)
    _probes(st, "probes/dyck-2", 5, 0.99)
    with pytest.raises(StaleResultError, match=r"probes/dyck-2 holds them all"):
        _evaluate(st, result="dyck")


def test_train_outside_the_grid_says_how_to_add_seeds():
    from capture.experiment import parse_plan
    from store.errors import InvalidArgumentError

    plan = parse_plan({"experiment": {"name": "x"}, "grid": {"tasks": ["dyck"], "archs": ["lstm"], "seeds": [0, 1, 2]}})
    with pytest.raises(InvalidArgumentError, match=r"seed 3, 4 is not in the experiment's grid.*\[grid\] seeds.*--design"):
        plan.select(seeds=[3, 4])


def test_a_claims_table_from_fewer_seeds_is_not_combined_nor_reported_as_verdicts(tmp_path):
    from analysis.claims import evaluate_stored_claims, read_part
    from analysis.claims.stored import stale_table
    from reports.claims import claims as claims_section
    from reports.snapshot import take_snapshot

    st = _store(tmp_path / "s.zarr", 3)
    _probes(st, "probes/dyck", 3, 0.99)
    table = evaluate_stored_claims(st, parse_claims([CLAIM]))
    assert stale_table(st, table) is None
    assert read_part(str(tmp_path / "s.zarr")).sizes["claim"] == 1
    rng = np.random.default_rng(1)
    st.add_run("dyck-gru-s3", task="dyck", arch="gru", seed=3)
    labels = rng.integers(0, 3, size=(16, L))
    st.write_length("dyck-gru-s3", L, hidden=rng.standard_normal((16, L, 3, 4)).astype("float32"), tokens=labels,
                    labels={"state": labels})
    why = stale_table(st, st.read_result("claims"))
    assert why is not None and "1 more run" in why and "dyck/gru seed 3" in why
    with pytest.raises(StaleResultError, match=r"out of date.*layerstate stats"):
        read_part(str(tmp_path / "s.zarr"))
    sec = claims_section(take_snapshot(Store.open(str(tmp_path / "s.zarr"))))
    assert sec.missing and "out of date" in sec.missing and not sec.tables
    # a run outside the claims' cells (another task) leaves the verdicts current
    st2 = _store(tmp_path / "t.zarr", 3)
    _probes(st2, "probes/dyck", 3, 0.99)
    evaluate_stored_claims(st2, parse_claims([CLAIM]))
    st2.add_run("parity-gru-s0", task="parity", arch="gru", seed=0)
    assert stale_table(st2, st2.read_result("claims")) is None
