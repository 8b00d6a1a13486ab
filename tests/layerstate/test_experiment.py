"""Experiment files, whole: capture's sections, analysis settings and claims, all checked
when the file loads (a typo in a claim fails before anything is trained)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.claims.kinds import ClaimBase
from capture.experiment import CapturePlan
from layerstate.experiment import ExperimentError, load_claims, load_experiment, parse_experiment
from store import config_hash, run_identity

ROOT = Path(__file__).resolve().parents[2]

CLAIM = {"id": "c", "statement": "s", "kind": "difference", "task": "parity", "compare": "arch",
         "treatment": "lstm", "reference": "gru", "length": 40}


def minimal(claims=(), **over):
    data = {"experiment": {"name": "t"},
            "grid": {"tasks": ["parity", "assoc_recall"], "archs": ["lstm", "gru", "mamba"],
                     "variants": ["default", "no_conv"]},
            "capture": {"lengths": [40, 80], "counterfactual_pairs": 8, "counterfactual_lengths": [40]},
            "claims": list(claims)}
    data.update(over)
    return data


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "experiments").glob("*.toml")))
def test_shipped_experiments_validate(name):
    import tomllib

    path = ROOT / "experiments" / name
    if "experiment" not in tomllib.loads(path.read_text()):  # a design for an experiment's claims
        from layerstate.experiment import load_design

        design = load_design(path)
        assert design is not None and design.seeds()[0] == design.first_seeds
        return
    exp = load_experiment(path)
    assert exp.runs() and all(isinstance(c, ClaimBase) for c in exp.claims)
    plan = exp.plan
    assert type(plan) is CapturePlan and [r.run_id for r in plan.runs()] == [r.run_id for r in exp.runs()]


def test_claims_are_dumped_as_written(tmp_path):
    exp = parse_experiment(minimal([CLAIM]))
    dumped = exp.model_dump(mode="json")
    assert dumped["claims"] == [CLAIM]  # the report shows the tables as declared
    assert json.dumps(dumped)  # and it is plain JSON


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"treatmnet": "lstm"}, r"claim 'c': treatmnet: unknown field; did you mean 'treatment'\?"),
        ({"task": "sorting"}, r"claim 'c': task 'sorting' is not one of this experiment's tasks \(parity, assoc_recall\)"),
        ({"reference": "transformer"}, r"claim 'c': reference 'transformer' is not one of this experiment's archs"),
        ({"compare": "variant", "arch": "mamba", "treatment": "no_mixer", "reference": "default"},
         r"treatment 'no_mixer' is not one of this experiment's variants \(default, no_conv\)"),
        ({"reference": None}, r"claim 'c': a difference claim needs reference"),
        ({"statement": None}, r"claim 'c': statement: Field required"),
        ({"length": 120}, r"length 120 is not one of this experiment's lengths \(40, 80\)"),
        ({"kind": "readable_by", "arch": "lstm", "layer": "L7", "threshold": 0.9, "compare": None, "treatment": None,
          "reference": None},
         r"layer 'L7' is not one of this experiment's layers \(embed, L0, L1, L2, L3\)"),
        ({"task": "assoc_recall", "metric": "restoration", "arch": "lstm", "compare": "site",
          "treatment": "value", "reference": "answer", "layer": "L0"},
         r"reference 'answer' is not one of this experiment's sites \(key, value, divider, query\)"),
        ({"metric": "restoration", "site": "value", "length": 80, "layer": "L0"},
         r"length 80 is not one of this experiment's lengths \(40\)"),
        ({"kind": "equivalence"}, r"an equivalence claim needs margin"),
        ({"task": "assoc_recall", "metric": "restoration", "arch": "lstm", "compare": "site",
          "treatment": "value", "reference": "query"}, r"a restoration claim names its layer = \.\.\."),
        ({"metric": "probe_accuracy"}, r"metric = 'probe_accuracy' needs layer = \.\.\. \(or compare = 'layer'\)"),
    ],
)
def test_malformed_claims_are_refused_at_load(change, match):
    claim = {k: v for k, v in {**CLAIM, **change}.items() if v is not None}
    with pytest.raises(ExperimentError, match=match) as info:
        parse_experiment(minimal([claim]), source="exp.toml")
    assert str(info.value).startswith("exp.toml: claim") and "\n" not in str(info.value)


def test_duplicate_ids_and_restoration_without_pairs():
    with pytest.raises(ExperimentError, match="claim id 'c' is used twice"):
        parse_experiment(minimal([CLAIM, CLAIM]))
    restoration = {**CLAIM, "task": "assoc_recall", "metric": "restoration", "compare": "site",
                   "arch": "lstm", "treatment": "value", "reference": "query", "layer": "L0"}
    parse_experiment(minimal([restoration]))
    with pytest.raises(ExperimentError, match="set \\[capture\\] counterfactual_pairs"):
        parse_experiment(minimal([restoration], capture={"lengths": [40]}))


def test_grid_errors_come_before_claim_errors():
    with pytest.raises(ExperimentError, match="unknown task 'sorting'; valid:"):
        parse_experiment(minimal([{**CLAIM, "task": "sorting"}],
                                 grid={"tasks": ["sorting"], "archs": ["lstm"]}))


def test_bad_analysis_settings():
    with pytest.raises(ExperimentError, match="probe_positions must be all, last or pooled"):
        parse_experiment(minimal(analysis={"probe_positions": "first"}))
    with pytest.raises(ExperimentError, match=r"analysis.probez: unknown field"):
        parse_experiment(minimal(analysis={"probez": True}))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ExperimentError, match="not found"):
        load_experiment(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment\nname=")
    with pytest.raises(ExperimentError, match="not valid TOML"):
        load_experiment(bad)


def test_claims_files_alone_or_in_an_experiment(tmp_path):
    only = tmp_path / "claims.toml"
    only.write_text('[[claims]]\nid = "c"\nstatement = "s"\nkind = "difference"\ntask = "sorting"\n'
                    'treatment = "no_conv"\nreference = "default"\n')
    assert [c.task for c in load_claims(only)] == ["sorting"]  # no grid to check against
    exp = ROOT / "experiments" / "quick.toml"
    assert [c.id for c in load_claims(exp)] == [c.id for c in load_experiment(exp).claims]


REF = {"source": "Jiang 2026", "metric": "claim", "claim": "c", "value": -12.64, "unit": "pp"}


def test_references_are_validated_and_dumped_as_written():
    exp = parse_experiment(minimal([CLAIM], reference=[
        REF, {"source": "p", "metric": "accuracy", "task": "parity", "arch": "lstm", "length": 80, "value": 1.0},
        {"source": "p", "metric": "probe_accuracy", "task": "parity", "arch": "gru", "layer": "L1", "value": 0.9}]))
    dumped = exp.model_dump(mode="json")["reference"]
    assert dumped[0] == REF  # as the report reads it (reports.references)
    assert [r.metric for r in exp.reference] == ["claim", "accuracy", "probe_accuracy"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"claim": "d"}, r"reference #1 \(Jiang 2026\): claim 'd' is not one of this experiment's claims \(c\)"),
        ({"claim": None}, r"reference #1 \(Jiang 2026\): metric = 'claim' needs claim"),
        ({"value": "big"}, r"reference #1 \(Jiang 2026\): value: Input should be a valid number"),
        ({"unit": "bp"}, r"reference #1 \(Jiang 2026\): unit: Input should be 'fraction', 'pp', 'percent' or '%'"),
        ({"valeu": 1}, r"reference #1 \(Jiang 2026\): valeu: unknown field; did you mean 'value'\?"),
        ({"source": None}, r"reference #1: source: Field required"),
        ({"metric": "accuracy", "claim": None, "task": "parity", "arch": "transformer"},
         r"arch 'transformer' is not one of this experiment's archs \(lstm, gru, mamba\)"),
        ({"metric": "accuracy", "claim": None, "task": "parity", "arch": "lstm", "length": 120},
         r"length 120 is not one of this experiment's lengths \(40, 80\)"),
        ({"metric": "probe_accuracy", "claim": None, "task": "parity", "arch": "lstm", "layer": "L9"},
         r"layer 'L9' is not one of this experiment's layers of lstm"),
    ],
)
def test_malformed_references_are_refused_in_one_line(change, match):
    ref = {k: v for k, v in {**REF, **change}.items() if v is not None}
    with pytest.raises(ExperimentError, match=match) as info:
        parse_experiment(minimal([CLAIM], reference=[ref]), source="exp.toml")
    assert str(info.value).startswith("exp.toml: reference #1") and "\n" not in str(info.value)


def test_shipped_experiments_declare_what_the_papers_report():
    conv = load_experiment(ROOT / "experiments" / "conv1d.toml")
    assert {(r.claim, r.value, r.unit) for r in conv.reference} == {
        ("conv1d-s3", -12.64, "pp"), ("conv1d-parity", -6.83, "pp"), ("conv1d-dyck-null", 4.04, "pp")}
    jiang = load_experiment(ROOT / "experiments" / "jiang2026_reduced.toml")
    assert {(r.task, r.arch) for r in jiang.reference} == {("parity", "lstm"), ("parity", "gru"), ("s3", "lstm"),
                                                           ("s3", "gru")}
    # every margin claim of the shipped files keeps its meaning: same kind, margin, direction
    assert [(c.kind, c.margin, c.direction, c.model, c.test_against) for c in conv.claims] == [
        ("difference", 0.05, "less", None, "zero"), ("difference", 0.05, "less", None, "zero"),
        ("equivalence", 0.05, "two-sided", None, "zero")]


def test_claim_models_are_checked_at_load():
    with pytest.raises(ExperimentError, match=r"claim 'c': test_against = 'margin' needs a margin"):
        parse_experiment(minimal([{**CLAIM, "test_against": "margin"}]), source="exp.toml")
    exp = parse_experiment(minimal([{**CLAIM, "model": "mixedlm", "margin": 0.05, "test_against": "margin"}]))
    assert exp.claims[0].model == "mixedlm"
    assert exp.model_dump(mode="json")["claims"][0]["model"] == "mixedlm"


SEEDWISE = {"id": "c", "statement": "s", "kind": "bound", "task": "parity", "arch": "mamba", "direction": "greater",
            "metric": "ablation_drop", "setting": "probe", "layer": "L3", "threshold": 0.0}
ANALYSIS = {"ablate": True, "ablate_settings": ["probe", "leace", "pca:1,4"], "ablate_lengths": [40, 80],
            "patch": True, "patch_length": 40}


@pytest.mark.parametrize(
    ("change", "analysis", "match"),
    [
        ({"setting": "inlp:4"}, ANALYSIS,
         r"claim 'c': setting 'inlp:4' is not one of this experiment's settings \(probe, leace, pca:1, pca:4\)"),
        ({"length": 120}, ANALYSIS, r"length 120 is not one of this experiment's lengths \(40, 80\)"),
        ({"layer": "L4"}, ANALYSIS, r"layer 'L4' is not one of this experiment's layers \(embed, L0, L1, L2, L3\)"),
        ({}, {}, r"claim 'c': ablation_drop needs ablations; set \[analysis\] ablate = true"),
        ({"metric": "patch_recovery", "setting": None, "positions": [20, 40]}, ANALYSIS,
         r"claim 'c': positions 40 is not one of this experiment's positions \(0, 1, 2"),
        ({"metric": "patch_recovery", "setting": None, "length": 80}, ANALYSIS,
         r"length 80 is not one of this experiment's lengths \(40\)"),
        ({"metric": "patch_recovery", "setting": None}, {}, r"patch_recovery needs patching; set \[analysis\] patch"),
        ({"kind": "difference", "compare": "layer", "layer": None, "treatment": "L3", "reference": "L5",
          "threshold": None}, ANALYSIS,
         r"reference 'L5' is not one of this experiment's layers"),
        ({"kind": "difference", "compare": "setting", "setting": None, "treatment": "leace",
          "reference": "random:4", "threshold": None}, ANALYSIS, r"reference 'random:4' is not one of this experiment's settings"),
    ],
)
def test_seed_metric_claims_are_checked_against_the_analysis_at_load(change, analysis, match):
    claim = {k: v for k, v in {**SEEDWISE, **change}.items() if v is not None}
    with pytest.raises(ExperimentError, match=match) as info:
        parse_experiment(minimal([claim], analysis=analysis), source="exp.toml")
    assert str(info.value).startswith("exp.toml: claim") and "\n" not in str(info.value)


def test_seed_metric_claims_load():
    claims = [SEEDWISE,
              {**SEEDWISE, "id": "d", "metric": "patch_recovery", "setting": None, "positions": [19, 20]},
              {**SEEDWISE, "id": "e", "kind": "difference", "metric": "probe_accuracy", "setting": None,
               "layer": None, "compare": "layer", "treatment": "L3", "reference": "L2", "margin": 0.2,
               "test_against": "margin", "threshold": None},
              {**SEEDWISE, "id": "f", "metric": "refit_accuracy", "baseline": "chance", "setting": "pca:4"}]
    exp = parse_experiment(minimal([{k: v for k, v in c.items() if v is not None} for c in claims],
                                   analysis=ANALYSIS))
    assert [c.kind for c in exp.claims] == ["bound", "bound", "difference", "bound"]
    assert exp.model_dump(mode="json")["claims"][1]["positions"] == [19, 20]


PROFILE = {"id": "p", "statement": "s", "kind": "profile_match", "metric": "probe_accuracy", "task": "s3",
           "matches": "parity", "differs_from": "dyck", "archs": ["lstm", "gru"]}
DYCK = {"id": "d", "statement": "s", "kind": "readable_by", "metric": "probe_accuracy", "task": "dyck",
        "arch": "lstm", "layer": "L1", "threshold": 0.9}


def test_a_part_of_the_grid_keeps_its_runs_and_only_the_claims_it_can_answer():
    """`layerstate run --task`: the same runs (configs, hence hashes) as the whole grid, the
    claims reading only the part's tasks, a task-comparing claim only where every task it
    names is in the part, and the references to what is kept."""
    exp = parse_experiment(minimal(
        [CLAIM, DYCK, PROFILE], grid={"tasks": ["parity", "s3", "dyck"], "archs": ["lstm", "gru"], "seeds": [0, 1]},
        reference=[REF, {"source": "p", "metric": "accuracy", "task": "dyck", "arch": "lstm", "length": 80,
                         "value": 0.9}]))
    part = exp.part(["dyck"])
    assert part.grid.tasks == ["dyck"] and [c.id for c in part.claims] == ["d"]
    assert [c.id for c in part.absent_claims] == ["c", "p"]  # still in the Holm families, at p = 1
    assert [r.task for r in part.reference] == ["dyck"]  # the Parity claim's reference went with it
    assert part.experiment.title.endswith("(part: dyck)")
    whole = {r.run_id: r for r in exp.runs()}
    assert [r.run_id for r in part.runs()] == [i for i in whole if i.startswith("dyck-")]
    def identity(r):
        return config_hash(run_identity(r.task, r.arch, r.variant, r.seed, r.model_config().model_dump(),
                                        r.task_config().model_dump())), r.train

    assert all(identity(r) == identity(whole[r.run_id]) for r in part.runs())
    assert [c.id for c in exp.part(["parity", "s3"]).claims] == ["c"]
    assert [c.id for c in exp.part(["dyck", "s3", "parity"]).claims] == ["c", "d", "p"]
    assert exp.part(["dyck", "parity"]).grid.tasks == ["parity", "dyck"]  # grid order
    across = parse_experiment(minimal([{**CLAIM, "compare": "task", "treatment": "parity",
                                        "reference": "dyck", "arch": "lstm"}],
                                      grid={"tasks": ["parity", "dyck"], "archs": ["lstm", "gru"]}))
    assert across.part(["parity"]).claims == [] and len(across.part(["parity", "dyck"]).claims) == 1
    with pytest.raises(Exception, match="task s4 is not in the experiment's grid; its tasks: parity, s3, dyck"):
        exp.part(["s4"])
