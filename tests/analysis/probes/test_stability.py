"""Cross-seed stability of the probe subspaces: an orthogonal map between seeds' states is
needed (raw weights of rotated seeds read the null), a label along the same direction up to
each seed's rotation overlaps after the map, one along unrelated directions does not, and the
interval over seeds covers the truth."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import special_ortho_group

from analysis.probes import probe, probe_stability
from analysis.probes.stability import (
    fit_alignment,
    jackknife_pseudo,
    null_overlap,
    overlap,
    probe_subspace,
    seed_interval,
)
from store.errors import InvalidArgumentError
from tests.analysis.probes.stability_stores import probed, rotated_seeds

PLANTED = "L1"


def _stability(path, **kw):
    st = rotated_seeds(path, **kw)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    return st, probe_stability(st, "probes/toy", save=True)


@pytest.fixture(scope="module")
def same(tmp_path_factory):
    return _stability(tmp_path_factory.mktemp("same") / "s.zarr", same=True)


def test_same_direction_up_to_rotation_overlaps_after_the_map_and_not_before(same):
    st, ds = same
    at = dict(length=8, layer=PLANTED)
    assert float(ds.overlap_profile.sel(**at).min()) > 0.8
    assert float(ds.raw_overlap.sel(**at).mean()) < 0.25  # rotated seeds: raw weights near the null
    assert float(ds.null_profile.sel(**at).mean()) == pytest.approx(1 / 12)
    assert float(ds.alignment_r2.sel(**at).min()) > 0.7
    assert set(ds.inputs.values.ravel()) == {"shared"}
    res = st.read_result("stability/toy")
    lo = float(res.stability_lower.sel(length=8, layer=PLANTED).squeeze())
    assert lo > float(res.null_estimate.sel(length=8, layer=PLANTED).squeeze())
    assert res.attrs["probe_result"] == "probes/toy"


def test_unrelated_directions_per_seed_read_the_null_after_the_map(tmp_path):
    _, ds = _stability(tmp_path / "s.zarr", same=False)
    at = dict(length=8, layer=PLANTED)
    assert float(ds.overlap_profile.sel(**at).mean()) < 0.25
    assert float(ds.raw_overlap.sel(**at).mean()) < 0.25


def test_without_rotation_raw_and_aligned_agree(tmp_path):
    _, ds = _stability(tmp_path / "s.zarr", same=True, rotate=False, seeds=3)
    at = dict(length=8, layer=PLANTED)
    assert float(ds.raw_overlap.sel(**at).mean()) == pytest.approx(float(ds.overlap.sel(**at).mean()), abs=0.05)


def test_the_map_does_not_see_the_label():
    """Two runs whose only shared structure is the label: centring by the label's class means
    leaves nothing to align, so the label's two directions are not mapped onto each other."""
    g = np.random.default_rng(0)
    n, d = 2000, 6
    y = g.integers(0, 2, n)
    A = g.standard_normal((n, d)) + 3 * np.eye(d)[0] * y[:, None]
    B = g.standard_normal((n, d)) + 3 * np.eye(d)[1] * y[:, None]
    blind = fit_alignment(A[:1000], B[:1000], A[1000:], B[1000:], (y[:1000], y[1000:]))
    seeing = fit_alignment(A[:1000], B[:1000], A[1000:], B[1000:])
    e0 = np.eye(d)[:1]
    assert overlap(probe_subspace(np.vstack([e0, -e0]) @ seeing.R), np.eye(d)[:, 1:2]) > 0.9
    assert overlap(probe_subspace(np.vstack([e0, -e0]) @ blind.R), np.eye(d)[:, 1:2]) < 0.5
    assert blind.r2 < 0.1


def test_overlap_of_random_subspaces_averages_k_over_d():
    g = np.random.default_rng(1)
    d, k = 20, 3
    vals = [overlap(np.linalg.qr(g.standard_normal((d, k)))[0], np.linalg.qr(g.standard_normal((d, k)))[0])
            for _ in range(2000)]
    assert np.mean(vals) == pytest.approx(null_overlap(k, k, d), abs=0.01)
    R = special_ortho_group.rvs(d, random_state=2)
    Q = np.linalg.qr(g.standard_normal((d, k)))[0]
    assert overlap(R @ Q, R @ Q) == pytest.approx(1.0)
    W = g.standard_normal((4, d))  # 4 classes: 3 directions after centring over classes
    assert probe_subspace(W).shape == (d, 3)
    assert probe_subspace(np.vstack([W[0] / 2, -W[0] / 2])).shape == (d, 1)


def test_pseudo_values_average_to_the_pair_mean_and_need_three_seeds():
    g = np.random.default_rng(3)
    M = g.uniform(size=(5, 5))
    M = (M + M.T) / 2
    ps = jackknife_pseudo(M)
    assert ps.mean() == pytest.approx(M[~np.eye(5, dtype=bool)].mean())
    loo = [np.delete(np.delete(M, i, 0), i, 1) for i in range(5)]
    expect = [5 * ps.mean() - 4 * m[~np.eye(4, dtype=bool)].mean() for m in loo]
    assert ps == pytest.approx(expect)
    assert np.isnan(jackknife_pseudo(M[:2, :2])).all()
    assert seed_interval(M[:2, :2])[4] == "one pair"


