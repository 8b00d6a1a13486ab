"""Causal interventions: ablation, erasure (INLP, LEACE), patching, interchange interventions.

The ablation cases use a hand-built model whose readout uses exactly one direction u: a
one-layer LSTM whose head weight is rank one along u (u orthogonal to the all-ones vector,
so the final LayerNorm keeps it), with stored last-layer states that carry a planted,
high-variance signal along u and labels equal to the model's own predictions.
"""

from __future__ import annotations

import dask
import numpy as np
import pytest
import torch
import xarray as xr
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from analysis.compute import compute
from analysis.interventions import (
    ablation,
    classify_mechanism,
    erase,
    fit_directions,
    inlp,
    interchange,
    leace,
    nontrivial_restoration,
    parse_settings,
    patched_logits,
    patched_logits_reference,
    patching,
    projection_eraser,
    rebuild,
    run_ablation,
    run_interchange,
)
from analysis.interventions.erasure import erase_np, erase_torch, leace_np, projection_np
from capture.models import ModelConfig, build_model
from capture.record import capture_counterfactuals
from capture.tasks import get_task
from store import MissingError, Store

N_SEQ, LENGTHS = 64, (8, 12)


def computed(lazy: xr.Dataset, scheduler=None) -> xr.Dataset:
    """A built analysis, computed (the way `run_*` do)."""
    return compute([lazy], scheduler)[0]


# ----------------------------------------------------------------------------- fixtures
def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _rank_one_model(d_model: int = 16):
    """A 1-layer LSTM (hidden 20) whose head reads only direction u; also returns u and v."""
    cfg = ModelConfig(arch="lstm", d_model=d_model, n_layers=1)
    model = build_model(cfg, vocab_size=4, n_classes=2, seed=0)
    d = model.hidden_size
    rng = np.random.default_rng(1)
    u = rng.standard_normal(d)
    u = _unit(u - u.mean())  # orthogonal to ones: LayerNorm's centring keeps the u component
    v = rng.standard_normal(d)
    v = v - v.mean()
    v = _unit(v - (v @ u) * u)  # orthogonal to ones and to u
    with torch.no_grad():
        model.head.weight.copy_(torch.tensor(np.stack([u, -u]) * 5.0, dtype=torch.float32))
        # a tiny bias: with u erased every prediction is class 0, so accuracy is exact
        model.head.bias.copy_(torch.tensor([0.01, 0.0]))
    return cfg, model, u, v


def _planted_store(path) -> tuple[Store, np.ndarray, np.ndarray]:
    """Run 'r0' with stored states at L0 = noise + large signal along u; labels = predictions."""
    cfg, model, u, v = _rank_one_model()
    d = model.hidden_size
    st = Store.create(str(path))
    st.add_run("r0", task="parity", arch="lstm", seed=0, model_config=cfg.model_dump())
    st.write_weights("r0", model.state_dict())
    st.update_run_attrs("r0", vocab_size=4, n_classes=2, target="parity", status="trained",
                        train_config={"length": 8})
    rng = np.random.default_rng(2)
    for L in LENGTHS:
        top = 0.3 * rng.standard_normal((N_SEQ, L, d)) + 3.0 * rng.standard_normal((N_SEQ, L, 1)) * u
        hidden = np.stack([rng.standard_normal((N_SEQ, L, d)), top], axis=2).astype(np.float32)
        with torch.no_grad():
            logits = model.forward_from("L0", torch.from_numpy(hidden[:, :, 1])).numpy()
        st.write_length("r0", L, hidden=hidden, tokens=rng.integers(0, 4, (N_SEQ, L)),
                        labels={"parity": logits.argmax(-1)}, logits=logits, dtype="float32")
    return st, u, v


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return _planted_store(tmp_path_factory.mktemp("abl") / "s.zarr")


def _directions(*vectors) -> xr.DataArray:
    return xr.DataArray(np.stack(vectors)[None], dims=("layer", "direction", "feature"),
                        coords={"layer": ["L0"]})


