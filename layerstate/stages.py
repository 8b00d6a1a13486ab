"""What each unit of the work list does (:mod:`layerstate.work`), handed a store.

Train and capture units have two forms: the body (:func:`train`, :func:`capture`), given a
store handle that the executor opened for the stage, and the task (:func:`train_task`,
:func:`capture_task`) that runs the body in a process of its own (a pool's or a cluster
worker's): it opens the store by URL, pins one thread and, on a cluster, waits out the lease
of a dead writer (:func:`layerstate.runtime.task_writer`). Tasks carry the run's spec, the
store's URL and its storage options, never a model or an open store.

The analyse, claims and report units run in the driver (:func:`analyse`); the analyses
hand their dask graphs to the command's scheduler, and each skips a result already stored
from the same runs and parameters (:mod:`layerstate.staleness`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from analysis import registry
from analysis.behaviour import CI_LEVEL, failed_runs, measured_lengths, store_behaviour
from analysis.claims import evaluate_stored_claims
from analysis.claims.stored import keep_profiles
from analysis.compute import one_thread
from analysis.interventions import run_ablation, run_interchange, run_patching
from analysis.probes import plan_mdl, plan_stability, probe, save_mdl, save_stability
from analysis.probes.probing import task_attrs
from capture.device import CPU, Device
from capture.interrupt import StopRequest
from capture.record import capture_unit, check_capturable
from capture.train import train_run
from layerstate import present
from layerstate.runtime import task_writer, torch_threads
from layerstate.staleness import REQUEST_ATTR, added_runs, result_request, stored_answers
from layerstate.work import Work
from store import Store, schema
from store.contents.results import DIGEST_ATTR

if TYPE_CHECKING:
    from capture.experiment import RunSpec
    from capture.record import CaptureResult
    from capture.train import TrainResult
    from layerstate.experiment import Experiment

Say = Callable[[str], None]


# ----------------------------------------------------------------------------- train, capture
def train(spec: RunSpec, store: Any, device: Device,
          progress: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Train one run (skipped if trained); torch's thread count, which training sets from
    ``[train] threads``, is restored afterwards."""
    with torch_threads():
        return train_run(store, spec, device=device, progress=progress)


def capture(spec: RunSpec, store: Any, kind: str, length: int, device: Device, *,
            models: dict | None = None,
            progress_factory: Callable[[str, int], Callable[[int], None]] | None = None) -> CaptureResult:
    """One (run, kind, length) capture with the experiment's ``[capture]`` settings
    (:func:`capture.record.capture_unit`; resumable)."""
    return capture_unit(store, spec, kind, length, device=device, models=models,
                        progress_factory=progress_factory)


def train_task(spec: RunSpec, url: str, storage_options: dict | None, device: Device, *,
               after: Any = None, wait_for_lease: bool = True) -> TrainResult:
    """One run's training in a process of its own: opens the store at ``url``, one BLAS
    and torch thread (training then uses its ``[train] threads``). ``wait_for_lease``
    (cluster tasks): wait out a lease that another host's dead worker left on the run.
    ``after``: the results this task waits for, unused."""
    with one_thread():
        st = Store.open(url, mode="r+", storage_options=storage_options)
        with task_writer(st, spec.run_id) if wait_for_lease else nullcontext():
            return train(spec, st, device)


def capture_task(spec: RunSpec, url: str, storage_options: dict | None, kind: str, length: int,
                 device: Device, after: Any = None, *, wait_for_lease: bool = True) -> CaptureResult:
    """One (run, length) capture in a process of its own (``kind`` ``"len"``, or ``"cf"``
    for the counterfactual twins): opens the store itself, checks that the run was trained
    from this experiment, rebuilds the model from its stored weights and captures
    (resumable). ``after``: the results this task waits for (the run's training or its
    previous capture), unused."""
    with one_thread():
        st = Store.open(url, mode="r+", storage_options=storage_options)
        check_capturable(st, spec)  # before waiting for any lease
        with task_writer(st, spec.run_id) if wait_for_lease else nullcontext():
            return capture(spec, st, kind, length, device)


def task(item: Work, url: str, storage_options: dict | None, device: Device, *, after: Any = None,
         wait_for_lease: bool = True) -> Any:
    """A train or capture unit as a task (:func:`train_task`, :func:`capture_task`)."""
    assert item.run is not None and item.on_workers, item
    if StopRequest.pending:  # this process was told to stop: a unit queued to it is not begun
        raise KeyboardInterrupt
    if item.stage == "train":
        return train_task(item.run, url, storage_options, device, after=after, wait_for_lease=wait_for_lease)
    assert item.length is not None
    return capture_task(item.run, url, storage_options, item.kind, item.length, device, after=after,
                        wait_for_lease=wait_for_lease)


