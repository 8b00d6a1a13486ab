"""Where a training run's time goes, per architecture, at the Jiang configuration; and the
seconds a run takes to its stopping rule, before and after the opt-in speed options.

Prints one JSON line. The configuration is ``experiments/jiang2026_cpu.toml``'s (d_model
128, 4 layers, L = 40, batch 64, its ``[train]`` table and overrides); the five core
architectures are measured side by side in this process, one thread, round-robin, so that
load from other processes falls on all of them alike: trust the ratios more than the
absolute seconds.

Per architecture (``breakdown``), the median over ``--steps`` training steps of:

- ``data``: drawing one batch (``generate``); and per task (``data_seconds_per_run``) all
  the batches of seed 0's longest run, drawn in order (Code-depth tokenizes each source file
  the first time a window is drawn from it, so its first batches cost ~100x its later ones);
- ``forward`` (model and masked loss), ``backward``, ``optimiser`` (clip, AdamW, schedule);
- ``eval``: one held-out evaluation (``n_eval`` sequences), and its share per step at the
  file's ``eval_every``;
- ``fixed``: a whole step at batch 1 -- what a step costs beyond its arithmetic (Python,
  dispatch, autograd bookkeeping), an upper bound on the framework overhead per step;
- ``floor``: the step's FLOPs (``torch.utils.flop_counter``: matrix products and
  convolutions) at this machine's measured one-thread matmul rate, and the step over it.

``steps_to_stop``: the steps each committed run of the grid took to its stopping rule and
its recorded training seconds (``docs/results/jiang2026_cpu/<task>/tables/runs.csv``).

``per_run``: seconds per training run to the stopping rule, estimated per cell as steps
(seed 0's recorded count) x the measured step + that run's batches + its evaluations, under each
setting side by side: ``before`` (the default path, what the committed runs used) and
``after`` (the ``[train]`` options of ``AFTER`` for that architecture: ``fused_adamw`` for all,
``compile`` for GPT-NeoX, Mamba and Mamba-2, ``fused_kernels`` and ``compile_through_kernels``
for both Mambas and ``fused_kernels_fma`` for Mamba; a run's first step, a compiling run's compile time, is counted). ``step_ratio_to_transformer``: each step over GPT-NeoX's eager
step, and (``after_to_after``) the "after" steps over GPT-NeoX's own "after" step.
``seed_sum``: the sum over the 20 cells of one seed, before and after, and their ratio
(goal: at most 0.5). Steps-to-stop are the recorded ones, so a rule that ends runs earlier
(``plateau_delta``) is not in the estimate: it has to be measured by training.

Run (the session's before/after): ``OMP_NUM_THREADS=1 python -m bench.training`` (about
3 minutes; ``--steps 10`` took 70 s); ``--quick`` (about a minute: fewer steps, Dyck only); ``--archs mamba2 ...``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
import tomllib
from pathlib import Path
from typing import Any

import torch

from capture.experiment import CapturePlan, TrainConfig, parse_plan
from capture.models import CORE_ARCHS, build_model
from capture.train import (
    STREAM_TRAIN,
    STREAM_VALID,
    adamw,
    evaluate,
    lr_lambda,
    masked_loss_and_accuracy,
    rng_for,
    split_config,
    training_forward,
)

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "experiments" / "jiang2026_cpu.toml"
RESULTS = ROOT / "docs" / "results" / "jiang2026_cpu"

#: The default path: the speed options off (the Jiang file opts its Mamba cells in since
#: 2026-12-05; the committed runs were trained without them).
BEFORE: dict[str, Any] = {"fused_kernels": False, "fused_kernels_fma": False, "compile": False,
                          "compile_through_kernels": False, "fused_adamw": False}

#: The opt-in [train] options the "after" setting uses per architecture: the ones that made
#: its step faster when measured here (docs/measured.md, "Training speed").
AFTER: dict[str, dict[str, Any]] = {
    # compiled, since its rotary tables stay out of the graph (0.89x of eager; 1.8x before)
    "transformer": {"compile": True, "fused_adamw": True},
    # the fused kernels and compile on top (docs/measured.md): for Mamba, compile gained
    # nothing until its Conv1D stopped splitting the graph into pieces (2026-12-06); its scan
    # with fused multiply-adds (fused_kernels_fma) 2026-12-06; compiled through the kernels as
    # torch operators, one graph a step (compile_through_kernels) 2026-12-06
    "mamba": {"fused_kernels": True, "fused_kernels_fma": True, "compile": True, "compile_through_kernels": True,
              "fused_adamw": True},
    "mamba2": {"fused_kernels": True, "compile": True, "compile_through_kernels": True, "fused_adamw": True},
    # AdamW's fused kernel is the one option for every architecture (0.3x the optimiser's time)
    "lstm": {"fused_adamw": True},
    "gru": {"fused_adamw": True},
}


def _median_ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 2)


def jiang_plan():
    """The capture sections of the Jiang experiment file (its grid, [train] and overrides)."""
    with EXPERIMENT.open("rb") as fh:
        data = tomllib.load(fh)
    return parse_plan({k: v for k, v in data.items() if k in CapturePlan.model_fields}, str(EXPERIMENT))


class _Cell:
    """One architecture under one setting: a model, its optimiser and timed step pieces."""

    def __init__(self, plan, task: str, arch: str, options: dict[str, Any]) -> None:
        spec = next(r for r in plan.runs() if r.task == task and r.arch == arch)
        self.cfg: TrainConfig = spec.train.model_copy(update=options)
        self.task = spec.task_config()
        self.model = build_model(spec.model_config(), vocab_size=self.task.vocab_size,
                                 n_classes=self.task.n_classes[self.task.target], seed=0)
        self.forward = training_forward(self.model, self.cfg)
        self.opt = adamw(self.model, self.cfg)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(self.cfg))
        self.rng = rng_for(0, STREAM_TRAIN)
        self.train_task = split_config(self.task, "train")
        self.valid = split_config(self.task, "eval").generate(rng_for(0, STREAM_VALID), self.cfg.n_eval,
                                                               self.cfg.length)
        self.times: dict[str, list[float]] = {k: [] for k in ("data", "forward", "backward", "optimiser", "step")}

    def step(self, batch_size: int | None = None, record: bool = True) -> float:
        clock = time.perf_counter
        t0 = clock()
        batch = self.train_task.generate(self.rng, batch_size or self.cfg.batch_size, self.cfg.length)
        t1 = clock()
        self.model.train()
        logits = self.forward(torch.as_tensor(batch.tokens))
        loss, _ = masked_loss_and_accuracy(logits, batch)
        t2 = clock()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = clock()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        t4 = clock()
        if record:
            for key, value in (("data", t1 - t0), ("forward", t2 - t1), ("backward", t3 - t2),
                               ("optimiser", t4 - t3), ("step", t4 - t0)):
                self.times[key].append(value)
        return t4 - t0

    def eval_seconds(self) -> float:
        start = time.perf_counter()
        evaluate(self.model, self.valid)
        return time.perf_counter() - start


def matmul_rate(seconds: float = 1.0) -> float:
    """FLOP/s of one thread on a float32 matrix product of a training step's shape."""
    a, b = torch.randn(2560, 128), torch.randn(128, 512)
    flops, done, start = 2 * 2560 * 128 * 512, 0, time.perf_counter()
    torch.mm(a, b)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        done += 1
    return flops * done / (time.perf_counter() - start)


