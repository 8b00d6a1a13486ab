"""Known answers for the diagnostics a sceptical reader asks of an intervention.

- What an erasure removed: on a layer whose states take two values the erased direction is
  everything the layer varies in (``variance_removed`` ~ 1, ``degenerate``); where the concept
  is one direction of many, erasing it removes little variance and the variance-matched random
  control does nothing.
- Both patching directions: on a model linear in the patched states, denoising and noising
  agree exactly (logit difference); on a *redundant OR* (the readout is the maximum of two
  positions that each carry the answer: either copy is sufficient, neither necessary) they
  disagree.
- Whole-component patching is today's patching, checked against the hooked full re-run, in
  both directions; a subspace that is the whole space patches the whole component.
- Gaussian-noise corruption is refused unless asked for.

The ablation stores use the hand-built 1-layer LSTM of test_interventions.py whose readout
uses exactly one direction u.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from analysis.interventions import (
    DISAGREE,
    ablation,
    logit_metric,
    matched_comparison,
    parse_settings,
    patch_effects,
    patched_logits_reference,
    patching,
    rebuild,
    removal,
    site_description,
)
from analysis.interventions import erasure as E
from store import Store
from tests.analysis.interventions.test_interventions import _ar_store, _rank_one_model, computed

N_SEQ, LENGTH = 160, 8


# ----------------------------------------------------------------------------- stores
def _store(path, states, n_runs: int = 2) -> tuple[Store, np.ndarray]:
    """Runs r0.. (seeds 0..) of the rank-one LSTM with stored L0 states from ``states(rng,
    u)`` (sequence, position, feature) and labels = the model's own predictions."""
    cfg, model, u, _ = _rank_one_model()
    d = model.hidden_size
    st = Store.create(str(path))
    for seed in range(n_runs):
        rid = f"r{seed}"
        st.add_run(rid, task="parity", arch="lstm", seed=seed, model_config=cfg.model_dump())
        st.write_weights(rid, model.state_dict())
        st.update_run_attrs(rid, vocab_size=4, n_classes=2, target="parity", status="trained",
                            train_config={"length": LENGTH})
        rng = np.random.default_rng(10 + seed)
        top = states(rng, u).astype(np.float32)
        hidden = np.stack([rng.standard_normal((N_SEQ, LENGTH, d)), top], axis=2).astype(np.float32)
        with torch.no_grad():
            logits = model.forward_from("L0", torch.from_numpy(hidden[:, :, 1])).numpy()
        st.write_length(rid, LENGTH, hidden=hidden, tokens=rng.integers(0, 4, (N_SEQ, LENGTH)),
                        labels={"parity": logits.argmax(-1)}, logits=logits, dtype="float32")
    return st, u


def _two_valued(rng, u):
    """Like an embedding of two tokens: every state is c + 3u or c - 3u."""
    c = np.linspace(-1, 1, u.size)
    sign = rng.choice([-1.0, 1.0], size=(N_SEQ, LENGTH, 1))
    return c + 3.0 * sign * u


def _one_of_many(rng, u):
    """The concept is +-1 along u (an intermediate-variance direction); ten directions vary
    far more (sd 3), nine far less (sd 0.1): u holds ~1% of the variance."""
    basis = np.linalg.qr(np.column_stack([u, rng.standard_normal((u.size, u.size - 1))]))[0]
    basis[:, 0] = u  # QR may flip its sign
    sd = np.r_[0.0, np.full(10, 3.0), np.full(u.size - 11, 0.1)]
    coef = rng.standard_normal((N_SEQ, LENGTH, u.size)) * sd
    coef[..., 0] = rng.choice([-1.0, 1.0], size=(N_SEQ, LENGTH)) + 0.05 * rng.standard_normal((N_SEQ, LENGTH))
    return coef @ basis.T


@pytest.fixture(scope="module")
def two_valued(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("two") / "s.zarr", _two_valued)


@pytest.fixture(scope="module")
def one_of_many(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("many") / "s.zarr", _one_of_many)


