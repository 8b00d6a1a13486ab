"""Learning-rate sweep for the Arora et al. (2025) experiments: seed 0 of every (task, arch).

The paper picks, per configuration, the best of a learning-rate sweep. This script does the
same for an experiment file's grid before its runs are trained: it trains seed 0 of every
(task, architecture) in the default variant at a few learning rates, with the experiment's
own training settings (``[train]`` and ``[train_overrides]``) except ``lr`` and, optionally,
a shorter budget, and prints the held-out accuracy of each as a table plus the best rate per
pair as ``[train_overrides.<task>.<arch>]`` lines to paste into the file.

Each learning rate trains into its own store under ``--workdir`` (one run per (task, arch)),
so an interrupted sweep resumes: trained runs are read back, not retrained. A changed budget
with the same ``--workdir`` is refused (the store names the changed field).

Run from the repository root, niced, one process, one torch thread::

    nice -n 10 .venv/bin/python experiments/sweeps/arora_lr.py \\
        experiments/arora2025_reduced.toml --lrs 3e-4,1e-3,3e-3 --steps 1500 \\
        --workdir /tmp/arora-lr

The best rate is the one with the highest held-out accuracy at the training length; among
the rates tied with it (within two binomial standard errors at ``n_test`` sequences, at
least 0.01), the one whose best evaluation came first (a rate that learns faster costs less
in the full run, which stops at its target accuracy). When all rates tie below the target
accuracy (typically: nothing learned in the budget), the sweep cannot tell them apart and the
pair keeps the rate the experiment already gives it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root is two folders up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from capture.experiment import RunSpec  # noqa: E402
from capture.train import train_run  # noqa: E402
from layerstate.experiment import Experiment, load_experiment  # noqa: E402
from store import Store  # noqa: E402

#: The smallest accuracy difference that separates two rates (below it: a tie, broken by speed).
TIE = 0.01


def tie_width(accuracy: float, n: int) -> float:
    """Two rates whose accuracies differ by less than this are a tie: two binomial standard
    errors of the better one at ``n`` test sequences (one answer each), at least TIE."""
    return max(TIE, 2 * (accuracy * (1 - accuracy) / n) ** 0.5)


def sweep_spec(exp: Experiment, task: str, arch: str, lr: float, steps: int | None, seed: int) -> RunSpec:
    """Seed ``seed`` of (``task``, ``arch``, default variant) with the experiment's training
    settings for that pair, except ``lr`` (and ``steps``, when given)."""
    cfg = exp.train_for(task, arch).model_dump()
    cfg["lr"] = lr
    if steps is not None:
        cfg["steps"] = steps
    plan = exp.plan.model_copy(update={"train_overrides": {task: {arch: cfg}}})
    return RunSpec(exp=plan, task=task, arch=arch, variant="default", seed=seed)


def best_step(curve: list[dict]) -> int:
    """The step of the best held-out evaluation (the weights training keeps)."""
    if not curve:
        return 0
    best = max(p["valid_accuracy"] for p in curve)
    return int(next(p["step"] for p in curve if p["valid_accuracy"] == best))


def pick(results: dict[float, dict], fallback: float, n: int, target: float) -> float:
    """The best learning rate: the highest accuracy; among the rates tied with it
    (:func:`tie_width` at ``n`` test sequences), the one whose best evaluation came first.
    When every rate ties and none reached ``target`` (nothing learned in the budget, or all
    learned alike), the sweep cannot tell them apart: ``fallback``."""
    top = max(r["accuracy"] for r in results.values())
    width = tie_width(top, n)
    near = [lr for lr, r in results.items() if r["accuracy"] > top - width]
    if len(near) == len(results) and top < target:
        return fallback
    return min(near, key=lambda lr: (results[lr]["best_step"], -results[lr]["accuracy"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="experiment TOML (its grid, tasks, models and training settings)")
    ap.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="comma-separated peak learning rates")
    ap.add_argument("--steps", type=int, default=None, help="step budget per run (default: the experiment's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default=None, help="comma-separated subset of the grid's tasks")
    ap.add_argument("--archs", default=None, help="comma-separated subset of the grid's architectures")
    ap.add_argument("--workdir", default="/tmp/layerstate-lr-sweep", help="one store per learning rate")
    args = ap.parse_args(argv)

    exp = load_experiment(args.experiment)
    lrs = [float(x) for x in args.lrs.split(",")]
    tasks = args.tasks.split(",") if args.tasks else exp.grid.tasks
    archs = args.archs.split(",") if args.archs else exp.grid.archs
    for name, chosen, grid in (("task", tasks, exp.grid.tasks), ("arch", archs, exp.grid.archs)):
        stray = [c for c in chosen if c not in grid]
        if stray:
            print(f"error: {name} {', '.join(stray)} not in the experiment's grid ({', '.join(grid)})",
                  file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    stores = {lr: str(work / f"lr{lr:g}.zarr") for lr in lrs}
    for lr, path in stores.items():
        Store.create(path, title=f"lr sweep {lr:g}", exist_ok=True)
    table: dict[tuple[str, str], dict[float, dict]] = {}
    t_all = time.perf_counter()
    for task in tasks:
        for arch in archs:
            for lr in lrs:
                spec = sweep_spec(exp, task, arch, lr, args.steps, args.seed)
                st = Store.open(stores[lr], mode="r+")
                res = train_run(st, spec)
                attrs = st.run_attrs(res.run_id)
                metrics = attrs["metrics"]
                row = {"accuracy": float(res.accuracy[spec.train.length] if spec.train.length in res.accuracy
                                         else next(iter(res.accuracy.values()))),
                       "steps": int(metrics["steps"]), "seconds": float(metrics["train_seconds"]),
                       "best_step": best_step(metrics.get("curve", []))}
                table.setdefault((task, arch), {})[lr] = row
                print(f"{task:12s} {arch:11s} lr {lr:<7g} acc {row['accuracy']:.3f}  best at step "
                      f"{row['best_step']:5d}  {row['steps']:5d} steps  {row['seconds']:6.0f}s"
                      f"{'  (stored)' if res.skipped else ''}", flush=True)
    print(f"\nseed {args.seed}, {args.steps or 'the experiment'}'s step budget; held-out accuracy at the "
          f"training length (best evaluation's step); total {time.perf_counter() - t_all:.0f}s\n")
    def choose(task: str, arch: str, res_by_lr: dict[float, dict]) -> float:
        cfg = exp.train_for(task, arch)
        return pick(res_by_lr, cfg.lr, cfg.n_test, cfg.target_accuracy)

    head = "task         arch        " + "".join(f"{f'lr {lr:g}':>20s}" for lr in lrs) + "   best"
    print(head)
    for (task, arch), res_by_lr in table.items():
        cells = "".join(f"{r['accuracy']:>11.3f} ({r['best_step']:>5d})" for r in (res_by_lr[lr] for lr in lrs))
        print(f"{task:12s} {arch:11s} {cells}   {choose(task, arch, res_by_lr):g}")
    print()
    for (task, arch), res_by_lr in table.items():
        print(f"[train_overrides.{task}.{arch}]\nlr = {choose(task, arch, res_by_lr):g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
