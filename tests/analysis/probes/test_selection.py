"""Probes choose C by nested, sequence-grouped cross-validation, and every probe they keep converged.

Known answers come from planted stores: a well-separated label wants the weakest penalty of the
grid, a noisy high-dimensional one the strongest. The choice is checked against an independent
scikit-learn loop (GroupKFold over the same folds, a StandardScaler + LogisticRegression pipeline
per inner fold and C).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import analysis.probes.solvers as solvers
from analysis.probes import C_GRID, plan_probes, probe
from analysis.probes.cells import TIE, fit_cell, search_problems
from analysis.probes.plan import inner_groups
from store import Store
from tests.analysis.probes.test_probes import make


def one_cell_store(tmp_path, *, n, d, strength, n_classes=2, seed=0, name="s.zarr", mix=None):
    """One run, length 4, layers embed/L0/L1: the label (independent per position) is planted
    in L1 along ``strength * e_class``; ``mix`` (d, d) mixes the features (correlated states)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=(n, 4))
    hidden = rng.standard_normal((n, 4, 3, d)).astype(np.float32)
    hidden[:, :, 2] += strength * np.eye(n_classes, d, dtype=np.float32)[y]
    if mix is not None:
        hidden = hidden @ mix.astype(np.float32)
    st = Store.create(str(tmp_path / name))
    st.add_run("r0", task="toy", arch="lstm", seed=0)
    tokens = rng.integers(0, 4, size=(n, 4))
    st.write_length("r0", hidden=hidden, tokens=tokens, labels={"y": y}, block_size=64)
    return st


# ----------------------------------------------------------------------------- layout


@pytest.mark.parametrize("folds", [2, 3, 5])
def test_inner_folds_nest_inside_outer_folds_and_group_by_sequence(folds):
    rng = np.random.default_rng(folds)
    n_seq, per_seq = 40, 3  # pooled rows: 3 positions per sequence
    seq_fold = rng.permutation(np.arange(n_seq) % folds)
    seq_inner = inner_groups(seq_fold, folds, rng)
    seq = np.repeat(np.arange(n_seq), per_seq)
    fold, inner = seq_fold[seq], seq_inner[seq]
    y = rng.integers(0, 3, seq.size)
    lay = search_problems(y, rng.permutation(y), fold, inner, folds)
    for g in np.unique(inner):  # inner groups nest in folds and hold whole sequences
        assert np.unique(fold[inner == g]).size == 1
    for li in range(2):
        for f in range(folds):
            assert not lay.train[lay.outer[li, f]][fold == f].any()
            pairs = lay.inner[li][f]
            assert len(pairs) == (folds - 1 if folds >= 3 else 2)
            for p, h in pairs:
                train = lay.train[p]
                assert not train[fold == f].any()  # the outer test fold never trains
                assert not train[inner == h].any()  # nor the inner fold it validates
                assert train[(fold != f) & (inner != h)].all()
                assert np.array_equal(lay.targets[p], y if li == 0 else lay.targets[lay.outer[1, 0]])
    # "everything but folds f and g" serves both f and g: k (k - 1) / 2 inner problems per labelling
    n_inner = folds * (folds - 1) // 2 if folds >= 3 else 4
    assert lay.train.shape[0] == 2 * (n_inner + folds) + 1
    assert lay.train[lay.full].all()


# ----------------------------------------------------------------------------- known answers


def test_well_separated_label_takes_the_weakest_penalty_noisy_one_the_strongest(tmp_path):
    clear = one_cell_store(tmp_path, n=400, d=10, strength=4.0, name="clear.zarr")
    noisy = one_cell_store(tmp_path, n=200, d=200, strength=0.5, name="noisy.zarr")
    kw = dict(layers="L1", positions=[1], control=False)
    a, b = probe(clear, "y", **kw), probe(noisy, "y", **kw)
    at = dict(run="r0", fit_length=4, layer="L1", position=1)
    assert list(a["C_grid"].values) == list(C_GRID)
    assert a["C"].sel(**at).item() == max(C_GRID)
    assert (a["fold_C"].sel(**at) == max(C_GRID)).all()
    assert b["C"].sel(**at).item() == min(C_GRID)
    assert (b["fold_C"].sel(**at) <= 1e-2).all()
    # the curve that chose it is stored: monotone down for the clear label, up for the noisy one
    cv_a, cv_b = a["cv_log_loss"].sel(**at).values, b["cv_log_loss"].sel(**at).values
    assert (np.diff(cv_a) < 0).all() and cv_b.argmin() == 0
    assert a["path_converged"].all() and b["path_converged"].all()
    assert a["converged"].all() and b["converged"].all()
    assert a.attrs["C"] == "chosen per cell" and "nested" in a.attrs["C_selection"]


def test_control_task_is_chosen_by_the_same_procedure(tmp_path):
    st = one_cell_store(tmp_path, n=400, d=10, strength=4.0)
    ds = probe(st, "y", layers="L1", positions=[1], control="permute")
    at = dict(run="r0", fit_length=4, layer="L1", position=1)
    # a permuted label carries nothing: its inner folds want the strongest penalty
    assert (ds["control_fold_C"].sel(**at) <= 1e-2).all()
    assert (ds["fold_C"].sel(**at) == max(C_GRID)).all()
    assert float(ds["selectivity"].sel(layer="L1", position=1).mean()) > 0.4