def test_seed_interval_covers_the_mean_pair_value_in_simulation():
    """Seeds with a latent quality q_i; a pair's overlap is (q_i + q_j) / 2 plus pair noise.
    The 95% jackknife t interval over 6 seeds covers the population mean about 95% of the time
    (a t over each seed's mean overlap would cover far less: it forgets pairs share seeds)."""
    g = np.random.default_rng(4)
    n, hits, naive, trials = 6, 0, 0, 400
    for _ in range(trials):
        q = g.normal(0.5, 0.1, n)
        M = (q[:, None] + q[None, :]) / 2 + g.normal(0, 0.03, (n, n))
        M = np.triu(M, 1) + np.triu(M, 1).T
        _, lo, hi, _, _ = seed_interval(M)
        hits += lo <= 0.5 <= hi
        m = np.where(~np.eye(n, dtype=bool), M, 0).sum(1) / (n - 1)
        half = 2.571 * m.std(ddof=1) / np.sqrt(n)
        naive += abs(m.mean() - 0.5) <= half
    assert 0.90 <= hits / trials <= 0.99
    assert naive / trials < 0.85


def _failing_seeds(g, cells: int, n: int, fail: float, mean: float = 0.5):
    """A stability result of ``cells`` cells of ``n`` seeds each (the additive model above); each
    seed fails to learn with probability ``fail``, and every pair it is in then reads the null."""
    import xarray as xr

    pair_a, pair_b, values, groups, failed = [], [], [], {}, set()
    for c in range(cells):
        runs = [f"c{c}-s{i}" for i in range(n)]
        q, down = g.normal(mean, 0.1, n), g.random(n) < fail
        failed |= {r for r, d in zip(runs, down, strict=True) if d}
        for i in range(n):
            for j in range(i + 1, n):
                v = (q[i] + q[j]) / 2 + g.normal(0, 0.03)
                values.append(0.05 + abs(g.normal(0, 0.02)) if down[i] or down[j] else v)
                pair_a.append(runs[i])
                pair_b.append(runs[j])
        groups[("t", f"c{c}", "default")] = runs
    v = np.asarray(values)[:, None, None]
    ds = xr.Dataset({"overlap_profile": (("pair", "length", "layer"), v),
                     "null_profile": (("pair", "length", "layer"), np.full_like(v, 0.05))},
                    coords={"pair_a": ("pair", pair_a), "pair_b": ("pair", pair_b), "length": [12], "layer": ["L0"]})
    return ds, groups, failed


@pytest.mark.parametrize("n", [4, 6, 8])
def test_with_failed_seeds_the_interval_over_the_seeds_that_learned_keeps_its_level(n):
    """15% of seeds fail to learn. Counted in, a failed seed's pairs sit at the null and the
    interval over 4-8 seeds covers the seeds' mean overlap far less than 95% of the time (its
    place depends on whether the few seeds drawn include a failure); left out (what the
    behaviour results say), the interval is about the seeds that learned and covers their mean
    at its level. A cell with fewer than 3 seeds that learned has no interval."""
    from analysis.probes.stability import interval_frame

    g = np.random.default_rng(n)
    ds, groups, failed = _failing_seeds(g, 300, n, 0.15)
    frame = interval_frame(ds, groups, failed).query("n_seeds >= 3")
    cover = ((frame.lower <= 0.5) & (0.5 <= frame.upper)).mean()
    assert cover >= 0.9, cover
    assert len(frame) >= 0.8 * 300 if n >= 6 else len(frame) >= 0.6 * 300
    assert frame["method"].str.contains("that did not left out").any()
    # counted in: the interval is about the mean over all seeds, and misses it
    p_learn = 0.85**2
    everyone = p_learn * 0.5 + (1 - p_learn) * (0.05 + 0.02 * np.sqrt(2 / np.pi))
    counted = interval_frame(ds, groups).query("n_seeds >= 3")
    assert ((counted.lower <= everyone) & (everyone <= counted.upper)).mean() < 0.85


def test_no_shared_sequences_and_no_weights_is_refused_with_the_fix(tmp_path):
    st = rotated_seeds(tmp_path / "s.zarr", seeds=2)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    with pytest.raises(InvalidArgumentError, match=r"share 160 .* r0, r1 have no stored weights .* leave --inputs at auto"):
        probe_stability(st, "probes/toy", inputs="rerun")


def test_seeds_without_shared_sequences_or_weights_are_refused_with_the_fix(tmp_path):
    st = rotated_seeds(tmp_path / "a.zarr", seeds=1)
    other = rotated_seeds(tmp_path / "b.zarr", seeds=1, rng=1)
    st.add_run("r1", task="toy", arch="lstm", seed=1)
    g = other.open_length("r0", 8)
    st.write_length("r1", hidden=np.asarray(g["hidden"].values), tokens=np.asarray(g["tokens"].values),
                    labels={"y": np.asarray(g["y"].values)}, block_size=64)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    with pytest.raises(InvalidArgumentError, match=r"share 0 .* capture the seeds on the same sequences"):
        probe_stability(st, "probes/toy")


