"""``layerstate run``: train -> capture -> analyse -> claims -> report, resumable per stage.

Every stage skips what is already done (trained runs, captured blocks, stored results), so
re-running after an interruption does only what is missing. The experiment, claims
included, is validated before anything is created (:func:`layerstate.experiment.load_experiment`).
Result lines come from :mod:`layerstate.present`.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from layerstate import present
from layerstate.runtime import one_thread, torch_threads

if TYPE_CHECKING:
    from capture.experiment import RunSpec
    from capture.train import TrainResult
    from layerstate.experiment import Experiment

Say = Callable[[str], None]
#: ``progress(description, total_steps)`` -> a ``callback(step, point)`` for one run's training.
TrainProgress = Callable[[str, int], Callable[[int, dict], None]]


def _train_one(spec: RunSpec, store_path: str, device: str,
               progress: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Train one run; torch's thread count (which training sets) is restored afterwards."""
    from capture.train import train_run
    from store import Store

    with torch_threads():
        return train_run(Store.open(store_path, mode="r+"), spec, device=device, progress=progress)


def _train_in_worker(args: tuple[RunSpec, str, str]) -> TrainResult:
    """Worker process: one run, one BLAS and torch thread unless [train] threads says more."""
    with one_thread():
        return _train_one(*args)


def train_experiment(
    exp: Experiment,
    store_path: str,
    *,
    jobs: int = 1,
    device: str = "cpu",
    progress: TrainProgress | None = None,
) -> Iterator[TrainResult]:
    """Train every run of the experiment into ``store_path`` (skipping trained ones).

    ``jobs`` > 1 trains that many runs at a time in processes, one thread each (two 1-thread
    jobs beat one 2-thread job for these small models, docs/measured.md, "Threads");
    ``progress`` is used only in-process. Yields each run's result, in grid order.
    """
    specs = exp.plan.runs()
    if jobs <= 1 or device != "cpu":
        for i, spec in enumerate(specs, 1):
            step = progress(f"[{i}/{len(specs)}] {spec.run_id}", spec.train.steps) if progress else None
            yield _train_one(spec, store_path, device, step)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        yield from pool.map(_train_in_worker, [(spec, store_path, device) for spec in specs])


def evaluate_experiment_claims(store, exp: Experiment, say: Say = print):
    """Evaluate the experiment's claims (if any) and store them under ``results/claims``."""
    from analysis.claims import evaluate_stored_claims

    if not exp.claims:
        say("no claims declared; skipping statistics of claims")
        return None
    res = evaluate_stored_claims(store, exp.claims)
    for line in present.claim_summaries(res):
        say(line)
    return res


def probe_experiment(store, exp: Experiment, say: Say = print) -> list[str]:
    """Probe every task's runs (one result per task: ``probes/<task>``); skips stored ones."""
    from analysis.probes import probe

    cfg = exp.analysis
    done = set(store.results())
    names = []
    for task in exp.grid.tasks:
        name = f"probes/{task}"
        names.append(name)
        if name in done:
            say(f"{name}: already stored")
            continue
        runs = [r.run_id for r in exp.plan.runs() if r.task == task]
        t0 = time.perf_counter()
        ds = probe(store, runs=runs, positions=cfg.probe_positions, lengths=cfg.probe_lengths,
                   train_length=cfg.probe_train_length, folds=cfg.probe_folds,
                   method=cfg.probe_method, control=cfg.probe_control, save=True, name=name)
        say(present.probe_summary(name, ds, time.perf_counter() - t0))
    return names


def intervene_experiment(store, exp: Experiment, say: Say = print) -> list[str]:
    """Ablations, patching and interchange per task, as configured; skips stored results."""
    from analysis.interventions import run_ablation, run_interchange, run_patching

    cfg = exp.analysis
    done, names = set(store.results()), []
    for task in exp.grid.tasks:
        runs = [r.run_id for r in exp.plan.runs() if r.task == task]
        jobs = []
        if cfg.ablate:
            jobs.append((f"ablation/{task}", lambda runs=runs, task=task: run_ablation(
                store, task, runs=runs, settings=cfg.ablate_settings, lengths=cfg.ablate_lengths,
                fit_length=cfg.ablate_fit_length or exp.train.length, mode=cfg.ablate_mode,
                refit_rows=cfg.ablate_refit_rows)))
        has_pairs = all(cfg.patch_length in store.lengths(r, kind="cfclean") for r in runs)
        if cfg.patch and has_pairs:
            jobs.append((f"patching/{task}", lambda runs=runs, task=task: run_patching(
                store, cfg.patch_length, task, runs=runs, positions=cfg.patch_positions)))
        if cfg.interchange and has_pairs and task in ("assoc_recall", "treecall"):
            jobs.append((f"interchange/{task}", lambda runs=runs, task=task: run_interchange(
                store, cfg.patch_length, task, runs=runs)))
        if (cfg.patch or cfg.interchange) and not has_pairs:
            say(f"{task}: no counterfactual pairs at length {cfg.patch_length}; set "
                "[capture] counterfactual_pairs and counterfactual_lengths to patch")
        for name, job in jobs:
            names.append(name)
            if name in done:
                say(f"{name}: already stored")
                continue
            t0 = time.perf_counter()
            job()
            say(f"{name}: stored in {time.perf_counter() - t0:.0f}s")
    return names


def run_experiment(
    exp_path: str | Path,
    out: str | Path,
    *,
    jobs: int = 2,
    device: str = "cpu",
    say: Say = print,
) -> Path:
    """The main job: every stage of an experiment into ``out/store.zarr`` and ``out/report``.

    A malformed experiment or claim is refused before anything is created or trained.
    """
    from capture.record import capture_experiment
    from layerstate.experiment import load_experiment
    from store import Store

    exp = load_experiment(exp_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store_path = str(out / "store.zarr")
    Store.create(store_path, title=exp.experiment.title or exp.experiment.name, exist_ok=True)
    t0 = time.perf_counter()
    n = len(exp.plan.runs())
    say(f"== train ({n} runs, {jobs} at a time)")
    for i, res in enumerate(train_experiment(exp, store_path, jobs=jobs, device=device), 1):
        say(present.training_line(res, i, n))
    st = Store.open(store_path, mode="r+")
    st.consolidate()
    say(f"== capture (lengths {exp.capture.lengths}, {exp.capture.n_sequences} sequences each)")
    say(present.capture_line(capture_experiment(st, exp.plan, device=device)))
    if exp.analysis.probe:
        say(f"== probes ({exp.analysis.probe_positions} positions, {exp.analysis.probe_folds}-fold by sequence)")
        probe_experiment(st, exp, say)
    if exp.analysis.ablate or exp.analysis.patch or exp.analysis.interchange:
        say("== interventions")
        intervene_experiment(st, exp, say)
    say("== claims")
    evaluate_experiment_claims(st, exp, say)
    say("== report")
    from reports import build_report

    index = build_report(Store.open(store_path), out / "report", force=True,
                         experiment=exp.model_dump(mode="json"))
    say(f"done in {time.perf_counter() - t0:.0f}s: store {store_path}")
    say(present.report_line(index))
    return index
