"""The learning-rate sweep's choice rule (experiments/sweeps/arora_lr.py) and its run spec."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from layerstate.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("arora_lr", ROOT / "experiments" / "sweeps" / "arora_lr.py")
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def r(acc, step):
    return {"accuracy": acc, "best_step": step}


def test_the_most_accurate_rate_wins_and_ties_go_to_the_faster():
    assert sweep.pick({3e-4: r(0.12, 500), 1e-3: r(0.11, 500), 3e-3: r(0.73, 500)}, 1e-3, 512, 0.99) == 3e-3
    # both at 1.0: the one that got there first
    assert sweep.pick({1e-3: r(1.0, 800), 3e-3: r(1.0, 300)}, 1e-3, 512, 0.99) == 3e-3
    # 0.90 vs 0.89 at 512 sequences is within two standard errors: a tie, the faster wins
    assert sweep.pick({1e-3: r(0.90, 200), 3e-3: r(0.89, 100), 3e-4: r(0.2, 500)}, 1e-3, 512, 0.99) == 3e-3


def test_nothing_learned_keeps_the_experiments_rate():
    flat = {3e-4: r(0.123, 400), 1e-3: r(0.117, 500), 3e-3: r(0.111, 400)}  # chance-level noise
    assert sweep.pick(flat, 1e-3, 512, 0.99) == 1e-3
    assert sweep.tie_width(1.0, 512) == sweep.TIE and round(sweep.tie_width(0.5, 512), 4) == 0.0442


def test_a_sweep_run_is_the_experiments_run_with_only_the_rate_and_budget_changed():
    exp = load_experiment(ROOT / "experiments" / "arora2025_reduced.toml")
    spec = sweep.sweep_spec(exp, "assoc_recall", "mamba", 3e-4, 50, 0)
    want = exp.train_for("assoc_recall", "mamba").model_copy(update={"lr": 3e-4, "steps": 50})
    assert spec.train == want and spec.run_id == "assoc_recall-mamba-default-s0"
    assert spec.model_config() == next(s for s in exp.plan.runs() if s.run_id == spec.run_id).model_config()