# ----------------------------------------------------------------------------- ablation
def test_a_two_valued_layer_is_flagged_degenerate_and_loses_all_its_variance(two_valued):
    st, _ = two_valued
    res = computed(ablation(st, None, [LENGTH], settings=["leace", "random:1"], layers=["L0"],
                            refit=False, matched=True))
    assert list(res.setting.values) == ["leace", "matched:leace", "random:1"]
    cell = dict(length=LENGTH, layer="L0")
    for rid in ("r0", "r1"):
        at = dict(cell, run=rid)
        assert int(res.state_rank.sel(at)) == 1 and int(res.distinct_states.sel(at)) == 2
        leace = dict(at, setting="leace")
        assert float(res.variance_removed.sel(leace)) == pytest.approx(1.0, abs=1e-6)
        assert bool(res.degenerate.sel(leace)) and bool(res.flag_variance.sel(leace))
        assert int(res.removed_rank.sel(leace)) == 1
        assert int(res.n_directions.sel(run=rid, layer="L0", setting="leace")) == 1
        assert float(res.accuracy_drop.sel(leace)) > 0.3  # the model cannot see its input
        # the matched control has nowhere else to go: it erases the same direction, as much
        matched = dict(at, setting="matched:leace")
        assert float(res.variance_removed.sel(matched)) == pytest.approx(1.0, abs=1e-6)
        assert float(res.accuracy_drop.sel(matched)) == pytest.approx(
            float(res.accuracy_drop.sel(leace)), abs=1e-9)
        rand = dict(at, setting="random:1")
        assert float(res.variance_removed.sel(rand)) < 0.5 and not bool(res.flag_variance.sel(rand))
    test = matched_comparison(res, "leace")
    assert float(test.estimate.sel(task="parity", arch="lstm", variant="default", length=LENGTH,
                                   layer="L0")) == pytest.approx(0.0, abs=1e-9)
    assert bool(test.flagged.sel(task="parity", arch="lstm", variant="default", length=LENGTH,
                                 layer="L0"))


def test_one_direction_of_many_removes_little_variance_and_its_matched_control_nothing(one_of_many):
    st, _ = one_of_many
    res = computed(ablation(st, None, [LENGTH], settings=["leace"], layers=["L0"], refit=False,
                            matched=True))
    for rid in ("r0", "r1"):
        at = dict(run=rid, length=LENGTH, layer="L0")
        leace, matched = dict(at, setting="leace"), dict(at, setting="matched:leace")
        assert float(res.variance_removed.sel(leace)) < 0.03  # ~1 of ~91
        assert not bool(res.flag_variance.sel(leace)) and not bool(res.degenerate.sel(leace))
        assert float(res.accuracy_drop.sel(leace)) > 0.3
        # the control removes the same share of variance, in a direction that is not u
        assert float(res.variance_removed.sel(matched)) == pytest.approx(
            float(res.variance_removed.sel(leace)), rel=0.2)
        assert abs(float(res.accuracy_drop.sel(matched))) < 0.02
        assert float(res.mean_shift.sel(leace)) < 0.05  # LEACE keeps the mean
        assert int(res.state_rank.sel(at)) == 20
    test = matched_comparison(res, "leace", length=LENGTH, layer="L0").sel(
        task="parity", arch="lstm", variant="default")
    assert float(test.estimate) > 0.3 and float(test.matched_drop) < 0.02
    assert not bool(test.flagged)


def test_matched_subspaces_capture_the_target_variance_and_stay_random():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 12)) * np.linspace(0.2, 3.0, 12)
    cov = np.cov(x.T, bias=True)
    lam = np.sort(np.linalg.eigvalsh(cov))[::-1]
    for k, target in ((1, 0.5), (1, 4.0), (3, 10.0), (3, lam[:3].sum())):
        rows = E.matched_np(x, target, k, rng)
        np.testing.assert_allclose(rows @ rows.T, np.eye(k), atol=1e-10)
        assert removal.subspace_variance_np(rows.T, cov) == pytest.approx(target, rel=1e-6)
    # beyond what k directions hold: the top-k principal subspace itself
    rows = E.matched_np(x, 1e9, 2, rng)
    assert removal.subspace_variance_np(rows.T, cov) == pytest.approx(lam[:2].sum(), rel=1e-9)
    # two draws differ (a random control, not a fixed direction)
    a, b = E.matched_np(x, 2.0, 1, rng), E.matched_np(x, 2.0, 1, rng)
    assert abs(float(a[0] @ b[0])) < 0.99