def step_flops(cell: _Cell) -> int:
    """FLOPs of one training step's forward and backward (products and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = cell.train_task.generate(rng_for(9, STREAM_TRAIN), cell.cfg.batch_size, cell.cfg.length)
    with FlopCounterMode(display=False) as counter:
        logits = cell.model(torch.as_tensor(batch.tokens))
        loss, _ = masked_loss_and_accuracy(logits, batch)
        loss.backward()
    cell.opt.zero_grad(set_to_none=True)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    # the counter's formula for a convolution's backward leaves out its groups: for Mamba-2's
    # depthwise Conv1D over 544 channels it counted 26 GFLOP a step, 500x the forward's 0.05.
    # A convolution's backward is two of its forwards (input and weight gradients).
    counts["aten.convolution_backward"] = 2 * counts.get("aten.convolution", 0)
    return int(sum(counts.values()))


def recorded_runs() -> dict[tuple[str, str], list[dict]]:
    """Steps and training seconds of the committed Jiang runs, per (task, arch), by seed."""
    out: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(RESULTS.glob("*/tables/runs.csv")):
        if path.parent.parent.name.endswith("_sequential"):
            continue
        with path.open() as fh:
            for row in csv.DictReader(fh):
                if row.get("variant") == "default" and row.get("steps"):
                    out.setdefault((row["task"], row["arch"]), []).append(
                        {"seed": int(row["seed"]), "steps": int(row["steps"]),
                         "train_seconds": round(float(row["train_seconds"]), 1)})
    return out


def _round_robin(cells: dict[str, _Cell], steps: int, warmup: int) -> None:
    for cell in cells.values():
        for _ in range(warmup):
            cell.step(record=False)
    for _ in range(steps):
        for cell in cells.values():
            cell.step()


def measure(archs: list[str], tasks: list[str], steps: int, warmup: int, quick: bool = False) -> dict:
    plan = jiang_plan()
    # "before" is the default path whatever the file opts its cells into
    settings: dict[str, dict[str, dict[str, Any]]] = {
        "before": {a: dict(BEFORE) for a in archs}, "after": {a: {**BEFORE, **AFTER.get(a, {})} for a in archs}}
    result: dict[str, Any] = {"breakdown": {}, "after_options": settings["after"]}
    # one cell per (setting, arch) on the first task; "after" only where it differs
    cells = {f"{s}:{a}": _Cell(plan, tasks[0], a, settings[s][a])
             for s in settings for a in archs if s == "before" or AFTER.get(a)}
    compile_seconds = {}
    for name, cell in cells.items():
        start = time.perf_counter()
        cell.step(record=False)  # compiles, where the setting compiles
        compile_seconds[name] = round(time.perf_counter() - start, 1)
    _round_robin(cells, steps, warmup)
    rate = matmul_rate()
    result["matmul_gflops_one_thread"] = round(rate / 1e9, 1)
    data_s: dict[str, list[float]] = {}
    recorded = recorded_runs()
    for task in tasks:  # a whole run's batches, seed 0's stream: code_depth's first touches are dear
        probe = _Cell(plan, task, archs[0], BEFORE)
        most = max((r["steps"] for a in archs for r in recorded.get((task, a), []) if r["seed"] == 0),
                   default=steps) if not quick else steps
        total, cumulative = 0.0, [0.0]
        for _ in range(most):
            start = time.perf_counter()
            probe.train_task.generate(probe.rng, probe.cfg.batch_size, probe.cfg.length)
            total += time.perf_counter() - start
            cumulative.append(total)
        data_s[task] = cumulative
    result["data_seconds_per_run"] = {t: {"batches": len(c) - 1, "seconds": round(c[-1], 2),
                                          "first_batch_ms": round(1000 * c[1], 1)} for t, c in data_s.items()}
    for name, cell in cells.items():
        setting, arch = name.split(":")
        evals = [cell.eval_seconds() for _ in range(2)]
        fixed = [cell.step(batch_size=1, record=False) for _ in range(max(3, steps // 4))]
        row: dict[str, Any] = {k: _median_ms(v) for k, v in cell.times.items()}
        row["eval"] = _median_ms(evals)
        row["eval_per_step"] = round(row["eval"] / cell.cfg.eval_every, 2)
        row["fixed_batch1"] = _median_ms(fixed)
        row["first_step_seconds"] = compile_seconds[name]
        if setting == "before":
            flops = step_flops(cell)
            floor = flops / rate
            row["gflop_per_step"] = round(flops / 1e9, 2)
            row["floor"] = round(1000 * floor, 2)
            row["step_over_floor"] = round(statistics.median(cell.times["step"]) / floor, 2)
        result["breakdown"].setdefault(arch, {})[setting] = row
    # each setting's step over GPT-NeoX's default (eager) step; "after_to_after": the "after"
    # steps over GPT-NeoX's own "after" step (each architecture with its speed options)
    ratios: dict[str, dict[str, float]] = {}
    if "transformer" in archs:
        reference = result["breakdown"]["transformer"]
        for key, setting, ref in (("before", "before", "before"), ("after", "after", "before"),
                                  ("after_to_after", "after", "after")):
            if ref in reference:
                ratios[key] = {a: round(result["breakdown"][a][setting]["step"] / reference[ref]["step"], 2)
                               for a in archs if setting in result["breakdown"][a]}
    result["step_ratio_to_transformer"] = ratios
    result.update(per_run(result, plan, archs, data_s))
    return result


def per_run(result: dict, plan, archs: list[str], data_s: dict[str, list[float]]) -> dict:
    """Seconds per run to the stopping rule, before and after, from the recorded steps."""
    recorded = recorded_runs()
    out: dict[str, Any] = {"steps_to_stop": {}, "per_run": {}, "seed_sum": {}}
    sums = {"before": 0.0, "after": 0.0, "recorded": 0.0}
    complete = True
    for task in plan.grid.tasks:
        for arch in archs:
            runs = sorted(recorded.get((task, arch), []), key=lambda r: r["seed"])
            out["steps_to_stop"][f"{task}-{arch}"] = runs
            seed0 = next((r for r in runs if r["seed"] == 0), None)
            if seed0 is None:
                complete = False
                continue
            cfg = plan.train_for(task, arch)
            cell: dict[str, float] = {}
            for setting in ("before", "after"):
                row = result["breakdown"][arch].get(setting, result["breakdown"][arch]["before"])
                cumulative = data_s.get(task, [])
                n = seed0["steps"]
                data = cumulative[n] if n < len(cumulative) else n * row["data"] / 1000
                evals = -(-n // cfg.eval_every)
                seconds = (n * (row["step"] - row["data"]) + evals * row["eval"]) / 1000 + data
                seconds += row["first_step_seconds"] if setting == "after" and AFTER.get(arch) else 0.0
                cell[setting] = round(seconds, 1)
                sums[setting] += seconds
            cell["ratio"] = round(cell["after"] / cell["before"], 2)
            cell["recorded_seconds"] = seed0["train_seconds"]
            sums["recorded"] += seed0["train_seconds"]
            out["per_run"][f"{task}-{arch}"] = cell
    out["seed_sum"] = {k: round(v, 1) for k, v in sums.items()}
    out["seed_sum"]["ratio"] = round(sums["after"] / sums["before"], 3) if sums["before"] else None
    out["seed_sum"]["complete"] = complete and set(archs) == set(CORE_ARCHS)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Where training time goes, and seconds per run, before and after.")
    parser.add_argument("--quick", action="store_true", help="about a minute: 6 steps, Dyck only")
    parser.add_argument("--archs", nargs="+", choices=CORE_ARCHS, default=list(CORE_ARCHS))
    parser.add_argument("--steps", type=int, help="timed steps per cell (default 30, quick 6)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = args.steps or (6 if args.quick else 30)
    tasks = ["dyck"] if args.quick else ["dyck", "parity", "s3", "code_depth"]
    archs = args.archs if "transformer" in args.archs else ["transformer", *args.archs]
    start = time.perf_counter()
    result: dict[str, Any] = {"bench": "training", "threads": 1, "steps": steps, "tasks": tasks}
    result.update(measure(archs, tasks, steps, warmup=1 if args.quick else 3, quick=args.quick))
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
