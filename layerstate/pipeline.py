"""``layerstate run``: train -> capture -> analyse -> claims -> report, resumable per stage.

Every stage skips what is already done (trained runs, captured blocks, stored results), so
re-running after an interruption does only what is missing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from capture.experiment import Experiment, load_experiment

Say = Callable[[str], None]


def _train_one(args: tuple[str, str, int, str]) -> tuple[str, bool, int, float, dict]:
    """Worker: train one run (separate process, one torch thread)."""
    exp_path, store_path, index, device = args
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import warnings

    warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
    from capture.train import train_run
    from store import Store

    exp = load_experiment(exp_path)
    spec = exp.runs()[index]
    res = train_run(Store.open(store_path, mode="r+"), spec, device=device)
    return res.run_id, res.skipped, res.steps, res.seconds, res.accuracy


def train_all(exp_path: str, store_path: str, *, jobs: int = 1, device: str = "cpu", say: Say = print) -> None:
    """Train every run of the experiment, ``jobs`` at a time (processes, one thread each:
    two 1-thread jobs beat one 2-thread job for these small models, NOTES.md)."""
    exp = load_experiment(exp_path)
    n = len(exp.runs())
    tasks = [(exp_path, store_path, i, device) for i in range(n)]
    if jobs <= 1 or device != "cpu":
        results = map(_train_one, tasks)
        _report_training(results, n, say)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        _report_training(pool.map(_train_one, tasks), n, say)


def _report_training(results, n: int, say: Say) -> None:
    for i, (rid, skipped, steps, seconds, acc) in enumerate(results, 1):
        accs = " ".join(f"L{k}={v:.3f}" for k, v in sorted(acc.items()))
        state = "already trained" if skipped else f"{steps} steps, {seconds:.0f}s"
        say(f"[{i}/{n}] {rid}: {state}; accuracy {accs}")


def evaluate_experiment_claims(store, exp: Experiment, say: Say = print):
    """Evaluate the experiment's claims (if any) and store them under ``results/claims``."""
    from analysis.claims import evaluate_claims, parse_claims

    if not exp.claims:
        say("no claims declared; skipping statistics of claims")
        return None
    claims = parse_claims(exp.claims, source=exp.experiment.name)
    probes = _probe_results(store)
    res = evaluate_claims(store, claims, probes=probes)
    store.write_result("claims", res)
    for cid, verdict, est, lo, hi, p, test in zip(res.claim.values, res.verdict.values, res.estimate.values,
                                                  res.lower.values, res.upper.values, res.p_adjusted.values,
                                                  res.test.values, strict=True):
        if verdict == "not evaluable":
            say(f"claim {cid}: {test}")
        else:
            say(f"claim {cid}: {verdict} (estimate {est:+.3f} [{lo:+.3f}, {hi:+.3f}], corrected p={p:.3g})")
    return res


def _probe_results(store):
    """Every stored probe result's layer profiles, merged along ``run`` (None if none)."""
    import xarray as xr

    names = [n for n in store.results() if n.startswith("probes/")]
    if not names:
        return None
    profiles = [store.read_result(n)[["profile"]] for n in names]
    return xr.concat(profiles, dim="run", join="outer", data_vars="all")


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
        runs = [r.run_id for r in exp.runs() if r.task == task]
        t0 = time.perf_counter()
        ds = probe(store, runs=runs, positions=cfg.probe_positions, lengths=cfg.probe_lengths,
                   train_length=cfg.probe_train_length, folds=cfg.probe_folds,
                   method=cfg.probe_method, control=cfg.probe_control, save=True, name=name)
        best = ", ".join(f"{r}:{b}" for r, b in zip(ds.run.values, ds.best_layer.isel(length=0).values,
                                                    strict=True))
        say(f"{name}: {ds.sizes['run']} runs in {time.perf_counter() - t0:.0f}s; best layer {best}")
    return names


def intervene_experiment(store, exp: Experiment, say: Say = print) -> list[str]:
    """Ablations, patching and interchange per task, as configured; skips stored results."""
    from analysis.interventions import run_ablation, run_interchange, run_patching

    cfg = exp.analysis
    done, names = set(store.results()), []
    for task in exp.grid.tasks:
        runs = [r.run_id for r in exp.runs() if r.task == task]
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
    """The main job: every stage of an experiment into ``out/store.zarr`` and ``out/report``."""
    from capture.record import capture_experiment
    from store import Store

    exp_path, out = str(exp_path), Path(out)
    exp = load_experiment(exp_path)
    out.mkdir(parents=True, exist_ok=True)
    store_path = str(out / "store.zarr")
    st = Store.create(store_path, title=exp.experiment.title or exp.experiment.name, exist_ok=True)
    t0 = time.perf_counter()
    say(f"== train ({len(exp.runs())} runs, {jobs} at a time)")
    train_all(exp_path, store_path, jobs=jobs, device=device, say=say)
    st = Store.open(store_path, mode="r+")
    st.consolidate()
    say(f"== capture (lengths {exp.capture.lengths}, {exp.capture.n_sequences} sequences each)")
    res = capture_experiment(st, exp, device=device)
    say(f"captured {len(res)} groups ({sum(r.blocks_written for r in res)} blocks written)")
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
    say(f"report: {index}")
    return index