def _ar_store(path, arch: str = "transformer", length: int = 12, n_pairs: int = 24):
    """An (untrained) associative-recall run with stored counterfactual twins."""
    task = get_task("assoc_recall", n_keys=8, n_values=8)
    cfg = ModelConfig(arch=arch, d_model=16, n_layers=2)
    n_classes = task.n_classes[task.target]
    model = build_model(cfg, vocab_size=task.vocab_size, n_classes=n_classes, seed=0)
    st = Store.create(str(path))
    rid = f"{arch}-ar"
    st.add_run(rid, task="assoc_recall", arch=arch, seed=0, model_config=cfg.model_dump(),
               task_config=task.model_dump())
    st.write_weights(rid, model.state_dict())
    st.update_run_attrs(rid, vocab_size=task.vocab_size, n_classes=n_classes,
                        target=task.target, status="trained")
    capture_counterfactuals(st, rid, length, n_pairs=n_pairs)
    return st, rid


@pytest.fixture(scope="module")
def ar_store(tmp_path_factory):
    return _ar_store(tmp_path_factory.mktemp("ar") / "s.zarr")


# ----------------------------------------------------------------------------- ablation
def test_ablating_the_read_direction_drops_to_chance_and_an_orthogonal_one_does_nothing(planted):
    st, u, v = planted
    res = computed(ablation(st, ["r0"], settings=["given"], layers=["L0"], directions=_directions(u),
                           fit_length=8))
    ortho = computed(ablation(st, ["r0"], settings=["given"], layers=["L0"],
                             directions=_directions(v), fit_length=8))
    for L in LENGTHS:  # at the fit length and OOD
        base = dict(run="r0", length=L, layer="L0")
        cell = dict(base, setting="given")
        assert float(res.accuracy_clean.sel(base)) == 1.0  # labels are the model's own output
        # with u erased every logit difference is the bias: class 0 everywhere, i.e. chance
        assert float(res.accuracy.sel(cell)) <= float(res.chance.sel(run="r0", length=L)) + 1e-9
        assert float(res.accuracy.sel(cell)) < 0.65
        assert float(ortho.accuracy.sel(cell)) >= 0.99
        # residual decodability: nothing linear left along u; everything left after v
        assert float(res.probe_accuracy.sel(cell)) < 0.65
        assert float(ortho.probe_accuracy.sel(cell)) > 0.9
        assert float(res.probe_accuracy_clean.sel(base)) > 0.9
    assert int(res.n_directions.sel(run="r0", layer="L0", setting="given")) == 1
    # held-out evaluation at the fit length, every sequence OOD; counts per sequence
    n_eval = res.n_labelled.sel(run="r0").notnull().sum("sequence").values
    assert list(n_eval) == [N_SEQ // 2, N_SEQ]
    assert float(res.n_labelled.sel(run="r0", length=8).sum()) == N_SEQ // 2 * 8


def test_top_pca_subspace_drops_more_than_a_random_one_of_the_same_size(planted):
    st = planted[0]
    res = computed(ablation(st, ["r0"], [8, 12], settings=["pca:1", "random:1", "probe", "leace"],
                           layers=["L0"]))
    drop = res.accuracy_drop.sel(run="r0", layer="L0")
    decodable = res.probe_accuracy.sel(run="r0", layer="L0")
    for L in LENGTHS:
        assert float(drop.sel(length=L, setting="pca:1")) > 0.4
        assert float(drop.sel(length=L, setting="random:1")) < 0.1
        assert float(drop.sel(length=L, setting="leace")) > 0.4
        # A fitted probe direction is only close to u: projecting it out shrinks the u
        # component without flipping its sign, so the readout survives and a refitted probe
        # still decodes the label (why single-direction ablation is no necessity test).
        assert float(drop.sel(length=L, setting="probe")) < 0.2
        assert float(decodable.sel(length=L, setting="probe")) > 0.9
    assert list(res.k.values) == [1, 1, -1, -1]


def test_building_the_ablation_graph_computes_nothing(planted):
    st = planted[0]

    def refuse(*args, **kwargs):
        raise AssertionError("dask computed while building")

    with dask.config.set(scheduler=refuse):
        lazy = ablation(st, ["r0"], [8], settings=["pca:1"], layers=["L0"], refit=False,
                        mode="mean")
    assert isinstance(lazy.correct.data, dask.array.Array) and "probe_accuracy" not in lazy
    done = computed(lazy)
    # the planted signal has mean ~0: setting it to its mean erases it as zeroing does
    assert done.attrs["mode"] == "mean"
    assert float(done.accuracy_drop.sel(run="r0", length=8, layer="L0", setting="pca:1")) > 0.4


def test_run_ablation_stores_a_result_that_reads_back(planted, tmp_path):
    import shutil

    shutil.copytree(planted[0].location.url, tmp_path / "c.zarr")
    st = Store.open(str(tmp_path / "c.zarr"), mode="r+")
    out = run_ablation(st, "planted", runs=["r0"], lengths=[8], settings=["pca:1"], layers=["L0"],
                       refit=False)
    back = st.read_result("ablation/planted")
    np.testing.assert_array_equal(back.correct.values, out.correct.values)
    assert str(back.site.sel(run="r0", layer="L0").values).startswith("block output of layer L0")
    assert "cell state is not edited" in str(back.site.sel(run="r0", layer="L0").values)


def test_stored_probe_weights_are_read_and_their_padding_dropped(planted, tmp_path):
    import shutil

    st0, u, _ = planted
    shutil.copytree(st0.location.url, tmp_path / "p.zarr")
    st = Store.open(str(tmp_path / "p.zarr"), mode="r+")
    # as `layerstate probe` writes them: raw feature space, two-class softmax form for a binary
    # label (w/2, -w/2), NaN for a class the run lacks and for features beyond its width
    weights = np.full((1, 1, 1, 3, 24), np.nan)
    weights[0, 0, 0, 0, :20], weights[0, 0, 0, 1, :20] = u / 2, -u / 2
    probes = xr.Dataset(
        {"weights": (("run", "fit_length", "layer", "class", "feature"), weights)},
        coords={"run": ["r0"], "fit_length": [8], "layer": ["L0"]},
    )
    st.write_result("probes/parity", probes)
    res = computed(ablation(st, ["r0"], [8], settings=["stored"], layers=["L0"], refit=False))
    given = computed(ablation(st, ["r0"], [8], settings=["given"], layers=["L0"], refit=False,
                             directions=_directions(u)))
    np.testing.assert_array_equal(res.correct.values, given.correct.values)
    assert int(res.n_directions.sel(run="r0", layer="L0", setting="stored")) == 1


def test_fit_directions_returns_one_row_per_direction_per_layer(planted):
    st = planted[0]
    pca = fit_directions(st, "r0", 8, method="pca", k=3)
    assert pca.dims == ("layer", "direction", "feature") and pca.shape == (2, 3, 20)
    gram = pca.sel(layer="L0").values @ pca.sel(layer="L0").values.T
    np.testing.assert_allclose(gram, np.eye(3), atol=1e-10)
    probe = fit_directions(st, "r0", 8, method="probe", layers=["L0"])
    assert probe.shape == (1, 1, 20)  # binary label: one direction


# ----------------------------------------------------------------------------- erasure
def _classes(rng, n=1200, d=10, shift_dims=6, weights=(0.5, 0.3, 0.2)):
    y = rng.choice(len(weights), size=n, p=weights)
    means = np.zeros((len(weights), d))
    means[:, :shift_dims] = 1.5 * rng.standard_normal((len(weights), shift_dims))
    mix = rng.standard_normal((d, d)) / np.sqrt(d) + np.eye(d)  # correlated features
    x = (rng.standard_normal((n, d)) + means[y]) @ mix
    return xr.DataArray(x, dims=("sample", "feature")), xr.DataArray(y, dims=("sample",))


def test_leace_equalises_class_means_and_leaves_a_probe_at_chance():
    x, y = _classes(np.random.default_rng(0))
    eraser = leace(x, y)
    erased = erase(x, eraser).values
    labels = y.values
    means = np.stack([erased[labels == c].mean(0) for c in range(3)])
    np.testing.assert_allclose(means, np.broadcast_to(erased.mean(0), means.shape), atol=1e-8)
    majority = np.bincount(labels).max() / labels.size
    before = LogisticRegression(max_iter=1000).fit(x.values, labels).score(x.values, labels)
    after = LogisticRegression(max_iter=1000).fit(erased, labels).score(erased, labels)
    assert before > majority + 0.3
    assert after <= majority + 0.01  # linear guardedness, on the training data itself
    assert eraser.attrs["rank"] == 2  # classes - 1


def test_inlp_reduces_probe_accuracy_to_chance_after_enough_rounds():
    x, y = _classes(np.random.default_rng(1), n=1500)
    labels, majority = y.values, np.bincount(y.values).max() / y.size

    def cv_accuracy(directions):
        erased = erase(x, projection_eraser(directions)).values
        return cross_val_score(LogisticRegression(max_iter=1000), erased, labels, cv=3).mean()

    one, many = inlp(x, y, rounds=1), inlp(x, y, rounds=5)
    assert one.sizes["direction"] == 2  # a 3-class probe spans 2 directions
    assert cv_accuracy(one) > majority + 0.1  # one round is not enough: the signal is redundant
    assert cv_accuracy(many) < majority + 0.05
    gram = many.values @ many.values.T
    np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-10)


