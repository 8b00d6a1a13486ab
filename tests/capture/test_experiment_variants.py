"""Named grid variants ([variants.<name>]): which model variant each builds, the settings it
changes, the architectures and tasks it runs for; one-line errors; claims checked against
the restricted grid; a named variant trained, stored and rebuilt."""

from __future__ import annotations

import pytest
import torch

from capture.experiment import ExperimentError, parse_plan
from capture.models import ModelConfig
from capture.train import rebuild_model, train_run
from layerstate.experiment import parse_experiment
from store import Store

GRID = {"tasks": ["assoc_recall", "treecall"], "archs": ["transformer", "mamba", "based", "lstm"],
        "variants": ["default", "no_conv", "conv_k1"], "seeds": [0]}
RESTRICTED = {"no_conv": {"archs": ["mamba", "based"]},
              "conv_k1": {"model": {"conv_kernel": 1}, "archs": ["mamba"], "tasks": ["assoc_recall"]}}


def plan(grid=None, variants=None, **over):
    data = {"experiment": {"name": "t"}, "grid": grid or GRID, "variants": variants or {}}
    data.update(over)
    return parse_plan(data, source="exp.toml")


def ids(p):
    return sorted(r.run_id for r in p.runs())


def test_restricted_variants_run_only_where_named():
    got = ids(plan(variants=RESTRICTED))
    defaults = [f"{t}-{a}-default-s0" for t in GRID["tasks"] for a in GRID["archs"]]
    assert got == sorted(defaults + [
        "assoc_recall-mamba-no_conv-s0", "assoc_recall-based-no_conv-s0",
        "treecall-mamba-no_conv-s0", "treecall-based-no_conv-s0",
        "assoc_recall-mamba-conv_k1-s0",
    ])


def test_a_named_variant_builds_the_default_model_with_its_settings():
    p = plan(variants=RESTRICTED, models={"mamba": {"d_model": 16, "n_layers": 2}})
    by_id = {r.run_id: r for r in p.runs()}
    k1 = by_id["assoc_recall-mamba-conv_k1-s0"].model_config()
    default = by_id["assoc_recall-mamba-default-s0"].model_config()
    assert (k1.variant, k1.conv_kernel, k1.d_model) == ("default", 1, 16)
    assert default.conv_kernel == 4 and by_id["assoc_recall-mamba-no_conv-s0"].model_config().variant == "no_conv"
    # everything else equal: the variant changes only what its table says
    assert k1.model_dump(exclude={"conv_kernel"}) == default.model_dump(exclude={"conv_kernel"})


def test_tables_leave_the_runs_they_do_not_touch_unchanged():
    """A [variants.no_conv] table with every conv arch is the grid without tables, config for
    config (so stores trained before tables existed still match), and default runs keep their
    configs whatever variant tables are added."""
    grid = {**GRID, "variants": ["default", "no_conv"]}
    bare, tabled = plan(grid=grid), plan(grid=grid, variants={"no_conv": {}})
    assert [(r.run_id, r.model_config()) for r in bare.runs()] == [
        (r.run_id, r.model_config()) for r in tabled.runs()]
    with_k1 = {r.run_id: r.model_config() for r in plan(variants=RESTRICTED).runs()}
    assert all(with_k1[r.run_id] == r.model_config() for r in bare.runs() if r.variant == "default")


def test_without_archs_a_variant_runs_where_its_settings_exist():
    got = ids(plan(grid={**GRID, "variants": ["conv_k1"]}, variants={"conv_k1": {"model": {"conv_kernel": 1}}}))
    assert got == sorted(f"{t}-{a}-conv_k1-s0" for t in GRID["tasks"] for a in ("mamba", "based"))
    # a shared setting (n_layers) applies to every architecture
    got = ids(plan(grid={**GRID, "variants": ["deep"]}, variants={"deep": {"model": {"n_layers": 3}}}))
    assert len(got) == 2 * 4
    assert plan(grid={**GRID, "variants": ["deep"]}, variants={"deep": {"model": {"n_layers": 3}}}
                ).runs()[0].model_config().n_layers == 3


