"""``layerstate run``: train -> capture -> analyse -> claims -> report, resumable per stage.

Every stage skips what is already done (trained runs, captured blocks, stored results), so
re-running after an interruption does only what is missing. A stored result is reused only
if it was computed from the experiment's present runs and parameters
(:mod:`layerstate.staleness`): a grid given more seeds, a run trained again or changed
analysis settings make it out of date, and it is computed again (said in one line). The
experiment, claims included, is validated before anything is created
(:func:`layerstate.experiment.load_experiment`). Result lines come from
:mod:`layerstate.present`.

The entry points here build the experiment's work list once (:func:`layerstate.work.work_list`)
and hand it to the executor (:mod:`layerstate.executor`), which runs it with the command's one
``scheduler`` (:mod:`analysis.compute`), the same for every stage:

* ``"auto"`` (default), ``"threads"``, ``"processes"`` or ``"sync"``: this machine. Training
  runs in this process, or in ``jobs`` processes of one thread each; capture in this process,
  one torch thread; the analyses on local threads, or (``"auto"``: a long probe sweep;
  ``"processes"``: all) one-thread worker processes (``"sync"``: one task after another).
* ``"local:N"``, an address (``"tcp://host:8786"``) or a ``distributed.Client``: a
  ``dask.distributed`` cluster. Each run's training and each (run, length) capture is a task
  sent to the workers, which write their own runs into the store; then the analyses run there
  too. Tasks carry the run's spec, the store's URL and its storage options, never a model or
  an open store: each worker opens the store itself. The captures of one run follow each
  other (one writer per run at a time); different runs go side by side.

Before any work on a cluster the driver checks that the workers see the store
(:func:`check_store_shared`). A worker that dies has its task run again by dask on another:
on the same host the new writer takes the dead one's run lease over at once; on another host
it waits for that lease to expire (plus a small margin) and then takes it over, but a lease
that is renewed meanwhile has a live writer and fails the task in one line. A cluster that
goes away before its tasks finish (training, capture or an analysis) stops the command with
one line naming its address; what finished stays stored (trained runs, the checkpoints of
runs still training, recorded blocks, whole analysis results), so the same command on a new
cluster resumes. Every task pins one BLAS and torch thread (training then uses its
``[train] threads``), here as on the workers, so the stored arrays are bit-identical
whatever the scheduler.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.claims.cells import seeds_held
from analysis.claims.record import DECISION_RECORD, decision_record
from analysis.claims.sequential import (
    evaluate_sequential,
    next_cells,
    sequential_dataset,
    sequential_verdicts,
)
from analysis.compute import check, connect
from capture.device import Device, as_device
from capture.experiment import CapturePlan, RunSpec
from layerstate import present, stages
from layerstate.executor import CaptureProgress, Executor, TrainProgress
from layerstate.experiment import UNTESTABLE, load_design, load_experiment
from layerstate.present import sequential_lines
from layerstate.runtime import store_url
from layerstate.work import work_list
from store import Store
from store.contents.results import recording_reads
from store.errors import InvalidArgumentError
from store.schema import CLAIMS, SEQUENTIAL

if TYPE_CHECKING:
    from analysis.stats.design import Design
    from capture.record import CaptureResult
    from capture.train import TrainResult
    from layerstate.experiment import Experiment

__all__ = [
    "capture_experiment", "intervene_experiment", "probe_experiment", "run_experiment", "train_experiment",
]

Say = Callable[[str], None]


def train_experiment(
    exp: CapturePlan,
    store_path: str,
    *,
    jobs: int = 1,
    device: Device | str = "cpu",
    progress: TrainProgress | None = None,
    scheduler: Any = "threads",
    storage_options: dict | None = None,
    runs: Sequence[RunSpec] | None = None,
) -> Iterator[TrainResult]:
    """Train every run of the experiment into the store at ``store_path`` (skipping trained ones).

    ``scheduler`` ``"threads"``/``"sync"``: on this machine; ``jobs`` > 1 trains that many
    runs at a time in processes, one thread each (two 1-thread jobs beat one 2-thread job
    for these small models, docs/measured.md, "Threads"); ``progress`` is used only
    in-process. Results come in grid order. Any other scheduler (:mod:`analysis.compute`):
    one task per run on the cluster, after :func:`check_store_shared`; results come as the
    runs finish. ``storage_options`` go with the URL to every process that opens the store.
    ``runs``: only these runs of the grid (:meth:`CapturePlan.select`), to train it in parts.
    ``device``: a :class:`~capture.device.Device` or its name, resolved before anything runs.
    """
    where = as_device(device)
    work = work_list(exp, stages=("train",), runs=runs)
    with connect(scheduler) as sched:
        executor = Executor(sched, store_url(store_path), storage_options=storage_options,
                            device=where, jobs=jobs, train_progress=progress)
        for _, res in executor.run(work):
            yield res


def capture_experiment(
    exp: CapturePlan,
    store_path: str,
    *,
    device: Device | str = "cpu",
    scheduler: Any = "threads",
    storage_options: dict | None = None,
    progress_factory: CaptureProgress | None = None,
) -> list[CaptureResult]:
    """Capture every trained run of the experiment at every configured length (resumable).

    Local schedulers: in this process, one torch thread, one consolidation at the end
    (``progress_factory`` gives a progress callback per group). Any other: one task per
    (run, length) on the cluster, after :func:`check_store_shared`; the store is
    consolidated here once they are done. Results in grid order either way. ``device``: as in
    :func:`train_experiment`.
    """
    where = as_device(device)
    work = work_list(exp, stages=("capture",))
    with connect(scheduler) as sched:
        done = Executor(sched, store_url(store_path), storage_options=storage_options, device=where,
                        capture_progress=progress_factory).results(work)
    return [done[w.key] for w in work]


def probe_experiment(store, exp: Experiment, say: Say = print, scheduler: Any = None) -> list[str]:
    """Probe every task's runs (one result per task: ``probes/<task>``); skips stored ones.
    ``scheduler``: where the probes are fitted (:func:`analysis.compute.compute`)."""
    work = [w for w in work_list(exp, stages=("analyse",)) if w.kind == "probes"]
    return [name for w in work if (name := stages.analyse(w, store, exp, say, scheduler))]


def intervene_experiment(store, exp: Experiment, say: Say = print, scheduler: Any = "threads",
                         device: Device | str = "cpu") -> list[str]:
    """Ablations, patching and interchange per task, as configured; skips stored results.
    ``scheduler``: where they are computed (:func:`analysis.compute.compute`); ``device``:
    where their models run."""
    where = as_device(device)
    work = [w for w in work_list(exp, stages=("analyse",)) if w.kind != "probes"]
    return [name for w in work if (name := stages.analyse(w, store, exp, say, scheduler, where))]





def with_design(exp: Experiment, design: Design, source: str, say: Say) -> Experiment:
    """``exp`` staged under ``design`` (a ``--design`` file replacing the experiment's own).

    The design declares how seeds are spent, so a first stage larger than the grid's seeds
    0 .. n-1 (the fixed design the file was first run under) becomes the grid's seeds, 0 ..
    first_seeds-1, said in one line. Any other mismatch, a first stage smaller than the grid
    included, is left for `check_staged` to refuse (nothing the file declares is dropped)."""
    first = list(range(design.first_seeds))
    seeds = sorted(exp.grid.seeds)
    update: dict[str, Any] = {"design": design}
    if len(seeds) < len(first) and seeds == first[:len(seeds)]:
        say(f"{source}: the first stage is seeds 0..{design.first_seeds - 1} (the grid of the experiment "
            f"file says {', '.join(map(str, seeds))}; the design's first stage replaces it)")
        update["grid"] = exp.grid.model_copy(update={"seeds": first})
    return exp.model_copy(update=update)


def check_staged(exp: Experiment) -> None:
    """A staged grid's seeds must be its design's first stage (0 .. first_seeds - 1): later
    stages add the next seeds to the cells that need them."""
    d = exp.design
    assert d is not None
    want = list(range(d.first_seeds))
    if sorted(exp.grid.seeds) != want:
        raise InvalidArgumentError(
            f"the grid's seeds {exp.grid.seeds} are not the design's first stage; write seeds = {want} "
            f"([grid]): the design adds seeds {d.first_seeds}..{d.max_seeds - 1} stage by stage")
    unknown = sorted(set(d.max_seeds_by_arch) - set(exp.grid.archs))
    if unknown:
        raise InvalidArgumentError(f"design: max_seeds_by_arch names {', '.join(unknown)}, not in the grid's "
                                   f"architectures ({', '.join(exp.grid.archs)}); name those")


def run_stages(executor: Executor, exp: Experiment, url: str, storage_options: dict | None, say: Say) -> None:
    """Run a group-sequential design stage by stage (docs/sequential.md): train, capture and
    analyse the stage's runs, decide the claims at the stage's boundaries
    (:func:`analysis.claims.sequential.evaluate_sequential`) and store the stages as the result
    ``sequential``; the next stage trains new seeds only for the cells that undecided claims
    read, until every claim is decided or the cells reach their maximum. A stage computes the
    analyses the claims read (and the models' behaviour), not the others: seeds and CPU go
    where they decide claims. Runs already in the store are reused, so a stopped run resumes
    where it was."""

    design = exp.design
    assert design is not None
    plan = exp.plan
    read = {"behaviour"} | {c.reads() for c in exp.claims}
    if read & {"patching", "interchange"}:
        read.add("pairs")  # the counterfactual pairs they patch
    cells = list(dict.fromkeys((r.task, r.arch, r.variant) for r in plan.runs()))
    # a resumed design starts from the seeds its cells already hold (up to their maximum), so the
    # stored analyses of the last stage are reused rather than recomputed for an earlier stage's
    # runs; each stage's decision reads its own seeds through a seed view whatever the store holds
    held = seeds_held(Store.open(url, storage_options=storage_options))
    target = {cell: max(design.first_seeds, min(held.get(cell, 0), design.cap(cell[1]))) for cell in cells}
    stages = ("train", "capture", "analyse", "claims")
    while True:
        specs = [RunSpec(exp=plan, task=t, arch=a, variant=v, seed=s)
                 for (t, a, v) in cells for s in range(target[(t, a, v)])]
        more = ", ".join(f"{'/'.join(c)} {n}" for c, n in target.items() if n > design.first_seeds)
        say(f"stage at {max(target.values())} seeds: {len(specs)} runs ({more or 'the grid'})")
        work = [w for w in work_list(exp, stages=stages, runs=specs) if w.stage != "analyse" or w.kind in read]
        executor.results(work)
        st = Store.open(url, mode="r+", storage_options=storage_options)
        with recording_reads() as inputs:
            run = evaluate_sequential(st, exp.claims, design, absent=exp.absent_claims)
        if not run.stages and run.short():
            short = ", ".join(f"{'/'.join(c)} ({n} seeds)" for c, n in run.short().items())
            raise InvalidArgumentError(
                f"the design's first stage cannot be decided: the claims read cells the run did not train to "
                f"{design.first_seeds} seeds: {short}; name cells of the grid in the claims (task, arch, variant)")
        stages_ds = sequential_dataset(run)
        stages_ds.attrs[DECISION_RECORD] = decision_record(  # what the stages were decided on
            st, inputs, family=[c.id for c in [*exp.claims, *exp.absent_claims]], alpha=design.alpha,
            correction=f"{design.spending} spending")
        st.write_result(SEQUENTIAL, stages_ds)
        for line in sequential_lines(run):
            say(line)
        nxt = {c: n for c, n in next_cells(run).items() if c in target and n > target[c]}
        if exp.claims and CLAIMS in st.results():  # the design's verdicts, not a look at every seed
            st.write_result(CLAIMS, sequential_verdicts(st.read_result(CLAIMS), run))
        if not nxt:
            skipped = sorted({w.key for w in work_list(exp, stages=("analyse",), runs=specs)} - {w.key for w in work})
            if skipped:
                say(f"not computed (no claim reads them): {', '.join(skipped)}; `layerstate ablate` / "
                    "`layerstate patch` compute them on the store")
            return
        target.update(nxt)


def run_experiment(
    exp_path: str | Path,
    out: str | Path,
    *,
    store: str | None = None,
    storage_options: dict | None = None,
    scheduler: Any = "auto",
    jobs: int = 2,
    device: Device | str = "cpu",
    tasks: Sequence[str] | None = None,
    design: str | Path | None = None,
    say: Say = print,
) -> Path:
    """The main job: every stage of an experiment into a store and ``out/report``.

    ``store``: the store's directory or fsspec URL (default ``out/store.zarr``), opened
    with ``storage_options`` everywhere. ``scheduler``: see the module docstring (``jobs``
    counts training processes on this machine only). A malformed experiment or claim, or a
    scheduler that does not answer, is refused before anything is created or trained.
    ``tasks``: run only this part of the grid (:meth:`~layerstate.experiment.Experiment.part`:
    those tasks' runs and the claims that read only them); the other parts can be run into
    the same store later, and each part's report covers what the store holds.
    ``design``: a TOML file whose ``[design]`` replaces the experiment's (a group-sequential
    design over seeds, docs/sequential.md); with one, the grid is run stage by stage
    (:func:`run_stages`). ``device``: a :class:`~capture.device.Device` (the command line's,
    resolved there) or its name, resolved here before anything else; training, capture and
    the analyses that rerun models (ablation, patching, interchange) run there.
    """
    where = as_device(device)
    with warnings.catch_warnings():
        if design is not None:  # its seeds, not the file's grid, say what a profile claim can reach: said below
            warnings.filterwarnings("ignore", message=UNTESTABLE, category=UserWarning)
        exp = load_experiment(exp_path)
    if tasks:
        whole = len(exp.claims)
        exp = exp.part(tasks)
        say(f"part of {exp_path}: tasks {', '.join(exp.grid.tasks)}; {len(exp.plan.runs())} runs, "
            f"{len(exp.claims)} of its {whole} claims (those reading only these tasks; the other "
            f"{whole - len(exp.claims)} stay in the Holm correction with p = 1)")
    if design is not None:
        declared = load_design(design)
        if declared is None:
            raise InvalidArgumentError(f"{design} declares no [design]; add one (first_seeds, stage_seeds, "
                                       "max_seeds, spending) before its first stage is trained")
        exp = with_design(exp, declared, str(design), say)
        exp.warn_untestable()
    if exp.design is not None:
        check_staged(exp)
    check(scheduler)
    t0 = time.perf_counter()
    with connect(scheduler, say=say) as sched:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        url = store_url(store if store is not None else out / "store.zarr")
        Store.create(url, title=exp.experiment.title or exp.experiment.name, exist_ok=True,
                     storage_options=storage_options)
        executor = Executor(sched, url, storage_options=storage_options, device=where, jobs=jobs,
                            exp=exp, out=out, say=say)
        if exp.design is not None:
            run_stages(executor, exp, url, storage_options, say)
            done = executor.results(exp.work(stages=("report",)))
        else:
            done = executor.results(exp.work())  # the whole job, in order
    index = done["report"]
    say(f"done in {time.perf_counter() - t0:.0f}s: store {url}")
    say(present.report_line(index))
    if tasks:
        say(f"this part's claims were corrected with the other parts' tests at p = 1; once every part has run, "
            f"`layerstate combine {url} OTHER_PARTS... --claims {exp_path}` gives one verdict table")
    return index
