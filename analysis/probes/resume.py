"""A probe sweep that keeps what it has done: run by run, each run's part stored as it finishes,
so a sweep stopped (Ctrl-C, a killed job) and started again computes only the runs it lacks.

A part is the sweep's Dataset for one run (:func:`~analysis.probes.assemble.assemble` of that
run's plan), stored as ``results/partial/probes-<key>-<i>``: ``key`` a digest of the sweep's
settings and its runs' identities (config hash, creation time, captured lengths), so a part
of another sweep, or of a run trained or captured again since, is never used; ``i`` the run's
place in the sweep. The finished sweep is the parts filled into the Dataset the whole sweep's
plan lays out (its coordinates, fill values and types), its per-run summary computed once
more: the same Dataset, value for value, as computing every run at once
(tests/analysis/probes/test_probe_resume.py). The parts are removed once the whole sweep is made.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import xarray as xr
from dask.callbacks import Callback

from .assemble import SUMMARY, assemble, summarise
from .progress import Progress
from .sweep import ProbePlan

#: The kind of the stored parts of unfinished sweeps (not an analysis: ``layerstate show`` says so).
PARTIAL = "partial"
#: A sweep keeps its parts only when its runs are estimated at this many single-thread CPU
#: seconds each or more (:attr:`ProbePlan.cpu_s`): a part costs 0.7-1 s to assemble, store and
#: remove (docs/measured.md: the demo store's S3 runs, estimated at 12 s each, took 22 s at
#: once and 29 s kept), so a short sweep is cheaper to compute again than to keep.
RESUME_FROM_S = 30.0


def worth_keeping(plan: ProbePlan) -> bool:
    """Whether ``plan`` is computed run by run with its parts kept (:data:`RESUME_FROM_S`)."""
    return len(plan.runs) > 1 and plan.cpu_s / len(plan.runs) >= RESUME_FROM_S


def sweep_key(store: Any, plan: ProbePlan) -> str:
    """A digest of what the sweep computes: its settings and each run's identity."""
    runs = {r: {k: store.run_attrs(r).get(k) for k in ("config_hash", "created")} | {
        "lengths": sorted(plan.fit_lengths[r] + plan.test_lengths[r])} for r in plan.runs}
    text = json.dumps({"options": plan.options, "runs": runs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def part_name(key: str, i: int) -> str:
    return f"{PARTIAL}/probes-{key}-{i}"


def compute_by_run(store: Any, plan: ProbePlan, plan_of: Callable[[Sequence[str]], ProbePlan], *,
                   scheduler: Any = None, progress: Progress | None = None,
                   say: Callable[[str], None] | None = None) -> xr.Dataset:
    """The sweep ``plan`` (of several runs), each run's part stored as its last task finishes
    and the parts of an earlier start of the same sweep used instead of computing their runs
    again; ``plan_of(runs)`` plans the same sweep for some of its runs. The runs left are one
    graph, computed as :meth:`ProbePlan.compute` computes any (one pool of workers); the parts
    are written from dask's callbacks, so only the local schedulers leave parts (a cluster's
    sweep is computed whole). ``say`` is told how many runs were done already."""
    runs, key = list(plan.runs), sweep_key(store, plan)
    stored = set(store.results())
    done: dict[str, xr.Dataset] = {}
    for i, r in enumerate(runs):
        if part_name(key, i) in stored:
            part = store.read_result(part_name(key, i))
            if [str(v) for v in part.run.values] == [r]:
                done[r] = part
    pending = [r for r in runs if r not in done]
    if done and say is not None:
        say(f"resuming: {len(done)} of {len(runs)} runs were probed before "
            f"({', '.join(done)}); probing the other {len(pending)}")
    parts = [done[r] for r in runs if r in done]
    if pending:
        rest = plan_of(pending) if done else plan
        names = {r: part_name(key, runs.index(r)) for r in pending}
        with _Keeping(store, rest, {r: plan_of([r]) for r in pending}, names):
            parts.append(rest.compute(scheduler, progress=progress))
    whole = parts[0] if not done else merge(plan, parts)
    own = getattr(store, "results_store", store)  # where results are written (a paired store's own)
    for name in set(own.results()) & {part_name(key, i) for i in range(len(runs))}:
        own.forget_result(name)
    return whole


class _Keeping(Callback):
    """While a sweep computes on a local dask scheduler: each run's part, assembled from its
    tasks' outputs and stored once its last task has finished."""

    def __init__(self, store: Any, plan: ProbePlan, alone: dict[str, ProbePlan], names: dict[str, str]) -> None:
        super().__init__()
        self.store, self.alone, self.names = store, alone, names
        self.run_of = {t.key: r for t, r in zip(plan.tasks, plan.task_runs, strict=True)}
        self.left = Counter(plan.task_runs)
        self.outs: dict[str, list] = {r: [] for r in alone}

    def _posttask(self, key: Any, result: Any, _dsk: Any, _state: Any, _worker_id: Any) -> None:
        run = self.run_of.get(key)
        if run is None:
            return
        self.outs[run].extend(result)
        self.left[run] -= 1
        if not self.left[run]:
            self.store.write_result(self.names[run], assemble(self.alone[run], self.outs.pop(run)))


def writable(store: Any) -> bool:
    """Whether results can be stored in ``store`` (a store opened for writing, or one whose
    results are kept beside it)."""
    return hasattr(store, "results_store") or not getattr(store, "read_only", True)


def merge(plan: ProbePlan, parts: Sequence[xr.Dataset]) -> xr.Dataset:
    """The Dataset of ``plan`` from one part per run: each part's values put at its run and
    coordinates in the whole sweep's layout (where the whole has more classes, features,
    positions or sequences than a run, the rest keeps the layout's fill), then the per-run
    summary computed over the whole."""
    whole = assemble(plan, [])
    per_position = plan.options["mode"] in ("all", "list")
    whole = whole.drop_vars([v for v in SUMMARY if v in whole])
    for part in parts:
        for name, var in part.data_vars.items():
            if name in SUMMARY or "run" not in var.dims:
                continue
            where = {d: part[d].values for d in var.dims}
            whole[name].loc[where] = var.transpose(*whole[name].dims).values
    summarise(whole, per_position, plan.options["control"] is not None)
    return whole