def test_torch_eraser_equals_the_numpy_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 7, 9)).astype(np.float32)
    labels = rng.integers(0, 3, size=(6, 7))
    for eraser in (projection_np(rng.standard_normal((2, 9)), mean=rng.standard_normal(9)),
                   leace_np(x.reshape(-1, 9), labels.reshape(-1))):
        fast = erase_torch(torch.from_numpy(x), eraser).numpy()
        np.testing.assert_allclose(fast, erase_np(x, eraser), atol=1e-5, rtol=1e-5)


def test_projection_eraser_zero_and_mean_modes():
    rng = np.random.default_rng(3)
    x = xr.DataArray(rng.standard_normal((50, 4)) + 5, dims=("sample", "feature"))
    e1 = xr.DataArray([[0.0, 2.0, 0.0, 0.0]], dims=("direction", "feature"))
    zero = erase(x, projection_eraser(e1)).values
    mean = erase(x, projection_eraser(e1, mean=x.mean("sample"))).values
    np.testing.assert_allclose(zero[:, 1], 0, atol=1e-12)
    np.testing.assert_allclose(mean[:, 1], x.values[:, 1].mean(), atol=1e-12)
    np.testing.assert_array_equal(zero[:, [0, 2, 3]], x.values[:, [0, 2, 3]])