# ----------------------------------------------------------------------------- vs scikit-learn


def sklearn_nested(X, y, fold, folds, grid, n_classes):
    """Nested CV written with scikit-learn only: inner GroupKFold over the outer training rows,
    grouped by their (sequence) fold, one StandardScaler + LogisticRegression pipeline per inner
    fold and C; the smallest C within TIE of the lowest held-out log-loss; refit, score fold f."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def model(C):
        return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=solvers.MAX_ITER))

    chosen, accuracy = [], []
    for f in range(folds):
        tr, te = fold != f, fold == f
        Xtr, ytr, gtr = X[tr], y[tr], fold[tr]
        losses = []
        for C in grid:
            total = 0.0
            for fit_rows, val_rows in GroupKFold(n_splits=folds - 1).split(Xtr, ytr, groups=gtr):
                m = model(C).fit(Xtr[fit_rows], ytr[fit_rows])
                proba = np.zeros((val_rows.size, n_classes))
                proba[:, m.classes_] = m.predict_proba(Xtr[val_rows])
                p_true = proba[np.arange(val_rows.size), ytr[val_rows]]
                total -= np.log(np.maximum(p_true, 1e-15)).sum()
            losses.append(total / tr.sum())
        losses = np.array(losses)
        j = int(np.flatnonzero(losses <= losses.min() * (1 + TIE))[0])
        chosen.append(grid[j])
        accuracy.append((model(grid[j]).fit(Xtr, ytr).predict(X[te]) == y[te]).mean())
    return np.array(chosen), np.array(accuracy)


@pytest.mark.parametrize("n_classes, strength", [(2, 0.35), (3, 0.6)])
def test_nested_choice_equals_a_scikit_learn_group_kfold_loop(tmp_path, n_classes, strength):
    # a label that favours a middle C; 800 sequences, so one prediction moves a fold by 0.6 pp
    st = one_cell_store(tmp_path, n=800, d=24, strength=strength, n_classes=n_classes, seed=3)
    ds = probe(st, "y", layers="L1", positions=[0, 2], control=False, folds=5)
    plan = plan_probes(st, "y", layers="L1", positions=[0, 2], control=False, folds=5)
    lab = plan.runs["r0"].labels[4]
    hidden = st.load_length("r0", 4)["hidden"].sel(layer="L1").values.astype(np.float32)
    for p in (0, 2):
        C_ref, acc_ref = sklearn_nested(
            hidden[:, p], lab.y[:, p], lab.fold, 5, list(C_GRID), n_classes
        )
        at = dict(run="r0", layer="L1", position=p)
        assert np.array_equal(ds["fold_C"].sel(fit_length=4, **at).values, C_ref)
        gap = np.abs(ds["accuracy"].sel(length=4, **at).values - acc_ref)
        assert gap.max() <= 0.005, gap
        assert 1e-3 < np.median(C_ref) < 10  # the label was chosen to favour a middle C


def test_fast_and_reference_sweeps_choose_the_same_C(tmp_path):
    st = make(tmp_path, n=400, lengths=(5,), n_layers=1, layer=1, n_classes=3, strength=1.2)
    kw = dict(positions=[1, 3], control="permute")
    fast = probe(st, "y", method="exact", **kw)
    ref = probe(st, "y", method="reference", scheduler="sync", **kw)
    for name in ("C", "fold_C", "control_fold_C"):
        assert np.array_equal(fast[name].values, ref[name].values), name
    # per cell (mean over folds; 400 sequences: one prediction moves it by 0.25 pp)
    assert np.abs(fast["accuracy"] - ref["accuracy"]).mean("fold").max() <= 0.005
    assert np.allclose(fast["cv_log_loss"], ref["cv_log_loss"], rtol=2e-3)


# ----------------------------------------------------------------------------- convergence


def test_C_values_that_do_not_converge_are_avoided_counted_and_not_warned(tmp_path, monkeypatch):
    # separable states: unconstrained, the choice is the weakest penalty of the grid
    st = one_cell_store(tmp_path, n=300, d=16, strength=6.0, seed=5)
    kw = dict(layers="L1", positions=[0, 1, 2], C=[1e-3, 1e-2, 1e-1, 1.0, 10.0, 1e3, 1e5])
    free = probe(st, "y", **kw)
    assert free["path_converged"].all() and (free["C"] >= 1e3).all()
    # five iterations per fit: only the strongest penalty converges everywhere
    monkeypatch.setattr(solvers, "MAX_ITER", 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no probe warning: every kept probe converged
        ds = probe(st, "y", **kw)
    conv = ds["path_converged"].sel(run="r0", fit_length=4, layer="L1")
    assert conv.sel(C_grid=1e-3).all() and not conv.sel(C_grid=slice(1.0, None)).any()
    assert ds["converged"].all()  # no probe that is kept or scored comes from those fits
    for name in ("C", "fold_C", "control_fold_C"):  # moved away from the free choice
        assert (ds[name].sel(layer="L1") <= 0.1).all(), name
    # the count a report shows: cells where some C of the grid could not be fitted
    assert int((~conv).any("C_grid").sum()) == 3
    # a fixed weak penalty cannot move away: then the probe says so, and the sweep warns
    with pytest.warns(RuntimeWarning, match=r"cell\(s\) have probes that stopped .*lower C"):
        fixed = probe(st, "y", layers="L1", positions=[0, 1, 2], C=1e5)
    assert not fixed["converged"].sel(layer="L1").all()


def test_fixed_C_stays_available(tmp_path):
    st = make(tmp_path)
    ds = probe(st, "y", layers="L1", C=0.5)
    assert ds.attrs["C"] == 0.5 and "fixed C = 0.5" in ds.attrs["C_selection"]
    assert "C_grid" not in ds.dims and "cv_log_loss" not in ds
    assert (ds["C"] == 0.5).all() and (ds["fold_C"] == 0.5).all()
    same = probe(st, "y", layers="L1", C=[0.5])  # a grid of one is a fixed C
    assert np.array_equal(ds["accuracy"].values, same["accuracy"].values, equal_nan=True)


def test_two_folds_choose_C_on_halves_of_the_other_fold(tmp_path):
    st = one_cell_store(tmp_path, n=200, d=10, strength=4.0)
    ds = probe(st, "y", layers="L1", positions=[1], folds=2)
    assert ds["fold_C"].sizes["fold"] == 2 and (ds["fold_C"] == max(C_GRID)).all()
    assert "two halves" in ds.attrs["C_selection"]


@pytest.mark.parametrize(
    "C, match",
    [(0, "must be a positive number"), ([1.0, -2.0], "must be a positive number"), ("big", "positive")],
)
def test_bad_C_is_refused(tmp_path, C, match):
    with pytest.raises(ValueError, match=match):
        probe(make(tmp_path), "y", C=C)


def test_fit_cell_reports_the_selection_for_one_cell():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    X = (rng.standard_normal((300, 8)) + 3.0 * np.eye(2, 8)[y]).astype(np.float32)
    fold = rng.permutation(np.arange(300) % 3)
    scores, models = fit_cell(X, y, None, fold, folds=3, n_classes=2, method="exact", C=C_GRID)
    sel = models.selection
    assert sel.grid.tolist() == list(C_GRID) and sel.control_fold_C is None
    assert sel.converged and sel.path_converged.all() and sel.C == max(C_GRID)
    assert models.params.coef.shape[0] == 3 + 1  # the chosen problems in fixed-C order
    assert scores.metrics["accuracy"].mean() > 0.95


# ----------------------------------------------------------------------------- report


def test_report_shows_the_chosen_C_and_counts_unfittable_cells(tmp_path, monkeypatch):
    from reports import readout
    from reports.snapshot import take_snapshot

    st = one_cell_store(tmp_path, n=300, d=16, strength=6.0, seed=5)
    monkeypatch.setattr(solvers, "MAX_ITER", 5)  # weak penalties cannot be fitted
    probe(st, "y", positions="pooled", C=[1e-3, 1e-2, 1e-1, 1.0, 10.0], save=True)
    sec = readout.probes(take_snapshot(st))
    table = next(t for t in sec.tables if t.name == "probe_regularisation")
    row = table.data.set_index("layer").loc["L1"]
    assert row["C_median"] <= 0.1 and row["cells"] == 1 and row["unfittable_C_cells"] == 1
    assert row["unconverged"] == 0
    assert list(table.shown().columns[:3]) == ["task", "arch", "variant"]
    note = next(n for n in sec.notes if "probe cells had C values" in n)
    assert "1 of 3 probe cells" in note and "0 stored or scored probes did not converge" in note
    assert any("C chosen per cell from the grid 0.001, 0.01, 0.1, 1, 10" in n for n in sec.notes)


def test_cells_fitted_in_one_batch_get_the_result_they_get_alone():
    from analysis.probes import path_exact
    from analysis.probes.solvers import path_exact_many

    rng = np.random.default_rng(2)
    fold = rng.permutation(np.arange(240) % 3)
    cells = []
    for strength in (0.3, 1.0, 3.0):  # cells converging at different speeds
        y = rng.integers(0, 3, 240)
        X = (rng.standard_normal((240, 12)) + strength * np.eye(3, 12)[y]).astype(np.float32)
        lay = search_problems(y, rng.permutation(y), fold, fold, 3)
        cells.append((X, lay.targets, lay.train))
    alone = [path_exact(*c, 3, C_GRID) for c in cells]
    together = path_exact_many(cells, 3, C_GRID)
    for a_path, b_path in zip(alone, together, strict=True):
        for a, b in zip(a_path, b_path, strict=True):
            assert np.array_equal(a.coef, b.coef) and np.array_equal(a.n_iter, b.n_iter)
            assert np.array_equal(a.converged, b.converged)