# ----------------------------------------------------------------------------- analyses
#: The analyses whose stored rows a stage's new runs extend rather than recompute: each run's
#: rows are computed from that run alone, and they are the costly ones (models rerun).
EXTENDABLE = ("ablation", "patching", "interchange")


def analyse(item: Work, store: Any, exp: Experiment, say: Say, scheduler: Any,
            device: Device = CPU) -> str | None:
    """Compute and store the analysis ``item`` names, unless a stored result answers it.
    Returns the result's name (None for the pairs check, or an analysis without pairs).
    ``device``: where the analyses that rerun models rebuild them (not a parameter of the
    result: a result computed on another device still answers)."""
    cfg = exp.analysis
    task_, runs = item.task, list(item.runs)
    if item.kind == "pairs":
        if not has_pairs(store, runs, cfg.patch_length):
            say(f"{task_}: no counterfactual pairs at length {cfg.patch_length}; set "
                "[capture] counterfactual_pairs and counterfactual_lengths to patch")
        return None
    if item.kind in ("patching", "interchange") and not has_pairs(store, runs, cfg.patch_length):
        return None  # said by the task's pairs check
    name = item.key
    if item.kind == "behaviour" and not _measured(store, runs):
        say(f"{name}: no complete captured length with logits; nothing to measure")
        return None
    params, compute = analysis_of(item, store, exp, scheduler, device)
    request = result_request(store, runs, params)
    # a stage's new seeds: the stored rows of the others answer (same parameters, the runs
    # unchanged), so only the new runs are computed (analysis.interventions.intervals.extended)
    extend = item.kind in EXTENDABLE and name in store.results() and bool(added_runs(
        store.result_attrs(name).get(REQUEST_ATTR), request))
    if stored_answers(store, name, request, say, then="computing the runs it lacks" if extend else
                      "computing it again"):
        _say_failed(item, store, name, say)
        return name
    t0 = time.perf_counter()
    ds = compute(params, {REQUEST_ATTR: request}, extend=True) if extend else compute(params, {REQUEST_ATTR: request})
    seconds = time.perf_counter() - t0
    reused = int(ds.attrs.get("reused_runs", 0))
    say(present.probe_summary(name, ds, seconds) if item.kind == "probes"
        else f"{name}: stored in {seconds:.0f}s" + (
            f" ({len(runs) - reused} new runs computed, the stored rows of {reused} reused)" if reused else ""))
    _say_failed(item, store, name, say)
    return name


def _say_failed(item: Work, store: Any, name: str, say: Say) -> None:
    """Name each run of a behaviour result that did not learn (its accuracy's lower bound at or
    below chance): the claims keep it (dropping it would bias them), the reader is told."""
    if item.kind != "behaviour":
        return

    for line in failed_runs(store.read_result(name), store):
        say(f"{name}: {line}")


def _measured(store: Any, runs: list[str]) -> dict[int, list[str]]:
    """Per length, the runs whose captured length behaviour reads (complete, with logits)."""
    return measured_lengths(store, runs)


def has_pairs(store: Any, runs: list[str], length: int) -> bool:
    """Whether every run has its counterfactual twins captured at ``length``."""
    return all(length in store.lengths(r, kind="cfclean") for r in runs)


#: What builds one analysis: ``(item, store, exp, scheduler, device)`` -> the parameters its result is
#: computed from (recorded with it) and the function that computes and stores it from them and the
#: attributes to store with it (the interventions' also take ``extend``: compute only the runs the
#: stored result lacks, :data:`EXTENDABLE`), returning the stored Dataset.
Builder = Callable[[Work, Any, "Experiment", Any, Device], tuple[dict[str, Any], Callable[..., Any]]]