def test_removal_stats_of_a_projection_and_of_leace():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4000, 6)) * np.array([3.0, 1, 1, 1, 1, 1]) + 2.0
    total = float(x.var(0).sum())
    e0 = np.eye(6)[:1]
    share, shift, rank = removal.removal_stats_np(x, *E.projection_np(e0))
    assert share == pytest.approx(x[:, 0].var() / total, rel=1e-9)
    assert shift == pytest.approx(abs(x[:, 0].mean()) / np.sqrt(total), rel=1e-9)  # zeroed, not centred
    assert rank == 1
    share, shift, rank = removal.removal_stats_np(x, *E.projection_np(e0, mean=x.mean(0)))
    assert shift == pytest.approx(0.0, abs=1e-9) and rank == 1
    assert removal.state_stats_np(np.repeat(np.eye(3), 5, axis=0))[:2] == (2, 3)


def test_matched_settings_parse_and_refuse_what_cannot_be_matched():
    names = [s.name for s in parse_settings(["matched:inlp:2,4", "matched:leace"])]
    assert names == ["matched:inlp:2", "matched:inlp:4", "matched:leace"]
    with pytest.raises(ValueError, match="matched needs the setting it matches"):
        parse_settings(["matched:random:1"])
    with pytest.raises(ValueError, match="matched needs the setting it matches"):
        parse_settings(["matched"])


def test_matched_comparison_names_the_missing_control(two_valued):
    st, _ = two_valued
    res = computed(ablation(st, ["r0"], [LENGTH], settings=["leace"], layers=["L0"], refit=False))
    with pytest.raises(ValueError, match=r"no pair 'leace' / 'matched:leace'.*--matched"):
        matched_comparison(res, "leace")


# ----------------------------------------------------------------------------- patching toys
class _Toy(torch.nn.Module):
    """A stand-in model: ``forward_from(layer, hidden)`` only (all `patch_effects` needs)."""

    def __init__(self, readout):
        super().__init__()
        self.readout = readout

    def forward_from(self, layer, hidden):
        return self.readout(hidden)


def _toy_twins(clean_h: np.ndarray, bad_h: np.ndarray) -> tuple[xr.Dataset, xr.Dataset]:
    """Twins (sequence, position, layer=L0, feature); clean answer 0, corrupted answer 1,
    read at the last position."""
    n, length, _ = clean_h.shape

    def twin(h, answer):
        return xr.Dataset(
            {"hidden": (("sequence", "position", "layer", "feature"), h[:, :, None].astype(np.float32)),
             "y": (("sequence", "position"), np.full((n, length), answer)),
             "pos_label": (("sequence",), np.full(n, length - 1))},
            coords={"layer": ["L0"]}, attrs={"target": "y"},
        )

    return twin(clean_h, 0), twin(bad_h, 1)


def _shares(effects, metric="logit"):
    gap = effects[f"gap_{metric}"].sum()
    return effects[f"recovered_{metric}"].sum(1) / gap, effects[f"damaged_{metric}"].sum(1) / gap


def test_denoising_and_noising_agree_on_a_linear_model():
    rng = np.random.default_rng(0)
    w = torch.tensor(rng.standard_normal((5, 2)), dtype=torch.float32)
    linear = _Toy(lambda h: torch.cumsum(h @ w, dim=1))  # logits linear in every state
    clean, bad = _toy_twins(rng.standard_normal((30, 6, 5)), rng.standard_normal((30, 6, 5)))
    effects = patch_effects(linear, clean, bad, "L0", list(range(6)))
    np.testing.assert_allclose(effects["recovered_logit"], effects["damaged_logit"], atol=1e-5)
    recovery, damage = _shares(effects)
    assert np.abs(recovery - damage).max() < 1e-5 < np.abs(recovery).max()
    # the effects add up: patching every position one at a time sums to the whole gap
    assert recovery.sum() == pytest.approx(1.0, abs=1e-4)


