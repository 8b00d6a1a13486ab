"""Linear probes: the fast path equals scikit-learn, evaluation is honest, bad input is named."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import xarray as xr
from dask.delayed import Delayed

from analysis.probes import fit_exact, fit_reference, fit_screen, logits, plan_probes, probe
from analysis.probes.cells import fit_cell, problems
from store import Store


def planted(
    rng,
    n=160,
    length=8,
    n_layers=2,
    d=10,
    n_classes=2,
    layer=2,
    positions=(3, 4, 5),
    strength=3.0,
    token_in_embed=False,
    prior=None,
):
    """Hidden states with random labels, linearly decodable at one layer and a position range.

    Labels are independent per (sequence, position), so nothing but the planted direction
    carries them: every other cell must read at the majority baseline.
    """
    y = (
        rng.choice(n_classes, size=(n, length), p=prior)
        if prior is not None
        else rng.integers(0, n_classes, size=(n, length))
    )
    tokens = rng.integers(0, 4, size=(n, length))
    hidden = rng.standard_normal((n, length, n_layers + 1, d)).astype(np.float32)
    direction = np.eye(n_classes, d) * strength
    for p in [p for p in positions if p < length]:
        hidden[:, p, layer] += direction[y[:, p]]
    if token_in_embed:
        hidden[:, :, 0] += np.eye(4, d)[tokens] * strength
    return hidden, tokens, y


def make(tmp_path, name="s.zarr", runs=("r0",), lengths=(8,), seed=0, **kw):
    st = Store.create(str(tmp_path / name))
    rng = np.random.default_rng(seed)
    for i, run in enumerate(runs):
        st.add_run(run, task="toy", arch="lstm", seed=i)
        for L in lengths:
            h, t, y = planted(rng, length=L, **kw)
            st.write_length(run, hidden=h, tokens=t, labels={"y": y}, block_size=64)
    return st


def cell_accuracy(ds):
    return ds["accuracy"].mean("fold")


# ----------------------------------------------------------------------------- solvers


def random_problem(
    rng, n_classes, n=240, d=12, missing_class_in_fold=False, constant_feature=False
):
    X = (
        rng.standard_normal((n, d)).astype(np.float32) * rng.uniform(0.5, 3, d).astype(np.float32)
        + 5
    )
    y = (
        (X[:, :n_classes] @ rng.standard_normal(n_classes) > 5).astype(int)
        if n_classes == 2
        else (np.argmax(X[:, :n_classes] + rng.standard_normal((n, n_classes)) * 2, axis=1))
    )
    fold = np.arange(n) % 4
    if missing_class_in_fold:  # the last class lives only in fold 0: fold 0's problem never sees it
        y[(y == n_classes - 1) & (fold != 0)] = 0
    if constant_feature:
        X[:, -1] = 2.5
    targets, train = problems(y, rng.permutation(y), fold, 4)
    return X, targets, train


@pytest.mark.parametrize(
    "n_classes, kw",
    [
        (2, {}),
        (3, {}),
        (6, {}),
        (3, {"missing_class_in_fold": True}),
        (2, {"constant_feature": True}),
    ],
    ids=["binary", "3-class", "6-class", "class-missing-in-a-fold", "constant-feature"],
)
def test_exact_solver_matches_sklearn_probabilities(n_classes, kw):
    rng = np.random.default_rng(n_classes)
    X, targets, train = random_problem(rng, n_classes, **kw)
    ref = fit_reference(X, targets, train, n_classes, 1.0)
    fast = fit_exact(X, targets, train, n_classes, 1.0)
    optimum = fit_reference(X, targets, train, n_classes, 1.0, tol=1e-9, max_iter=10_000)
    p_ref, p_fast, p_opt = (_probabilities(p, X) for p in (ref, fast, optimum))
    # both stop at a gradient of 1e-4 (scikit-learn's tol) from different directions; on the
    # separable binary problems that leaves scikit-learn itself ~6e-3 from the optimum
    assert np.abs(p_fast - p_opt).max() < 5e-3
    assert np.abs(p_fast - p_opt).max() <= np.abs(p_ref - p_opt).max() + 1e-3
    assert (np.isinf(ref.intercept) == np.isinf(fast.intercept)).all()  # same classes seen
    assert fast.converged.all() and ref.converged.all()
    (w_ref, _), (w_fast, _), (w_opt, _) = (p.original_space() for p in (ref, fast, optimum))
    # a gradient of 1e-4 leaves ~1% of the largest weight (scikit-learn: up to 1.1%)
    assert np.abs(w_fast - w_opt).max() <= max(np.abs(w_ref - w_opt).max(), 2e-2 * np.abs(w_opt).max())


def _probabilities(params, X):
    z = logits(params, X)
    p = np.exp(z - z.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def test_screen_solver_gives_a_linear_probe_close_to_logistic():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 400)
    X = (rng.standard_normal((400, 12)) + 1.5 * np.eye(3, 12)[y]).astype(np.float32)
    targets, train = problems(y, rng.permutation(y), np.arange(400) % 4, 4)
    acc = {}
    for name, fit in (("exact", fit_exact), ("screen", fit_screen)):
        z = logits(fit(X, targets, train, 3, 1.0), X)
        test = ~train[0]
        acc[name] = (z[0][test].argmax(1) == targets[0][test]).mean()
    assert acc["exact"] > 0.7
    assert abs(acc["screen"] - acc["exact"]) < 0.1


def test_position_level_folds_would_leak_and_sequence_folds_do_not():
    """A label constant within each sequence, features a sequence fingerprint: splitting the
    positions of one sequence across folds lets the probe memorise sequences (~100%), the
    sequence split cannot (chance)."""
    rng = np.random.default_rng(0)
    n, length, d = 60, 10, 80
    label = rng.integers(0, 2, n)
    finger = rng.standard_normal((n, d))
    X = (finger[:, None, :] + 0.1 * rng.standard_normal((n, length, d))).reshape(-1, d)
    y = np.repeat(label, length)
    by_sequence = np.repeat(np.arange(n) % 5, length)
    by_position = rng.integers(0, 5, n * length)
    honest, _ = fit_cell(X, y, y, by_sequence, folds=5, n_classes=2, method="exact", C=1.0)
    leaky, _ = fit_cell(X, y, y, by_position, folds=5, n_classes=2, method="exact", C=1.0)
    assert leaky.metrics["accuracy"].mean() > 0.95
    assert honest.metrics["accuracy"].mean() < 0.75


# ----------------------------------------------------------------------------- sweep


@pytest.mark.parametrize(
    "n_classes, positions", [(2, "all"), (3, "pooled"), (3, [2, 4]), (2, "last")]
)
def test_fast_sweep_matches_reference_within_half_a_point(tmp_path, n_classes, positions):
    # 160 test sequences per fold: one flipped prediction moves a cell's mean by 0.125 pp
    st = make(tmp_path, n=800, lengths=(5,), n_layers=1, layer=1, n_classes=n_classes, strength=1.2)
    fast = probe(st, "y", positions=positions, method="exact", control="token")
    ref = probe(st, "y", positions=positions, method="reference", scheduler="sync", control="token")
    assert np.abs(cell_accuracy(fast) - cell_accuracy(ref)).max() <= 0.005
    # random control labels leave many rows on the boundary: a looser bound
    assert np.abs(fast["control_accuracy"] - ref["control_accuracy"]).max() <= 0.02
    assert np.allclose(fast["log_loss"], ref["log_loss"], atol=2e-3)
    assert np.allclose(fast["weights"], ref["weights"], atol=5e-3, equal_nan=True)
    assert set(fast.data_vars) == set(ref.data_vars)


def test_probe_recovers_planted_layer_and_positions(tmp_path):
    st = make(tmp_path, n=320, n_layers=2, layer=2, positions=(3, 4, 5))
    ds = probe(st, "y")
    acc, base = (
        cell_accuracy(ds).isel(run=0, length=0),
        ds["baseline"].mean("fold").isel(run=0, length=0),
    )
    assert (acc.sel(layer="L1", position=[3, 4, 5]) > 0.9).all()
    # elsewhere at the baseline, within sampling noise (SE of a layer's mean ~0.02)
    for layer, positions in (("embed", range(8)), ("L0", range(8)), ("L1", [0, 1, 2, 6, 7])):
        gap = (acc - base).sel(layer=layer, position=list(positions)).mean()
        assert abs(float(gap)) < 0.06, (layer, float(gap))
    assert ds["best_layer"].item() == "L1"
    assert ds["profile"].sel(layer="L1").item() > ds["profile"].sel(layer="L0").item() + 0.1
    # Python's defaults are the command line's: the permuted control (the token control says
    # nothing with few token types; one cell read -0.094 against +0.588 before they agreed)
    assert ds.attrs["method"] == "exact" and ds.attrs["control"] == "permute"
    from layerstate.cli import main

    option = next(p for p in main.commands["probe"].params if p.name == "control")
    assert option.default == ds.attrs["control"]


def test_metrics_are_consistent_with_their_definitions(tmp_path):
    st = make(tmp_path, n=320)
    ds = probe(st, "y", control="permute")
    assert np.allclose(ds["selectivity"], ds["accuracy"] - ds["control_accuracy"])
    # every labelled sequence is held out exactly once: per-sequence hits add up to accuracy
    hits = ds["correct"].sum("sequence")
    n = ds["labelled"].sum("sequence")
    weighted = (ds["accuracy"] * ds["n_test"]).sum("fold")
    assert np.allclose(hits, weighted)
    assert (ds["n_test"].sum("fold") == n).all()
    assert (ds["correct"] <= ds["labelled"]).all()
    # a permuted control carries no signal: it reads near the baseline even where the target is planted
    at = {"layer": "L1", "position": [3, 4, 5]}
    ctrl_gap = (ds["control_accuracy"] - ds["baseline"]).sel(**at).mean()
    assert abs(float(ctrl_gap)) < 0.06
    assert float(ds["selectivity"].sel(**at).mean()) > 0.35


def test_without_a_control_only_the_target_is_fitted(tmp_path):
    st = make(tmp_path)
    with_control = probe(st, "y", layers="L1")
    without = probe(st, "y", layers="L1", control=False)
    assert "control_accuracy" not in without and "selectivity" not in without
    assert without.attrs["control"] == "none"
    assert np.allclose(without["accuracy"], with_control["accuracy"], atol=0.01)


def test_token_control_is_readable_where_tokens_are(tmp_path):
    st = make(tmp_path, token_in_embed=True)
    ds = probe(st, "y", control="token", layers=["embed", "L0"])
    ctrl = ds["control_accuracy"].mean(["fold", "position"]).isel(run=0, length=0)
    assert ctrl.sel(layer="embed") > 0.85  # a token -> class map is linear in the token
    assert ctrl.sel(layer="L0") < 0.8
    assert (ds["selectivity"].sel(layer="embed").mean() < 0).item()


def test_weights_in_feature_space_reproduce_the_probe(tmp_path):
    st = make(tmp_path)
    ds = probe(st, "y", layers="L1", positions=[4])
    h = st.load_length("r0", 8)
    X = h["hidden"].sel(layer="L1", position=4).values.astype(np.float64)
    y = h["y"].sel(position=4).values
    w = ds["weights"].sel(run="r0", fit_length=8, layer="L1", position=4).values  # (class, feature)
    b = ds["intercept"].sel(run="r0", fit_length=8, layer="L1", position=4).values
    assert ((X @ w.T + b).argmax(1) == y).mean() > 0.95
    assert np.allclose(w.sum(0), 0, atol=1e-5)  # binary probes in centred two-class form


def test_train_on_one_length_scores_longer_ones(tmp_path):
    st = make(tmp_path, lengths=(8, 12), positions=range(12), layer=2)
    ds = probe(st, "y", train_length=8, lengths=[12], layers=["L0", "L1"])
    assert list(ds.length.values) == [8, 12]
    assert list(ds.evaluation.values) == ["cross-validation", "transfer from 8"]
    src = ds["probe_position"].sel(run="r0", length=12).values
    assert list(src) == list(range(8)) + [-1] * 4  # same position, then the pooled probe
    far = cell_accuracy(ds).sel(run="r0", length=12, layer="L1")
    assert (far > 0.9).all()  # both rules transfer the planted direction
    assert (cell_accuracy(ds).sel(run="r0", length=12, layer="L0") < 0.75).all()
    assert "pooled_weights" in ds and ds.attrs["train_length"] == 8


def test_runs_with_different_feature_sizes_pad_weights(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(0)
    for run, d in (("lstm", 12), ("gpt", 8)):
        st.add_run(run, task="toy", arch=run, seed=0)
        h, t, y = planted(rng, d=d)
        st.write_length(run, hidden=h, tokens=t, labels={"y": y}, block_size=64)
    ds = probe(st, "y", positions=[4], layers="L1")
    assert list(ds["n_features"].values) == [8, 12]  # runs sorted by id: gpt, lstm
    assert np.isnan(ds["weights"].sel(run="gpt", feature=slice(8, None))).all()
    assert np.isfinite(ds["weights"].sel(run="lstm")).all()


def test_zero_features_read_at_baseline_without_nan(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(0)
    h, t, y = planted(rng, prior=[0.7, 0.3])  # no ties between the classes of a fold
    h[:, :, 1] = 0.0
    st.add_run("r0", task="toy", arch="lstm", seed=0)
    st.write_length("r0", hidden=h, tokens=t, labels={"y": y}, block_size=64)
    ds = probe(st, "y", layers="L0")
    assert np.isfinite(ds["accuracy"]).all()
    assert np.allclose(ds["accuracy"], ds["baseline"])


def test_saved_result_round_trips(tmp_path):
    st = make(tmp_path)
    ds = probe(st, "y", positions="pooled", save=True)
    back = st.read_result("probes/toy")  # named by task; y is the target the runs were trained on
    assert np.allclose(back["accuracy"], ds["accuracy"])
    assert back.attrs["method"] == "exact" and back.attrs["folds"] == 5
    assert back["best_layer"].values.tolist() == ds["best_layer"].values.tolist()


# ----------------------------------------------------------------------------- dask


def test_building_the_graph_does_not_compute(tmp_path):
    st = make(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("a dask graph was computed while planning")

    with dask.config.set(scheduler=refuse):
        plan = plan_probes(st, "y", train_length=8)
    assert plan.tasks and all(isinstance(t, Delayed) for t in plan.tasks)
    assert np.isfinite(plan.compute("sync")["accuracy"]).all()


def test_distributed_cluster_and_address_give_the_local_result(tmp_path):
    distributed = pytest.importorskip("distributed")
    st = make(tmp_path, n=100)
    local = probe(st, "y", layers=["L1"])
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        on_cluster = probe(st, "y", layers=["L1"], scheduler=cluster)
        by_address = probe(st, "y", layers=["L1"], scheduler=cluster.scheduler_address)
    assert np.array_equal(local["accuracy"], on_cluster["accuracy"])
    assert np.array_equal(local["accuracy"], by_address["accuracy"])


# ----------------------------------------------------------------------------- bad input


def test_unknown_target_lists_the_labels(tmp_path):
    st = make(tmp_path)
    with pytest.raises(KeyError, match=r"label 'depth' does not exist .*labels there: y"):
        probe(st, "depth")


def test_single_class_in_a_fold_names_the_cells_and_the_fix(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    h, t, y = planted(np.random.default_rng(0))
    y[:, 0] = 1  # position 0 always has class 1
    y[:, 1] = 0
    st.add_run("r0", task="toy", arch="lstm", seed=0)
    st.write_length("r0", hidden=h, tokens=t, labels={"y": y}, block_size=64)
    with pytest.raises(
        ValueError,
        match=r"run 'r0' length 8 position\(s\) 0-1: a single class .*positions=\[\.\.\.\]",
    ):
        probe(st, "y")
    assert np.isfinite(probe(st, "y", positions=[2, 3])["accuracy"]).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"layers": [7]}, r"layer index 7 is out of range for run 'r0', which has 3 layers"),
        (
            {"layers": ["L9"]},
            r"layer 'L9' is not in run 'r0'; its layers are \['embed', 'L0', 'L1'\]",
        ),
        (
            {"positions": [99]},
            r"position 99 is out of range for run 'r0' length 8 \(positions 0\.\.7\)",
        ),
        ({"positions": "first"}, r"positions must be one of \('all', 'last', 'pooled'\)"),
        ({"lengths": [50]}, r"run 'r0' has no stored length \[50\]; stored lengths: \[8\]"),
        ({"runs": {"arch": "mamba"}}, r"no runs match the selection .*runs in the store: r0"),
        ({"method": "fast"}, r"method must be one of \('exact', 'screen', 'reference'\)"),
        ({"folds": 1}, r"folds must be an integer from 2 to 1000"),
    ],
)
def test_bad_selection_is_refused_with_the_valid_options(tmp_path, kwargs, match):
    st = make(tmp_path)
    with pytest.raises(ValueError, match=match):
        probe(st, "y", **kwargs)


def test_unknown_run_id_lists_the_runs(tmp_path):
    st = make(tmp_path)
    with pytest.raises(KeyError, match=r"runs \['nope'\] are not in the store; runs there: r0"):
        probe(st, "y", runs="nope")


def test_nan_hidden_states_are_refused_naming_the_layer(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    h, t, y = planted(np.random.default_rng(0))
    h[5, 2, 1, 3] = np.nan
    st.add_run("r0", task="toy", arch="lstm", seed=0)
    st.write_length("r0", hidden=h, tokens=t, labels={"y": y}, block_size=64, allow_nonfinite=True)
    with pytest.raises(
        ValueError, match=r"hidden states of run 'r0', length 8, layer 'L0', position 2 contain NaN"
    ):
        probe(st, "y", scheduler="sync")
    assert np.isfinite(probe(st, "y", layers=["embed", "L1"])["accuracy"]).all()


@pytest.mark.parametrize("positions", ["last", "pooled"])
def test_gathered_rows_read_many_chunks_per_task_and_score_the_same(tmp_path, monkeypatch, positions):
    """Last/pooled cells read their rows several stored chunks per task (one zarr call each);
    with batches smaller than the store (here 2 chunks of 64 sequences per task) the rows, and
    so the probes, are those of one task per chunk, bit for bit."""
    from analysis.probes import sweep

    st = make(tmp_path, lengths=(8,))  # 160 sequences in chunks of 64: 64, 64, 32
    assert st.open_length("r0", 8)["hidden"].chunks[0] == (64, 64, 32)
    row_bytes = 8 * st.open_length("r0", 8)["hidden"].sizes["feature"] * 2
    monkeypatch.setattr(sweep, "GATHER_BYTES", 2 * 64 * row_bytes)
    reads = []
    read_rows = sweep._read_rows
    monkeypatch.setattr(sweep, "_read_rows", lambda var, i, lo, hi, *a: (
        reads.append((lo, hi)), read_rows(var, i, lo, hi, *a))[1])
    batched = plan_probes(st, "y", positions=positions, folds=3).compute("sync")
    assert set(reads) == {(0, 128), (128, 160)}  # two chunks, then the short last one
    monkeypatch.setattr(sweep, "_source", lambda *a: None)  # one task per stored chunk
    per_chunk = plan_probes(st, "y", positions=positions, folds=3).compute("sync")
    xr.testing.assert_identical(batched, per_chunk)
    assert np.isfinite(batched["accuracy"]).all()