# ----------------------------------------------------------------------------- patching
def _twins(arch: str, length: int = 12, n: int = 10):
    """In-memory clean/corrupted twins (hidden + tokens) of an untrained model."""
    task = get_task("assoc_recall", n_keys=8, n_values=8)
    model = build_model(ModelConfig(arch=arch, d_model=16, n_layers=2),
                        vocab_size=task.vocab_size, n_classes=8, seed=0)
    pair = task.counterfactual(np.random.default_rng(0), n, length)
    out = []
    for batch in (pair.clean, pair.corrupted):
        with torch.no_grad():
            _, hidden = model.forward_with_hidden(torch.from_numpy(batch.tokens))
        out.append(xr.Dataset({
            "hidden": (("sequence", "position", "layer", "feature"), hidden.numpy()),
            "tokens": (("sequence", "position"), batch.tokens),
        }, coords={"layer": model.layer_names}))
    return model, out[0], out[1]


@pytest.mark.parametrize("arch", ["transformer", "lstm", "gru", "mamba", "mamba2"])
def test_resumed_patching_equals_a_hooked_full_rerun(arch):
    model, clean, bad = _twins(arch)
    patch = xr.DataArray(np.random.default_rng(4).random((10, 12)) < 0.3,
                         dims=("sequence", "position"))
    for layer in model.layer_names:
        fast = patched_logits(model, clean, bad, layer, patch, batch_size=4)
        ref = patched_logits_reference(model, clean, bad, layer, patch, batch_size=4)
        np.testing.assert_allclose(fast.values, ref.values, atol=1e-5, rtol=0, err_msg=layer)