def test_denoising_and_noising_disagree_on_a_redundant_or():
    """The redundant OR: the answer's logit is the max of feature 0 at positions 1 and 3, and
    both carry it in the clean run (1) and neither in the corrupted one (0)."""
    def readout(h):
        logit = torch.maximum(h[:, 1, 0], h[:, 3, 0])
        out = torch.zeros(h.shape[0], h.shape[1], 2)
        out[:, -1, 0] = logit
        return out

    n = 20
    clean_h, bad_h = np.zeros((n, 5, 3)), np.zeros((n, 5, 3))
    clean_h[:, [1, 3], 0] = 1.0
    clean, bad = _toy_twins(clean_h, bad_h)
    effects = patch_effects(_Toy(readout), clean, bad, "L0", [1, 2, 3])
    recovery, damage = _shares(effects)
    np.testing.assert_allclose(recovery, [1.0, 0.0, 1.0], atol=1e-6)  # each copy is sufficient
    np.testing.assert_allclose(damage, [0.0, 0.0, 0.0], atol=1e-6)  # neither is necessary
    assert (np.abs(recovery - damage) >= DISAGREE).tolist() == [True, False, True]
    prob_recovery, prob_damage = _shares(effects, "prob")
    assert prob_recovery[0] == pytest.approx(1.0) and prob_damage[0] == pytest.approx(0.0)


# ----------------------------------------------------------------------------- patching models
@pytest.fixture(scope="module")
def ar(tmp_path_factory):
    st, rid = _ar_store(tmp_path_factory.mktemp("ar") / "s.zarr", arch="gru")
    return st, rid, st.load_length(rid, 12, kind="cfclean"), st.load_length(rid, 12, kind="cfcorrupt")


def test_whole_component_patching_both_ways_equals_the_hooked_rerun(ar):
    st, rid, clean, bad = ar
    model = rebuild(st, rid)
    rows = np.arange(clean.sizes["sequence"])
    pos = clean.pos_label.values
    good, wrong = clean.answer.values[rows, pos], bad.answer.values[rows, pos]

    def metric(logits):
        return logit_metric(logits.values, pos, good, wrong)

    positions = [2, 5, 9]
    for layer in ("embed", "L0"):
        effects = patch_effects(model, clean, bad, layer, positions, batch_size=8)
        m_clean = metric(patched_logits_reference(model, clean, clean, layer, _at(clean, [])))
        m_bad = metric(patched_logits_reference(model, clean, bad, layer, _at(clean, [])))
        for i, p in enumerate(positions):
            denoised = metric(patched_logits_reference(model, clean, bad, layer, _at(clean, [p])))
            noised = metric(patched_logits_reference(model, bad, clean, layer, _at(clean, [p])))
            np.testing.assert_allclose(effects["recovered_logit"][i], denoised - m_bad, atol=1e-4)
            np.testing.assert_allclose(effects["damaged_logit"][i], m_clean - noised, atol=1e-4)
        # a subspace that is the whole space is the whole component's patch
        full = patch_effects(model, clean, bad, layer, positions, basis=np.eye(clean.sizes["feature"]),
                              batch_size=8)
        for key in ("recovered_logit", "damaged_prob"):
            np.testing.assert_allclose(full[f"sub_{key}"], full[key], atol=1e-5)


def _at(like: xr.Dataset, positions) -> xr.DataArray:
    where = np.zeros((like.sizes["sequence"], like.sizes["position"]), bool)
    where[:, positions] = True
    return xr.DataArray(where, dims=("sequence", "position"))


