"""How much work a probe sweep is, and a hook that reports its progress while it runs.

A sweep fits *cells* -- one (run, length, layer, position) each, or one (run, length, layer)
with ``positions="last"``/``"pooled"`` -- and each cell is cross-validated over the folds
with its C chosen by inner cross-validation (plus the control task's probe). :func:`sweep_size`
counts them before anything is computed and estimates the wall time; :class:`Progress`,
handed to :meth:`ProbePlan.compute <analysis.probes.sweep.ProbePlan.compute>` or
:func:`analysis.probes.probe`, is told how many cells each finished dask task held (dask's
local-scheduler callbacks) and calls its ``report`` at most every ``every`` seconds, then once
at the end. What the lines say is the caller's: this module only counts.

Only dask's local schedulers (threads, processes, sync) call back; on a ``dask.distributed``
cluster the cluster's dashboard shows the tasks, and only the final report comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask
from dask.callbacks import Callback

from analysis.compute import LOCAL, default_scheduler, is_local

#: Seconds between two progress reports at least (:class:`Progress`'s default).
EVERY_S = 10.0
#: The first report comes this soon, once the rate can be measured (a task after the first has
#: finished): the announced time is a model's, this one the sweep's own, and on the demo store
#: it was within 2x of the time taken where the model's was 3.5x short (docs/measured.md).
FIRST_S = 3.0
#: Single-thread CPU seconds a fitted cell costs per class and C value on top of
#: :data:`~analysis.probes.sweep.EXACT_S_PER_UNIT`'s per-row work (the solver's many small
#: calls): one run's 200 cells at length 40 took 6.0 s (parity, 2 classes), 7.8 s (Dyck, 3)
#: and 24.9 s (S3, 6) single-threaded where the per-row estimate said 2.2, 1.9 and 6.5 s
#: (the demo store, a loaded 2-core machine). Only for the time a sweep announces.
CELL_CLASS_S = 2e-3
#: The same for a ``"last"`` or ``"pooled"`` cell, which its task fits alone (position cells are
#: fitted a block of positions at a time, their solver calls shared): on the demo store's 10 runs
#: of a task (192 sequences, lengths 40 and 120, 5 layers, 5 folds, 5 C values, 2 threads) 100
#: ``last`` cells took 4.9 s (Parity), 14.5 s (Dyck) and 13.7 s (S3) against 0.6, 0.9 and 1.8 s
#: of per-row work: 4-9 ms a cell, class and C value; 7 ms puts the three within 2x of the time
#: taken (docs/measured.md, "Stopping and resuming").
GATHERED_CELL_CLASS_S = 7e-3


@dataclass(frozen=True)
class SweepSize:
    """What a sweep is about to do: ``cells`` to fit and cross-validate (``scored`` more are
    only scored, by probes fitted at ``train_length``), over ``runs`` runs, ``lengths``,
    up to ``layers`` layers per run and ``positions`` (``"all"``, ``"last"``, ``"pooled"``
    or ``"list"``); ``folds`` and ``C_values`` (1 for a fixed C, 0 for the screening solver).
    ``estimate_s``: rough wall seconds on ``workers`` local workers of kind ``scheduler``
    (``"threads"``, ``"processes"``, ``"sync"``); None where it cannot be told (a cluster)."""

    runs: int
    lengths: tuple[int, ...]
    layers: int
    positions: str
    cells: int
    scored: int
    folds: int
    C_values: int
    estimate_s: float | None
    scheduler: str | None
    workers: int

    @property
    def total(self) -> int:
        """Every cell the progress counts: fitted and scored."""
        return self.cells + self.scored


@dataclass(frozen=True)
class Tick:
    """One progress report: ``done`` of ``total`` cells after ``elapsed_s`` seconds,
    ``left_s`` the seconds still to go at the rate so far (None before any cell is done);
    ``final`` on the last report, when the sweep has finished."""

    done: int
    total: int
    elapsed_s: float
    left_s: float | None
    final: bool = False


class Progress:
    """Counts a sweep's finished cells and reports them with ``report`` (a :class:`Tick`):
    at most once every ``every`` seconds (default :data:`EVERY_S`) while cells finish, and once
    when the sweep ends; the first report comes sooner, :data:`FIRST_S` seconds in, as soon as
    the time left can be measured.
    ``begin``, if given, receives the :class:`SweepSize` before the first fit. ``clock`` is
    the time source (seconds; tests pass a fake one).

    The time left is the cells left at the rate since the first task finished: the wait for
    the first one (worker processes starting, the first chunks read) is not a rate, and
    counting it made the first estimate of a 90 s sweep 21 minutes."""

    def __init__(self, report: Callable[[Tick], None], *, begin: Callable[[SweepSize], None] | None = None,
                 every: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.report, self.begin, self.clock = report, begin, clock
        self.every = EVERY_S if every is None else float(every)
        self.done = self.total = self.first_done = 0
        self.started = self.last = self.first_at = 0.0
        self.reported = False

    def start(self, size: SweepSize) -> None:
        """The sweep is about to run."""
        self.done, self.total, self.first_done, self.reported = 0, size.total, 0, False
        self.started = self.last = self.clock()
        if self.begin is not None:
            self.begin(size)

    def advance(self, cells: int) -> None:
        """``cells`` more cells are done; reports if ``every`` seconds passed since the last one
        (:data:`FIRST_S` before the first report, once a rate is known)."""
        now = self.clock()
        if not self.first_done:
            self.first_done, self.first_at = min(self.total, cells), now
        self.done = min(self.total, self.done + cells)
        due = now - self.last >= self.every
        # a rate measured over a second at least: worker processes hand back tasks in bursts
        early = (not self.reported and now - self.last >= FIRST_S and self.done > self.first_done
                 and now - self.first_at >= 1.0)
        if self.done < self.total and (due or early):
            self.last, self.reported = now, True
            self.report(self._tick(now, final=False))

    def finish(self) -> None:
        """The sweep has finished: the final report (every cell done)."""
        self.done = self.total
        self.report(self._tick(self.clock(), final=True))

    def _tick(self, now: float, final: bool) -> Tick:
        elapsed = max(0.0, now - self.started)
        since = self.done - self.first_done
        left = (now - self.first_at) * (self.total - self.done) / since if since > 0 else None
        return Tick(self.done, self.total, elapsed, 0.0 if final else left, final)


@contextmanager
def counting(cells_of: Mapping[Any, int], progress: Progress) -> Iterator[None]:
    """While the block computes on a local dask scheduler, each finished task whose key is in
    ``cells_of`` advances ``progress`` by its number of cells (dask calls back on the thread
    that schedules, one task at a time)."""
    class _Cells(Callback):
        def _posttask(self, key: Any, result: Any, _dsk: Any, state: Any, _worker_id: Any) -> None:
            n = cells_of.get(key)
            if n:
                progress.advance(n)

    with _Cells():
        yield


def sweep_size(plan: Any, scheduler: Any = None, num_workers: int | None = None) -> SweepSize:
    """The :class:`SweepSize` of a :class:`~analysis.probes.sweep.ProbePlan` computed on
    ``scheduler`` (as :func:`analysis.compute.compute` takes it)."""

    opt = plan.options
    cells = scored = 0
    n_C = 0.0 if opt["method"] == "screen" else (len(opt["C"]) if isinstance(opt["C"], tuple) else 0.2)
    overhead = 0.0
    per_fit = GATHERED_CELL_CLASS_S if opt["mode"] in ("last", "pooled") else CELL_CLASS_S
    for run, rp in plan.runs.items():
        fitted = sum(plan.cell_counts.get((run, L), 0) for L in plan.fit_lengths[run]) * len(rp.layers)
        cells += fitted
        scored += sum(plan.cell_counts.get((run, L), 0) for L in plan.test_lengths[run]) * len(rp.layers)
        overhead += fitted * rp.classes.size * n_C * per_fit
    name: str | None = None
    workers = 1
    estimate: float | None = None
    if is_local(scheduler):
        name = (default_scheduler(plan.cpu_s, num_workers) if scheduler in (None, "auto")
                else LOCAL[scheduler])
        workers = int(num_workers or dask.system.CPU_COUNT) if name == "processes" else 1
        # threads share the GIL: the solver's small numpy calls ran no faster on two of them
        estimate = (plan.cpu_s + overhead) / workers + (1.0 if name == "processes" else 0.0)
    lengths = sorted({L for run in plan.runs for L in plan.fit_lengths[run] + plan.test_lengths[run]})
    return SweepSize(
        runs=len(plan.runs),
        lengths=tuple(lengths),
        layers=max((len(rp.layers) for rp in plan.runs.values()), default=0),
        positions=str(opt["mode"]),
        cells=cells,
        scored=scored,
        folds=int(opt["folds"]),
        C_values=0 if opt["method"] == "screen" else (len(opt["C"]) if isinstance(opt["C"], tuple) else 1),
        estimate_s=estimate,
        scheduler=name,
        workers=workers,
    )