def test_own_state_patch_recovers_nothing_and_a_full_clean_patch_everything(ar_store):
    st, rid = ar_store
    model = rebuild(st, rid)
    clean = st.load_length(rid, 12, kind="cfclean")
    bad = st.load_length(rid, 12, kind="cfcorrupt")
    rows = np.arange(clean.sizes["sequence"])
    pos = clean.pos_label.values
    good = clean.answer.values[rows, pos]

    def metric(logits):
        from analysis.interventions import logit_metric

        return logit_metric(logits.values, pos, good, bad.answer.values[rows, pos])

    everywhere = xr.DataArray(np.ones((rows.size, 12), bool), dims=("sequence", "position"))
    m_clean = metric(patched_logits(model, clean, clean, "embed", everywhere))
    m_bad = metric(patched_logits(model, bad, bad, "embed", everywhere))
    own = metric(patched_logits(model, bad, bad, "L0", everywhere))
    full = metric(patched_logits(model, clean, bad, "embed", everywhere))
    np.testing.assert_allclose(own - m_bad, 0, atol=1e-6)
    np.testing.assert_allclose((full - m_bad).sum() / (m_clean - m_bad).sum(), 1.0, atol=1e-6)
    # a causal model: every position up to the label, at a block output, is the whole cause
    upto = xr.DataArray(np.arange(12)[None, :] <= pos[:, None], dims=("sequence", "position"))
    prefix = metric(patched_logits(model, clean, bad, "L0", upto))
    np.testing.assert_allclose(prefix, m_clean, atol=1e-5)

    def refuse(*args, **kwargs):
        raise AssertionError("dask computed while building")

    with dask.config.set(scheduler=refuse):
        lazy = patching(st, [rid], 12)
    grid = computed(lazy)
    # position 0 (BOS) precedes every edit: identical states there, nothing to recover
    np.testing.assert_allclose(grid.recovered.sel(run=rid, position=0).values, 0, atol=1e-6)
    assert grid.recovery.dims == ("run", "layer", "position")
    assert not grid.corrupt_defined.values.any()  # corrupt="key": the query has no answer
    assert "one position at a time" in str(grid.patched_site.sel(run=rid, layer="L1").values)


def test_interchange_restores_fully_at_the_edited_token_and_not_at_an_unchanged_one(ar_store):
    st, rid = ar_store
    res = computed(interchange(st, [rid], 12))
    assert list(res.site.values) == ["key", "value", "divider", "query"]
    r = res.restoration.sel(run=rid, layer="embed")
    assert float(r.sel(site="key")) == pytest.approx(1.0, abs=1e-5)  # the only edited token
    assert float(r.sel(site="divider")) == pytest.approx(0.0, abs=1e-6)
    assert bool(res.trivial.sel(run=rid, site="key")) and not bool(res.trivial.sel(run=rid, site="value"))
    site = str(res.patched_site.sel(run=rid, layer="L1", site="value").values)
    assert site == "block output of layer L1 at position 'value'"  # a transformer: no caveat
    # the last layer at the query (= readout) position sets the logits: restored exactly, in
    # any model, so the mechanism reading leaves it out
    last = str(res.layer.values[-1])
    assert float(res.restoration.sel(run=rid, layer=last, site="query")) == pytest.approx(1.0, abs=1e-3)
    kept = nontrivial_restoration(res).sel(run=rid)
    assert np.isnan(float(kept.sel(layer=last, site="query"))) and np.isnan(float(kept.sel(layer="embed", site="key")))
    assert np.isfinite(kept.sel(layer="L0").values).all()


def test_run_interchange_names_the_mechanism_and_stores_it(tmp_path):
    st, rid = _ar_store(tmp_path / "s.zarr", arch="gru", n_pairs=8)
    res = run_interchange(st, 12, "gru")
    back = st.read_result("interchange/gru")
    assert str(back.mechanism.sel(run=rid).values) in ("induction", "direct retrieval", "none")
    assert str(back.mechanism.sel(run=rid).values) == str(res.mechanism.sel(run=rid).values)
    assert "recurrent state at later positions" in str(
        back.patched_site.sel(run=rid, layer="L0", site="value").values)


def _interchange_table(value, key, query, gap=0.5):
    layers, sites = ["embed", "L0", "L1"], ["key", "value", "divider", "query"]
    restoration = np.zeros((1, 3, 4))
    restoration[0, :, 1], restoration[0, :, 0], restoration[0, :, 3] = value, key, query
    restoration[0, 0, 0] = 1.0  # embed at the edited key: trivially restored, ignored
    return xr.Dataset({
        "restoration": (("run", "layer", "site"), restoration),
        "p_clean": (("run", "layer", "sequence"), np.full((1, 3, 2), 0.2 + gap)),
        "p_corrupt": (("run", "layer", "sequence"), np.full((1, 3, 2), 0.2)),
        "trivial": (("run", "site"), np.array([[True, False, False, False]])),
    }, coords={"run": ["r"], "layer": layers, "site": sites})