def test_the_patching_grid_reports_both_directions_two_metrics_and_the_subspace(ar):
    st, rid, _, _ = ar
    res = computed(patching(st, [rid], 12, layers=["L0"], positions=[0, 6, 11], subspace="probe"))
    for name in ("recovery", "recovery_prob", "damage", "damage_prob", "recovery_subspace",
                 "damage_subspace", "subspace_share", "subspace_share_prob", "disagree",
                 "subspace_exceeds"):
        assert res[name].dims == ("run", "layer", "position"), name
    assert "token replacement" in res.attrs["corruption"]
    np.testing.assert_allclose(res.recovered.sel(run=rid, position=0).values, 0, atol=1e-6)
    np.testing.assert_allclose(res.damaged.sel(run=rid, position=0).values, 0, atol=1e-6)
    assert not bool(res.disagree.sel(run=rid, layer="L0", position=0))
    assert np.isnan(float(res.subspace_share.sel(run=rid, layer="L0", position=0)))  # 0 / 0
    assert np.isfinite(res.recovery_subspace.values).all()


def test_a_noise_corruption_is_refused_unless_asked_for(ar):
    st, rid, _, _ = ar
    with pytest.raises(ValueError, match=r"Gaussian-noise corruption is refused.*Zhang & Nanda"):
        patching(st, [rid], 12, corruption="noise")
    res = computed(patching(st, [rid], 12, layers=["embed"], positions=[0], corruption="noise",
                            allow_noise=True))
    assert "Gaussian noise" in res.attrs["corruption"]
    assert not res.corrupt_defined.sel(run=rid).values.any()  # no corrupted answer under noise
    assert np.isfinite(res.recovery.values).all()


def test_zoo_architectures_carry_the_recurrent_state_caveat():
    for arch in ("based", "baseconv", "h3", "hyena", "deltanet"):
        assert "recurrent state at later positions" in site_description(arch, "L1", "position 3")
    assert "recurrent" not in site_description("transformer", "L1", "position 3")


def test_every_architecture_is_classed_where_it_is_defined_and_the_caveat_follows():
    # the caveat reads each architecture's registration (capture.models.registry): only the
    # Transformer reads every earlier position afresh; an unknown (imported) arch gets no caveat
    from capture.models import registry

    assert [a for a in registry.names() if not registry.keeps_state(a)] == ["transformer"]
    for arch in registry.names():
        caveat = "recurrent state at later positions" in site_description(arch, "L1", "position 3")
        assert caveat == registry.keeps_state(arch), arch
    assert "recurrent" not in site_description("gpt2", "L1", "position 3")



# ----------------------------------------------------------------------------- shown to readers
@pytest.fixture(scope="module")
def two_valued_result(two_valued):
    st, _ = two_valued
    return st, computed(ablation(st, None, [LENGTH], settings=["leace", "random:1"], layers=["L0"],
                                 refit=False, matched=True))


def test_the_cli_lines_flag_the_degenerate_erasure_and_print_the_matched_difference(two_valued_result):
    from layerstate import present

    _, res = two_valued_result
    lines = list(present.ablation_lines(res))
    drop = next(x for x in lines if x.startswith("r0 [leace] accuracy drop:"))
    assert "!" in drop and "variance removed: L0=1.00" in drop
    flag = next(x for x in lines if x.startswith("r0 [leace] FLAG"))
    assert flag == ("r0 [leace] FLAG L0 (variance: removes 100%, degenerate: 2 distinct states, "
                    "rank 1 <= 1 erased)")
    assert "variance" not in next(x for x in lines if x.startswith("r0 [random:1] FLAG"))
    assert any(x.startswith("FLAG: 'variance' = the erasure removes more than 50%") for x in lines)
    matched = [x for x in lines if x.startswith("[leace - matched:leace] parity/lstm/default len8")]
    assert matched and "L0=+0.000" in matched[0] and "paired t over 2 seeds" in matched[0]


def test_the_report_shows_what_each_erasure_removed_beside_its_drop(two_valued_result):
    from reports.interventions import ablation_frames, matched_table, removed_table

    st, res = two_valued_result
    drop = ablation_frames(res, st)["drop"]
    table = removed_table(res, st, drop, LENGTH, "ablation/default", ["embed", "L0"])
    row = table.display.set_index("setting").loc["leace"]
    assert row["variance removed"] == "100.0%" and row["flag"] == "variance, degenerate"
    assert row["states: rank (distinct)"] == "1 (2)" and row["rank removed / erased"] == "1 / 1"
    matched = matched_table(res, st, LENGTH, "ablation/default")
    assert matched is not None
    assert float(matched.data.set_index("setting").loc["leace", "estimate"]) == pytest.approx(0.0, abs=1e-9)


