"""The work list: every unit of an experiment once, in an order that respects what each
waits for; the executor cuts it into the same sections here and on a cluster, but for
train and capture, which a cluster runs as one."""

from __future__ import annotations

import pytest

from layerstate.executor import Executor
from layerstate.experiment import parse_experiment
from layerstate.work import STAGES, Work, work_list

GRID = {
    "experiment": {"name": "order"},
    "grid": {"tasks": ["parity", "assoc_recall"], "archs": ["lstm"], "seeds": [0, 1]},
    "train": {"length": 12, "steps": 2, "eval_lengths": [12]},
    "capture": {"lengths": [12, 20], "n_sequences": 8, "counterfactual_pairs": 4,
                "counterfactual_lengths": [12]},
    "analysis": {"ablate": True, "patch": True, "interchange": True, "patch_length": 12},
}


@pytest.fixture(scope="module")
def work() -> list[Work]:
    return work_list(parse_experiment(GRID))


def test_every_unit_comes_after_what_it_waits_for(work):
    seen: set[str] = set()
    for item in work:
        assert set(item.after) <= seen, item
        seen.add(item.key)
    assert len(seen) == len(work)  # keys are unique
    order = [item.stage for item in work]
    assert order == sorted(order, key=STAGES.index)  # train, capture, analyse, claims, report


def test_the_units_of_an_experiment_and_their_dependencies(work):
    by_key = {w.key: w for w in work}
    runs = ["parity-lstm-default-s0", "parity-lstm-default-s1",
            "assoc_recall-lstm-default-s0", "assoc_recall-lstm-default-s1"]
    assert [w.key for w in work if w.stage == "train"] == [f"train {r}" for r in runs]  # grid order
    # one run's captures: its lengths then its twins, each after the one before (one writer)
    chain = [w for w in work if w.stage == "capture" and w.run.run_id == runs[0]]
    assert [(w.kind, w.length) for w in chain] == [("len", 12), ("len", 20), ("cf", 12)]
    assert [w.after for w in chain] == [(f"train {runs[0]}",), (chain[0].key,), (chain[1].key,)]
    assert all(w.device for w in work if w.on_workers)
    # analyses: behaviour and probes of every task first, then each task's interventions,
    # each after the captures of its task's runs (and nothing else)
    analyses = [w.key for w in work if w.stage == "analyse"]
    assert analyses == ["behaviour/parity", "behaviour/assoc_recall", "probes/parity", "probes/assoc_recall",
                        "pairs/parity", "ablation/parity", "patching/parity",
                        "pairs/assoc_recall", "ablation/assoc_recall", "patching/assoc_recall",
                        "interchange/assoc_recall"]
    for key in ("ablation/parity", "behaviour/parity"):
        parity = by_key[key]
        assert set(parity.runs) == set(runs[:2])
        assert set(parity.after) == {w.key for w in work if w.stage == "capture" and w.run.task == "parity"}
    assert by_key["claims"].after == tuple(analyses)
    assert work[-1].key == "report" and work[-1].after == ("claims",)


def test_a_part_of_the_stages_or_of_the_runs(work):
    exp = parse_experiment(GRID)
    capture_only = work_list(exp, stages=("capture",))
    assert {w.stage for w in capture_only} == {"capture"}
    assert capture_only[0].after == ()  # the run must be trained already: nothing to wait for
    one = exp.plan.select(seeds=[1], tasks=["parity"])
    trained = work_list(exp, stages=("train",), runs=one)
    assert [w.key for w in trained] == ["train parity-lstm-default-s1"]
    with pytest.raises(ValueError, match="unknown stages"):
        work_list(exp, stages=("fit",))


def test_the_executor_runs_the_same_list_in_the_same_sections_but_train_and_capture(work, tmp_path):
    here = Executor("threads", str(tmp_path))
    assert [s.stages for s in here.sections(work)] == [["train"], ["capture"], ["analyse"], ["claims"],
                                                       ["report"]]
    there = Executor("threads", str(tmp_path))
    there.client = object()  # a cluster: train and capture are one section of tasks
    assert [s.stages for s in there.sections(work)] == [["train", "capture"], ["analyse"], ["claims"],
                                                        ["report"]]
    assert [w for s in there.sections(work) for w in s.items] == work


def test_mdl_and_stability_are_scheduled_when_asked_or_when_a_claim_reads_them():
    """Issue 70 item 2: `run` schedules MDL and stability like the other analyses; stability
    after its task's probes, which run for it even with probe = false."""
    asked = {**GRID, "analysis": {"probe": False, "mdl": True, "stability": True}}
    by_key = {w.key: w for w in work_list(parse_experiment(asked))}
    for task in ("parity", "assoc_recall"):
        assert {f"mdl/{task}", f"stability/{task}", f"probes/{task}"} <= set(by_key)
        assert f"probes/{task}" in by_key[f"stability/{task}"].after
        assert not by_key[f"mdl/{task}"].device and not by_key[f"stability/{task}"].device
    claim = {"id": "c", "statement": "s", "kind": "bound", "task": "parity", "arch": "lstm", "direction": "greater",
             "threshold": 1.0, "layer": "L1"}
    read = {**GRID, "analysis": {"probe": False},
            "claims": [claim | {"metric": "mdl_compression"}, claim | {"id": "d", "metric": "probe_stability"}]}
    keys = [w.key for w in work_list(parse_experiment(read)) if w.stage == "analyse"]
    assert {"mdl/parity", "stability/parity", "probes/parity"} <= set(keys)
    assert "mdl/parity" not in [w.key for w in work_list(parse_experiment(GRID))]  # not unless asked


def test_an_untrained_baseline_is_probed_but_never_intervened_on():
    """Its readout is chance by construction: ablation, patching and interchange read the trained
    runs only, while behaviour and probes read both (the probe profile shows the baseline)."""
    grid = {**GRID, "grid": {**GRID["grid"], "variants": ["default", "untrained"]},
            "variants": {"untrained": {"train": False}}}
    by_key = {w.key: w for w in work_list(parse_experiment(grid))}
    base = {"parity-lstm-untrained-s0", "parity-lstm-untrained-s1"}
    assert base <= set(by_key["probes/parity"].runs) and base <= set(by_key["behaviour/parity"].runs)
    for key in ("ablation/parity", "patching/parity", "pairs/parity", "interchange/assoc_recall"):
        runs = set(by_key[key].runs)
        assert runs and not any("untrained" in r for r in runs), key
