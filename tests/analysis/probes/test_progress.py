"""A probe sweep says how much work it is before it starts and reports the cells done while it
runs: a fake clock for the throttling, a small planted store for the counts of a real sweep."""

from __future__ import annotations

import pytest

from analysis.probes import plan_probes, probe
from analysis.probes.progress import Progress, SweepSize, Tick
from tests.analysis.probes.test_probes import make


def size(total: int) -> SweepSize:
    return SweepSize(runs=1, lengths=(8,), layers=1, positions="all", cells=total, scored=0, folds=2,
                     C_values=1, estimate_s=None, scheduler="sync", workers=1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reports_at_most_every_interval_then_a_final_tick():
    clock, ticks, begun = FakeClock(), [], []
    progress = Progress(ticks.append, begin=begun.append, every=10.0, clock=clock)
    progress.start(size(10))
    assert begun == [size(10)] and ticks == []
    for _ in range(10):  # a cell every 4 s: the first report as soon as a rate is known (8 s,
        clock.now += 4.0  # the second cell), then every 10 s at most (20 and 32 s)
        progress.advance(1)
    progress.finish()
    assert [(t.done, t.total, t.final) for t in ticks] == [
        (2, 10, False), (5, 10, False), (8, 10, False), (10, 10, True)]
    # the cells left at the rate since the first cell finished (1 cell in 4 s), not since the start
    assert ticks[0].left_s == pytest.approx(4.0 * 8)
    assert ticks[1].left_s == pytest.approx(16.0 * 5 / 4)
    assert ticks[-1].left_s == 0.0 and ticks[-1].elapsed_s == pytest.approx(40.0)


def test_no_early_report_from_tasks_that_finish_together():
    clock, ticks = FakeClock(), []
    progress = Progress(ticks.append, every=10.0, clock=clock)
    progress.start(size(100))
    clock.now += 5.0  # worker processes started; two tasks handed back at once: no rate yet
    progress.advance(1)
    clock.now += 0.01
    progress.advance(1)
    assert ticks == []
    clock.now += 2.0
    progress.advance(2)
    assert [(t.done, t.left_s) for t in ticks] == [(4, pytest.approx(2.01 * 96 / 3))]


def test_no_report_before_the_interval_and_none_for_the_last_cell():
    clock, ticks = FakeClock(), []
    progress = Progress(ticks.append, every=10.0, clock=clock)
    progress.start(size(4))
    clock.now += 3.0
    progress.advance(3)
    clock.now += 30.0
    progress.advance(1)  # the last cell: the final tick says it, not an interim one
    progress.finish()
    assert ticks == [Tick(4, 4, 33.0, 0.0, True)]


def test_no_time_left_until_a_rate_is_known():
    clock, ticks = FakeClock(), []
    progress = Progress(ticks.append, every=0.0, clock=clock)
    progress.start(size(10))
    clock.now += 60.0  # a slow start (worker processes): not a rate
    progress.advance(1)
    clock.now += 2.0
    progress.advance(1)
    assert [t.left_s for t in ticks] == [None, pytest.approx(2.0 * 8)]


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_a_sweep_counts_every_cell_of_every_task(tmp_path, scheduler):
    st = make(tmp_path, runs=("r0", "r1"), lengths=(8,))  # layers embed, L0, L1; 8 positions
    plan = plan_probes(st, "y", positions="all", folds=2, C=1.0)
    ticks, begun = [], []
    progress = Progress(ticks.append, begin=begun.append, every=0.0)
    ds = plan.compute(scheduler, progress=progress)
    (announced,) = begun
    assert (announced.runs, announced.lengths, announced.layers, announced.positions) == (2, (8,), 3, "all")
    assert announced.cells == 2 * 3 * 8 == ds.accuracy.isel(fold=0).size and announced.scored == 0
    assert announced.estimate_s is not None and announced.estimate_s > 0
    assert sum(plan.task_cells) == 48 and len(plan.task_cells) == len(plan.tasks) > 1
    # every=0: each finished task reports, but the last one, which the final tick stands for
    assert len(ticks) == len(plan.tasks)
    assert [t.done for t in ticks[:-1]] == sorted({t.done for t in ticks[:-1]})
    assert all(t.total == 48 and not t.final for t in ticks[:-1])
    assert ticks[-1].final and ticks[-1].done == 48


def test_probe_passes_progress_on(tmp_path):
    st = make(tmp_path)
    ticks = []
    probe(st, "y", positions="last", folds=2, C=1.0, scheduler="sync", progress=Progress(ticks.append))
    assert [(t.done, t.total, t.final) for t in ticks] == [(3, 3, True)]  # 1 run x 1 length x 3 layers


def test_pooled_and_transfer_sweeps_count_their_cells(tmp_path):
    st = make(tmp_path, lengths=(8, 12))
    pooled = plan_probes(st, "y", positions="pooled", folds=2, C=1.0)
    assert sum(pooled.task_cells) == 1 * 2 * 3  # one cell per (run, length, layer)
    transfer = plan_probes(st, "y", positions="all", train_length=8, lengths=[8, 12], folds=2, C=1.0)
    ticks, begun = [], []
    transfer.compute("sync", progress=Progress(ticks.append, begin=begun.append, every=0.0))
    # fitted at 8: 8 positions + the pooled probe for the positions 8 lacks; scored at 12: 12
    assert (begun[0].cells, begun[0].scored) == (3 * 9, 3 * 12)
    assert len(ticks) == len(transfer.tasks) and ticks[-1].done == ticks[-1].total == 3 * 21
