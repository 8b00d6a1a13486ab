"""The executor: runs a work list (:mod:`layerstate.work`) here or on a dask cluster.

The order of the whole job, as :meth:`Executor.run` does it::

    check      on a cluster: the workers see the store (before any work is sent)
    train      every run, skipping trained ones           -> a line per run
    capture    every (run, length), after the run's training -> one line for all
    analyse    behaviour per task (its readout's accuracy), probes per task, then each
               task's interventions (stored results reused only if still up to date)
    claims     evaluated over the stored results
    report     built from the store

Where units run is the one ``scheduler`` of the command (:mod:`analysis.compute`):

* this machine (``"auto"``, ``"threads"``, ``"processes"``, ``"sync"``): training in this
  process, or in ``jobs`` spawned processes of one thread each (CPU only); capture in this
  process, one torch thread, the run's model rebuilt once for all its lengths;
* a ``dask.distributed`` cluster: each train and capture unit is a task
  (:func:`layerstate.stages.task`) submitted with the futures of the units it waits for, so
  a run's captures start as soon as it is trained and follow each other (one writer per
  run); different runs go side by side. Training and capture are one section there.

Either way the same list is run in the same order of dependencies, with the same unit
bodies (:mod:`layerstate.stages`): every capture, and every unit in another process, pins one
BLAS and torch thread (training then uses its ``[train] threads``), and the stored arrays are
bit-identical. Analyses, claims and the report run in this process; the analyses send their
own graphs to the scheduler. Each section opens the store once and hands that handle to its
units (units in other processes open their own); a section that wrote the store refreshes
its consolidated metadata once, at its end.

Faults: a unit's error stops the job (the other tasks of its section are cancelled); a
cluster that goes away becomes one line naming its address and what is kept (everything
that finished), so the same command resumes.

The compute device (``--device cuda``), resolved once where the command starts (a
:class:`capture.device.Device`): units with ``device`` set (train, capture, and the analyses
that rerun models: ablation, patching, interchange) use it, the others run on the CPU
(:meth:`Executor.device_for`). Training with ``jobs`` > 1 runs that many spawned processes side by side on the one GPU (the
experiments' models are small: one run at a time leaves it mostly idle); captures take it one
at a time, in this process; on a cluster each worker uses its own.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.compute import cluster_lost, is_local, one_thread
from capture.device import CPU, Device
from capture.interrupt import StopRequest
from layerstate import present, stages
from layerstate.runtime import check_store_shared
from layerstate.work import Work
from reports import build_report
from store import Store

Say = Callable[[str], None]
#: ``progress(description, total_steps)`` -> a ``callback(step, point)`` for one run's training.
TrainProgress = Callable[[str, int], Callable[[int, dict], None]]
#: ``progress(description, total_sequences)`` -> a ``callback(n_sequences_done)`` for one capture.
CaptureProgress = Callable[[str, int], Callable[[int], None]]


@dataclass
class Section:
    """Consecutive units run together: one stage here (two, train and capture, on a cluster)."""

    items: list[Work] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        return list(dict.fromkeys(w.stage for w in self.items))

    @property
    def on_workers(self) -> bool:
        return self.items[0].on_workers


class Executor:
    """Runs work lists with one scheduler, store, device and set of progress callbacks.

    ``scheduler``: what :func:`analysis.compute.connect` returned (a local scheduler name or
    a ``distributed.Client``). ``url``, ``storage_options``: the store, as every process
    opens it. ``jobs``: training processes on this machine. ``exp``, ``out``: the
    experiment (for analyses and claims) and the output folder (the report). ``say``: the
    lines of ``layerstate run`` (stage headers and results); None says nothing. ``device``:
    the command's compute device, already resolved (:func:`capture.device.as_device`), for the
    units that use one (:meth:`device_for`).
    """

    def __init__(self, scheduler: Any, url: str, *, storage_options: dict | None = None,
                 device: Device = CPU, jobs: int = 1, exp: Any = None, out: Path | None = None,
                 say: Say | None = None, train_progress: TrainProgress | None = None,
                 capture_progress: CaptureProgress | None = None) -> None:
        self.scheduler = scheduler
        self.client: Any = None if is_local(scheduler) else scheduler
        self.url, self.storage_options, self.device, self.jobs = url, storage_options, device, jobs
        self.exp, self.out = exp, out
        self.say: Say = say or (lambda line: None)
        self.train_progress, self.capture_progress = train_progress, capture_progress
        self.n_workers = 0

    def device_for(self, item: Work) -> Device:
        """Where ``item`` computes: the command's device if the unit uses one
        (:attr:`Work.device`), else the CPU."""
        return self.device if item.device else CPU

    # ------------------------------------------------------------------------- the job
    def run(self, work: Sequence[Work]) -> Iterator[tuple[Work, Any]]:
        """Run ``work`` (a list in dependency order), yielding ``(unit, result)`` as units
        finish: in list order here, in the order they finish on a cluster."""
        for section in self.sections(work):
            if section.on_workers:
                yield from self._workers(section)
            else:
                yield from self._here(section)

    def results(self, work: Sequence[Work]) -> dict[str, Any]:
        """Run ``work``; every unit's result by key."""
        return {item.key: res for item, res in self.run(work)}

    def sections(self, work: Sequence[Work]) -> list[Section]:
        """``work`` cut where its stage changes; on a cluster, train and capture are one section (a run is captured as soon as it
        is trained)."""
        out: list[Section] = []
        for item in work:
            if out and self._group(out[-1].items[-1]) == self._group(item):
                out[-1].items.append(item)
            else:
                out.append(Section([item]))
        return out

    def _group(self, item: Work) -> str:
        return "workers" if item.on_workers and self.client is not None else item.stage

    # ------------------------------------------------------------------------- train, capture
    def _workers(self, section: Section) -> Iterator[tuple[Work, Any]]:
        """Train and capture units: each in its pool (:meth:`_pool`), after the units it waits
        for; one line per trained run, one for the captures."""
        st = Store.open(self.url, mode="r+", storage_options=self.storage_options)  # one line if not a store
        if self.client is not None and not self.n_workers:
            self.n_workers = check_store_shared(self.client, self.url, self.storage_options)
        self.say(self._header(section))
        n_train = sum(w.stage == "train" for w in section.items)
        trained, captured = 0, []
        # captures refresh the snapshot once for all their blocks; training refreshes it per
        # run (in train_run), so the finished runs of a long grid show as they finish
        deferred = st.deferred_consolidation() if "train" not in section.stages else nullcontext()
        with deferred:
            for item, res in self._pool(section, st):
                if item.stage == "train":
                    trained += 1
                    self.say(present.training_line(res, trained, n_train))
                else:
                    captured.append((item, res))
                yield item, res
            if captured:
                order = {w.key: i for i, w in enumerate(section.items)}
                self.say(present.capture_line([r for _, r in sorted(captured, key=lambda c: order[c[0].key])]))
            st.consolidate()  # what every unit wrote, in one snapshot

    def _pool(self, section: Section, st: Any) -> Iterator[tuple[Work, Any]]:
        """Where a section's units run: a cluster's workers; ``jobs`` spawned processes for
        training, on the CPU or sharing the one ``device``; else this process, in list order,
        with the section's store handle."""
        if self.client is not None:
            yield from self._on_cluster(section)
        elif section.stages == ["train"] and self.jobs > 1:  # on the CPU, or sharing one GPU
            yield from self._on_processes(section)
        else:
            yield from self._in_process(section, st)

    def _in_process(self, section: Section, st: Any) -> Iterator[tuple[Work, Any]]:
        models: dict = {}  # a run's model, rebuilt once for all its captures
        n = len(section.items)
        for i, item in enumerate(section.items, 1):
            spec = item.run
            assert spec is not None
            if item.stage == "train":
                step = (self.train_progress(f"[{i}/{n}] {spec.run_id}", spec.train.steps)
                        if self.train_progress else None)
                yield item, stages.train(spec, st, self.device_for(item), step)
                continue
            assert item.length is not None
            with one_thread():
                res = stages.capture(spec, st, item.kind, item.length, self.device_for(item), models=models,
                                     progress_factory=self.capture_progress)
            yield item, res

    def _on_processes(self, section: Section) -> Iterator[tuple[Work, Any]]:
        """Training runs ``jobs`` at a time in spawned one-thread processes; results in list
        order (two 1-thread jobs beat one 2-thread job for these small models).

        Stopped (Ctrl-C, or a unit's error): the queued runs are cancelled, not started, and
        the running ones are told to stop (SIGINT: each checkpoints at its step's end,
        :class:`capture.interrupt.StopRequest`) and waited for, so the command ends within a step
        or two with every finished run and checkpoint kept."""
        pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                                   initializer=_sigint_between_runs)
        try:
            futures: list[Future] = [pool.submit(stages.task, item, self.url, self.storage_options,
                                                 self.device_for(item), wait_for_lease=False)
                                     for item in section.items]
            for item, fut in zip(section.items, futures, strict=True):
                yield item, fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            _interrupt(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _on_cluster(self, section: Section) -> Iterator[tuple[Work, Any]]:
        """Every unit a task, handed the futures of the units it waits for; results as they
        finish."""
        from distributed import as_completed

        client, tag = self.client, secrets.token_hex(4)
        futures: dict[str, Any] = {}
        for item in section.items:
            after = [futures[k] for k in item.after if k in futures]
            futures[item.key] = client.submit(
                stages.task, item, self.url, self.storage_options, self.device_for(item),
                after=after or None, pure=False,
                key=f"{_task_key(item)}-{tag}")
        units = {fut.key: item for item, fut in zip(section.items, futures.values(), strict=True)}
        with self._waiting(list(futures.values())):
            for fut in as_completed(list(futures.values()), loop=client.loop):
                yield units[fut.key], fut.result()

    @contextmanager
    def _waiting(self, futures: list) -> Iterator[None]:
        """Around waiting for tasks: on any error they are cancelled, and a cluster that went
        away becomes one line saying how to resume (:func:`analysis.compute.cluster_lost`)."""
        try:
            yield
        except BaseException as exc:
            lost = cluster_lost(self.client, exc,
                                f"what finished is kept in {self.url} (trained runs, recorded blocks)")
            if lost is not None:
                raise lost from None
            try:
                self.client.cancel(futures)
            except Exception:  # noqa: BLE001 - a closing cluster cancels them anyway
                pass
            raise

    def _header(self, section: Section) -> str:
        exp = section.items[0].run.exp  # type: ignore[union-attr]
        cap, n = exp.capture, sum(w.stage == "train" for w in section.items)
        if self.client is not None:
            where = f"the dask cluster at {self.client.scheduler.address} ({len(self.client.nthreads())} workers)"
            return (f"== {' and '.join(section.stages)} ({n} runs; lengths {cap.lengths}, {cap.n_sequences} "
                    f"sequences each) on {where}; {self.n_workers} workers see {self.url}")
        if section.stages == ["train"]:
            return f"== train ({n} runs, {self.jobs} at a time)"
        return f"== capture (lengths {cap.lengths}, {cap.n_sequences} sequences each)"

    # ------------------------------------------------------------------------- this process
    def _here(self, section: Section) -> Iterator[tuple[Work, Any]]:
        """Analyses, claims and the report, in list order, with one store handle."""
        stage, exp = section.items[0].stage, self.exp
        if stage == "report":
            assert self.out is not None
            self.say("== report")
            st = Store.open(self.url, storage_options=self.storage_options)
            yield section.items[0], build_report(st, self.out / "report", force=True,
                                                 experiment=exp.model_dump(mode="json"))
            return
        st = Store.open(self.url, mode="r+", storage_options=self.storage_options)
        if stage == "claims":
            self.say("== claims")
            yield section.items[0], stages.evaluate_claims(st, exp, self.say)
            return
        cfg, heading = exp.analysis, None
        for item in section.items:
            part = item.kind if item.kind in ("behaviour", "probes", "mdl", "stability") else "interventions"
            if part != heading:
                heading = part
                self.say({"probes": f"== probes ({cfg.probe_positions} positions, {cfg.probe_folds}-fold by sequence)",
                          "mdl": f"== mdl ({cfg.mdl_positions} positions)",
                          "stability": "== stability (the seeds' probe subspaces)"}.get(part, f"== {part}"))
            yield item, stages.analyse(item, st, exp, self.say, self.scheduler, self.device_for(item))


def _sigint_between_runs() -> None:
    """In a training process: SIGINT between runs is noted, not raised (a waiting process must
    not die with a traceback), and a run started after it stops at its first step; during a
    run, training takes it at a step's end (:class:`capture.interrupt.StopRequest`)."""
    signal.signal(signal.SIGINT, StopRequest.note)


def _interrupt(pool: ProcessPoolExecutor) -> None:
    """SIGINT to the pool's live worker processes (a Ctrl-C at a terminal reached them already;
    a SIGINT sent to this process alone did not): each stops its training at a step's end."""
    for proc in list(getattr(pool, "_processes", {}).values()):  # the pool keeps its processes here
        if proc.is_alive() and proc.pid is not None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except OSError:  # gone meanwhile
                pass


def _task_key(item: Work) -> str:
    """A task's name on the cluster's dashboard: ``train-<run>``, ``capture-<run>-len40``."""
    assert item.run is not None
    if item.stage == "train":
        return f"train-{item.run.run_id}"
    return f"capture-{item.run.run_id}-{item.kind}{item.length}"