def test_the_cli_and_report_put_both_patching_directions_side_by_side(ar):
    from analysis.intervals import group_intervals
    from layerstate import present
    from reports.interventions import PATCHING_PAIRS, directions_table, subspace_table

    st, rid, _, _ = ar
    res = computed(patching(st, [rid], 12, layers=["embed", "L0"], positions=[0, 3, 6, 9, 11],
                            subspace="probe"))
    lines = list(present.patching_lines(res))
    assert "max damage (noising)" in lines[0] and "disagree at" in lines[0]
    assert "probe subspace at layer" in lines[1]
    table = directions_table(res, st, "patching/default", ["embed", "L0"], "position", PATCHING_PAIRS)
    assert {"denoising (logit)", "noising (logit)", "denoising (prob)", "noising (prob)", "disagree"} <= set(
        table.data.columns)
    first = table.data.query("layer == 'L0' and position == '0'").iloc[0]
    assert first["denoising (logit)"] == pytest.approx(0.0, abs=1e-6) and not first["disagree"]
    whole = group_intervals(res["recovered"], res["gap"], st)
    sub = subspace_table(res, st, "patching/default", ["embed", "L0"], whole)
    assert {"whole", "subspace", "share"} <= set(sub.data.columns)


def test_a_given_direction_gets_its_matched_control_too(one_of_many):
    st, u = one_of_many
    directions = xr.DataArray(u[None, None], dims=("layer", "direction", "feature"), coords={"layer": ["L0"]})
    res = computed(ablation(st, ["r0"], [LENGTH], settings=["given"], layers=["L0"], refit=False,
                            matched=True, directions=directions))
    at = dict(run="r0", length=LENGTH, layer="L0")
    assert list(res.setting.values) == ["given", "matched:given"]
    assert list(res.matched_to.values) == ["", "given"]
    assert float(res.accuracy_drop.sel(dict(at, setting="given"))) > 0.3
    assert abs(float(res.accuracy_drop.sel(dict(at, setting="matched:given")))) < 0.02
    # zero ablation of u: the states' mean along u is ~0, so the mean barely moves
    assert float(res.mean_shift.sel(dict(at, setting="given"))) < 0.05


def test_a_difference_claim_between_a_setting_and_its_matched_control_is_the_paired_comparison(
        one_of_many):
    """The claim "erasing the concept hurts more than erasing as much variance elsewhere" is a
    difference claim on ablation_drop comparing a setting with its matched control."""
    from analysis.claims import evaluate_claims, make_claim
    from analysis.interventions import run_ablation

    st, _ = one_of_many
    res = run_ablation(st, "matched", runs=None, lengths=[LENGTH], settings=["leace"], layers=["L0"],
                       refit=False, matched=True)
    claim = make_claim(id="beyond-variance", statement="LEACE at L0 hurts more than its matched control",
                  kind="difference", metric="ablation_drop", compare="setting", treatment="leace",
                  reference="matched:leace", task="parity", arch="lstm", layer="L0", length=LENGTH,
                  result="matched", direction="greater", margin=0.05)
    row = evaluate_claims(st, [claim]).isel(claim=0)
    test = matched_comparison(res, "leace", length=LENGTH, layer="L0").sel(
        task="parity", arch="lstm", variant="default")
    assert float(row.estimate) == pytest.approx(float(test.estimate), abs=1e-12)
    # one-sided vs two-sided; the claim's variance is never below the sequences' sampling variance
    # (the two settings' ablated accuracies; docs/decisions.md), so its p can only be larger
    if "sampling" in str(row.variance.values):
        assert float(row.p) > float(test.p) / 2
    else:
        assert float(row.p) == pytest.approx(float(test.p) / 2, rel=1e-6)