def test_seeds_on_their_own_sequences_are_compared_by_re_running_each_model(tmp_path):
    """layerstate's capture gives every seed its own sequences: the pair's states on common
    sequences come from running each stored model on the other's tokens. Three runs of one
    model (the same weights under seeds 0-2, each on its own tokens, labelled with the model's
    own prediction): the map between them is the identity (held-out R^2 about 1) and the
    probes of the label the last layer feeds the head agree."""
    import torch

    from capture.models import ModelConfig, build_model
    from store import Store

    cfg = ModelConfig(arch="lstm", d_model=16, n_layers=1)
    model = build_model(cfg, vocab_size=4, n_classes=2, seed=0)
    st = Store.create(str(tmp_path / "s.zarr"))
    g = np.random.default_rng(5)
    for s in range(3):
        run = f"r{s}"
        st.add_run(run, task="toy", arch="lstm", seed=s, model_config=cfg.model_dump())
        st.write_weights(run, model.state_dict())
        st.update_run_attrs(run, vocab_size=4, n_classes=2, target="y", status="trained")
        tokens = g.integers(0, 4, (200, 8))
        with torch.no_grad():
            logits, hidden = model.forward_with_hidden(torch.as_tensor(tokens))
        st.write_length(run, hidden=hidden.numpy(), tokens=tokens, labels={"y": logits.argmax(-1).numpy()},
                        logits=logits.numpy(), dtype="float32", block_size=64)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    ds = probe_stability(st, "probes/toy", save=True)
    assert set(ds.inputs.values.ravel()) == {"rerun"}
    assert float(ds.alignment_r2.min()) > 0.99
    assert float(ds.overlap_profile.sel(length=8, layer="L0").min()) > 0.5
    assert float(ds.overlap_profile.sel(length=8, layer="L0").mean()) > 5 * float(ds.null_profile.mean())
    assert np.isfinite(ds.shuffled_profile.sel(length=8, layer="L0")).all()  # each run's null on its own rows


def test_shuffled_label_null_removes_the_agreement_of_shared_rows_at_layers_without_the_label(tmp_path):
    """Seeds on the same 320 sequences: at the embedding and L0 (no label) both seeds' probes fit
    the same chance structure of the shared rows, so the overlap's interval sits far above the
    random-subspace null there -- yet not above the band of probes of the permuted label, while
    the planted layer clears both."""
    from analysis.probes.stability import SHUFFLES, agreement_frame

    st = probed(tmp_path / "s.zarr", n=320, noise=0.5)
    res = st.read_result("stability/toy")
    assert res.sizes["shuffle"] == SHUFFLES and "shuffled" in res.attrs["interval_metrics"]
    f = agreement_frame(res).set_index("layer")
    for layer in ("embed", "L0"):
        assert f.loc[layer, "lower"] > 2 * f.loc[layer, "null"]  # the random-subspace null alone: "agree"
        assert f.loc[layer, "lower"] < f.loc[layer, "shuffled_upper"]
        assert not f.loc[layer, "agree"]
    assert f.loc[PLANTED, "lower"] > f.loc[PLANTED, "shuffled_upper"] > f.loc[PLANTED, "null"]
    assert f.loc[PLANTED, "agree"]
    assert f.loc[PLANTED, "shuffled_lower"] <= f.loc[PLANTED, "shuffled"] <= f.loc[PLANTED, "shuffled_upper"]


def test_a_null_without_permutations_is_refused(tmp_path):
    st = rotated_seeds(tmp_path / "s.zarr", seeds=2)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    with pytest.raises(InvalidArgumentError, match="shuffles must be at least 1"):
        probe_stability(st, "probes/toy", shuffles=0)


def test_a_seed_that_did_not_learn_is_left_out_and_named(tmp_path):
    """End to end: the behaviour result says one seed's readout is at chance; the stored
    stability intervals are over the other seeds, and the result and its lines say which was
    left out and what said so."""
    from analysis.behaviour import store_behaviour
    from layerstate.present import stability_lines

    st = rotated_seeds(tmp_path / "s.zarr", seeds=5, readout=True, at_chance=(4,))
    store_behaviour(st, "toy", target="y")
    probe(st, "y", positions="last", save=True, scheduler="sync")
    probe_stability(st, "probes/toy", save=True)
    res = st.read_result("stability/toy")
    assert list(res.attrs["left_out"]) == ["r4"] and res.attrs["learned_from"] == "behaviour/toy"
    assert int(res.stability_n_seeds.sel(layer=PLANTED).max()) == 4
    assert "r4" in str(res.stability_method.sel(layer=PLANTED).values.ravel()[0])
    lines = list(stability_lines(res, st))
    assert any(line.startswith("left out 1 seed that did not learn (behaviour/toy): r4") for line in lines)