@pytest.mark.parametrize("value, key, query, gap, expected", [
    ([0, 0.8, 0.1], [0, 0.1, 0.1], [0, 0.2, 0.9], 0.5, "induction"),
    ([0, 0.1, 0.2], [0, 0.1, 0.1], [0, 0.9, 1.0], 0.5, "direct retrieval"),
    ([0, 0.1, 0.2], [0, 0.7, 0.1], [0, 0.1, 0.3], 0.5, "direct retrieval"),
    ([0, 0.1, 0.2], [0, 0.1, 0.1], [0, 0.2, 0.3], 0.5, "none"),
    ([0, 0.9, 0.9], [0, 0.1, 0.1], [0, 0.9, 0.9], 0.01, "none"),
])
def test_mechanism_follows_where_restoration_happens(value, key, query, gap, expected):
    table = _interchange_table(value, key, query, gap)
    assert str(classify_mechanism(table).sel(run="r").values) == expected


def test_the_readout_is_not_taken_for_direct_retrieval():
    """Restoration 1 at the last layer's query position (the readout) is not a mechanism."""
    table = _interchange_table([0, 0.1, 0.2], [0, 0.1, 0.1], [0, 0.2, 1.0])
    positions = {"pos_query": [9, 9], "pos_label": [9, 9], "pos_key": [3, 5], "pos_value": [4, 6],
                 "pos_divider": [8, 8]}
    with_positions = table.assign({k: (("run", "sequence"), [v]) for k, v in positions.items()})
    assert str(classify_mechanism(table).sel(run="r").values) == "direct retrieval"  # no positions known
    assert str(classify_mechanism(with_positions).sel(run="r").values) == "none"
    with_positions["restoration"].loc[{"layer": "L0", "site": "query"}] = 0.8
    assert str(classify_mechanism(with_positions).sel(run="r").values) == "direct retrieval"


# ----------------------------------------------------------------------------- bad input
def test_ablating_with_probes_never_fitted_names_the_command(planted):
    with pytest.raises(MissingError, match=r"no probe directions for target 'parity'.*`layerstate probe`"):
        ablation(planted[0], ["r0"], [8], settings=["stored"], layers=["L0"])


def test_k_beyond_the_feature_dimension_is_refused(planted):
    with pytest.raises(ValueError, match=r"k=64 for 'pca:64' is not within 1\.\.20.*choose k <= 20"):
        ablation(planted[0], ["r0"], [8], settings=["pca:64"], layers=["L0"])


def test_unknown_or_malformed_settings_list_the_valid_forms():
    with pytest.raises(ValueError, match=r"unknown ablation setting 'pcb:2'; valid forms: probe"):
        parse_settings(["pcb:2"])
    with pytest.raises(ValueError, match=r"setting 'pca': pca needs a size"):
        parse_settings(["pca"])
    assert [s.name for s in parse_settings(["pca:1,2", "leace"])] == ["pca:1", "pca:2", "leace"]


def test_patching_twins_of_different_lengths_is_refused():
    model, clean, _ = _twins("lstm", length=12)
    _, _, longer = _twins("lstm", length=16)
    patch = xr.DataArray(np.zeros((10, 12), bool), dims=("sequence", "position"))
    with pytest.raises(ValueError, match="clean sequences have 12 positions and corrupted ones 16"):
        patched_logits(model, clean, longer, "L0", patch)


def test_a_run_without_weights_cannot_be_ablated_or_patched(tmp_path, planted):
    st = Store.create(str(tmp_path / "w.zarr"))
    st.add_run("nw", task="parity", arch="lstm", seed=0)
    rng = np.random.default_rng(0)
    st.write_length("nw", 8, hidden=rng.standard_normal((8, 8, 2, 4)).astype("float32"),
                    tokens=rng.integers(0, 2, (8, 8)), labels={"parity": rng.integers(0, 2, (8, 8))})
    message = r"run 'nw' has no trained weights .*`layerstate train`"
    with pytest.raises(MissingError, match=message):
        ablation(st, ["nw"], [8])
    with pytest.raises(MissingError, match=message):
        patching(st, ["nw"], 8)