@pytest.mark.parametrize(
    ("variants", "grid_variants", "match"),
    [
        ({}, ["default", "conv_k1"],
         r"variant 'conv_k1' is not a model variant \(default, no_conv\); define it with a \[variants.conv_k1\] table"),
        ({"k2": {"model": {"conv_kernel": 2}}}, ["default"],
         r"\[variants.k2\] names a variant not in the grid; grid has: default"),
        ({"conv_k1": {"base": "no_kernel", "model": {"conv_kernel": 1}}}, ["conv_k1"],
         r"\[variants.conv_k1\] base 'no_kernel' is not a model variant; valid: default, no_conv"),
        ({"conv_k1": {"model": {"variant": "no_conv"}}}, ["conv_k1"],
         r"\[variants.conv_k1\] model.variant: not a setting a variant changes; use base = \.\.\."),
        ({"conv_k1": {"model": {"conv_kernel": 1}, "archs": ["gru"]}}, ["conv_k1"],
         r"\[variants.conv_k1\] archs: architecture 'gru' is not in the grid; grid has: transformer, mamba"),
        ({"conv_k1": {"model": {"conv_kernel": 1}, "tasks": ["parity"]}}, ["conv_k1"],
         r"\[variants.conv_k1\] tasks: task 'parity' is not in the grid; grid has: assoc_recall, treecall"),
        ({"no_conv": {"archs": ["mamba", "lstm"]}}, ["no_conv"],
         r"\[variants.no_conv\] archs: 'lstm' has no short convolution for 'no_conv'; drop it from archs"),
        ({"conv_k1": {"model": {"conv_kernel": 1}, "archs": ["transformer"]}}, ["conv_k1"],
         r"\[variants.conv_k1\] archs: 'transformer' has no conv_kernel; drop it from archs or the setting"),
        ({"conv_k1": {"model": {"conv_kernel": 0}}}, ["conv_k1"],
         r"\[variants.conv_k1\] for mamba: conv_kernel: Input should be greater than or equal to 1"),
        ({"conv_k1": {"model": {"head_dim": 4}}}, ["conv_k1"],  # mamba2 and h3 only
         r"\[variants.conv_k1\] selects no run of the grid"),
        ({"conv_k1": {"model": {"conv_kernel": 1}, "archz": ["mamba"]}}, ["conv_k1"],
         r"variants.conv_k1.archz: unknown field"),
        ({}, ["default", "no-conv"], r"variant name 'no-conv' goes into run ids"),
        ({}, ["default", "default"], r"variants repeat"),
    ],
)
def test_bad_variant_tables_get_one_line_errors(variants, grid_variants, match):
    with pytest.raises(ExperimentError, match=match) as info:
        plan(grid={**GRID, "variants": grid_variants}, variants=variants)
    assert str(info.value).startswith("exp.toml: ") and "\n" not in str(info.value)


CLAIM = {"id": "k1", "statement": "s", "kind": "difference", "task": "assoc_recall", "arch": "mamba",
         "compare": "variant", "treatment": "conv_k1", "reference": "default", "direction": "less"}


def experiment(claims):
    return parse_experiment({"experiment": {"name": "t"}, "grid": GRID, "variants": RESTRICTED,
                             "capture": {"lengths": [40]}, "claims": claims}, source="exp.toml")


def test_claims_must_read_runs_the_restricted_grid_has():
    assert [c.id for c in experiment([CLAIM]).claims] == ["k1"]
    with pytest.raises(ExperimentError, match=(
            r"claim 'k1': the grid has no run of task 'treecall', arch 'mamba' in variant 'conv_k1'; "
            r"\[variants.conv_k1\] runs it for archs mamba on tasks assoc_recall")) as info:
        experiment([{**CLAIM, "task": "treecall"}])
    assert "\n" not in str(info.value)
    with pytest.raises(ExperimentError, match="no run of task 'assoc_recall', arch 'based' in variant 'conv_k1'"):
        experiment([{**CLAIM, "arch": "based"}])
    bound = {"id": "b", "statement": "s", "kind": "bound", "task": "treecall", "arch": "transformer",
             "variant": "no_conv", "threshold": 0.5, "direction": "greater"}
    with pytest.raises(ExperimentError, match="no run of task 'treecall', arch 'transformer' in variant 'no_conv'"):
        experiment([bound])
    assert experiment([{**bound, "arch": "mamba"}]).claims[0].variant == "no_conv"


def test_a_named_variant_is_trained_stored_and_rebuilt(tmp_path):
    p = plan(grid={"tasks": ["assoc_recall"], "archs": ["mamba"], "variants": ["conv_k1"], "seeds": [0]},
             variants={"conv_k1": {"model": {"conv_kernel": 1}}},
             models={"mamba": {"d_model": 8, "n_layers": 1}},
             tasks={"assoc_recall": {"n_keys": 6, "n_values": 6, "n_pairs": 2}},
             train={"steps": 2, "batch_size": 4, "eval_every": 2, "n_eval": 4, "eval_lengths": [12],
                    "n_test": 4, "length": 12, "warmup": 1})
    (spec,) = p.runs()
    st = Store.create(str(tmp_path / "s.zarr"))
    res = train_run(st, spec)
    attrs = st.run_attrs(res.run_id)
    assert res.run_id == "assoc_recall-mamba-conv_k1-s0" and attrs["variant"] == "conv_k1"
    assert ModelConfig(**attrs["model_config"]) == spec.model_config()
    model = rebuild_model(st, res.run_id)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv1d)]
    assert convs and all(c.kernel_size == (1,) for c in convs)
    assert train_run(st, spec).skipped  # the stored config matches the named variant's