def _behaviour(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    runs = list(item.runs)
    # the lengths it was measured at: a length captured since makes it stale
    params: dict[str, Any] = dict(lengths=list(_measured(store, runs)), ci_level=CI_LEVEL)
    return params, lambda p, a: store_behaviour(store, str(item.task), runs, attrs=a)


def _probes(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    cfg = exp.analysis
    params = dict(positions=cfg.probe_positions, lengths=cfg.probe_lengths, train_length=cfg.probe_train_length,
                  folds=cfg.probe_folds, method=cfg.probe_method, control=cfg.probe_control)
    name = schema.result_name(registry.PROBES, item.key)
    # a sweep stopped part-way resumes from the runs it kept, and says so under the result's name
    return params, lambda p, a: probe(store, runs=list(item.runs), **p, save=True, name=item.key,
                                      scheduler=scheduler, attrs=a, say=lambda line: print(f"{name}: {line}", flush=True))


def _mdl(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    cfg = exp.analysis
    params: dict[str, Any] = dict(positions=cfg.mdl_positions, lengths=cfg.probe_lengths, control="permute")

    def compute(p: dict[str, Any], a: dict[str, Any]) -> Any:
        plan = plan_mdl(store, None, runs=list(item.runs), positions=p["positions"], lengths=p["lengths"],
                        control=p["control"])
        ds = plan.compute(scheduler)
        ds.attrs.update(task_attrs(store, list(ds.run.values)), **a)
        save_mdl(store, ds, item.key)
        return ds

    return params, compute


def _stability(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    result = schema.result_name(registry.PROBES, str(item.task))
    # the probe result it reads, by its data: probes computed again make it stale
    behaviour = registry.behaviour_name(str(item.task))
    # ... and the behaviour result that says which seeds learned (those that did not are left out)
    params: dict[str, Any] = dict(result=result, shuffles=exp.analysis.stability_shuffles,
                                  probes=store.result_attrs(result).get(DIGEST_ATTR),
                                  behaviour=store.result_attrs(behaviour).get(DIGEST_ATTR)
                                  if behaviour in store.results() else None)

    def compute(p: dict[str, Any], a: dict[str, Any]) -> Any:
        plan = plan_stability(store, p["result"], runs=list(item.runs), shuffles=p["shuffles"])
        ds = plan.compute()  # numpy on the driver: a few maps a cell
        ds.attrs.update(a)
        save_stability(store, ds, item.key)
        return ds

    return params, compute


def _ablation(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    cfg = exp.analysis
    params = dict(settings=cfg.ablate_settings, lengths=cfg.ablate_lengths,
                  fit_length=cfg.ablate_fit_length or exp.train.length,
                  mode=cfg.ablate_mode, refit_rows=cfg.ablate_refit_rows)
    return params, lambda p, a, extend=False: run_ablation(store, str(item.task), runs=list(item.runs), **p,
                                                           scheduler=scheduler, attrs=a, device=device,
                                                           extend=extend)


def _patching(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    cfg = exp.analysis
    params = dict(length=cfg.patch_length, positions=cfg.patch_positions)
    return params, lambda p, a, extend=False: run_patching(
        store, p["length"], str(item.task), runs=list(item.runs), positions=p["positions"], scheduler=scheduler,
        attrs=a, device=device, extend=extend)


def _interchange(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    params = dict(length=exp.analysis.patch_length)
    return params, lambda p, a, extend=False: run_interchange(store, p["length"], str(item.task),
                                                              runs=list(item.runs), scheduler=scheduler, attrs=a,
                                                              device=device, extend=extend)


def _added(item: Work, store: Any, exp: Experiment, scheduler: Any, device: Device):
    """An analysis added from outside (:func:`analysis.registry.register_analysis`): its
    parameters from the experiment's ``[analysis.params.<name>]``, its result stored as
    ``<name>/<task>`` with the attributes every result records."""
    entry = registry.analysis(str(item.kind))
    assert entry is not None and entry.compute is not None  # the work list schedules registered ones only
    compute_one = entry.compute
    params = exp.analysis.added_params(entry.name)

    def compute(p: dict[str, Any], a: dict[str, Any]) -> Any:
        ds = compute_one(store, str(item.task), list(item.runs), p)
        ds.attrs.update(a)
        store.write_result(item.key, ds)
        return ds

    return params, compute


#: The built-in analyses ``run`` can schedule, by its work unit's kind
#: (:data:`layerstate.work.Work.kind`); an added one (:func:`analysis.registry.added`) is built
#: by :func:`_added`.
ANALYSES: dict[str, Builder] = {"behaviour": _behaviour, "probes": _probes, "mdl": _mdl, "stability": _stability,
                                "ablation": _ablation, "patching": _patching, "interchange": _interchange}


def analysis_of(item: Work, store: Any, exp: Experiment, scheduler: Any,
                device: Device) -> tuple[dict[str, Any], Callable[..., Any]]:
    """The parameters and the computing function of the analysis ``item`` names (:data:`ANALYSES`,
    or an added analysis)."""
    build = ANALYSES.get(str(item.kind))
    entry = registry.analysis(str(item.kind))
    if build is None and entry is not None and entry.compute is not None:
        build = _added
    if build is None:
        raise ValueError(f"unknown analysis {item.kind!r} in unit {item.key!r}")
    return build(item, store, exp, scheduler, device)


def evaluate_claims(store: Any, exp: Experiment, say: Say) -> Any:
    """Evaluate the experiment's claims (if any) and store them under ``results/claims``."""
    if not exp.claims:
        if keep_profiles(store, exp.absent_claims):
            say("no claims of this part's own; kept the profiles its tasks give the grid's profile claims "
                "(results/claim_profiles), for `layerstate combine`")
        else:
            say("no claims declared; skipping statistics of claims")
        return None
    # a design's stages look at the store themselves (their seeds never past its maximum)
    res = evaluate_stored_claims(store, exp.claims, absent=exp.absent_claims, design_look=exp.design is not None)
    for line in present.claim_summaries(res):
        say(line)
    return res
