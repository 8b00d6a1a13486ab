"""``layerstate run``: train -> capture -> analyse -> claims -> report, resumable per stage.

Every stage skips what is already done (trained runs, captured blocks, stored results), so
re-running after an interruption does only what is missing. A stored result is reused only
if it was computed from the experiment's present runs and parameters (recorded in its
``pipeline_request`` attribute): a grid given more seeds, a run trained again or changed
analysis settings make it out of date, and it is computed again (said in one line). The
experiment, claims included, is validated before anything is created
(:func:`layerstate.experiment.load_experiment`).
Result lines come from :mod:`layerstate.present`.

Where the work runs is one ``scheduler`` (:mod:`analysis.compute`), the same for every stage:

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
cluster resumes. Every task pins one
BLAS and torch thread (training then uses its ``[train] threads``), here as on the workers,
so the stored arrays are bit-identical whatever the scheduler.
"""

from __future__ import annotations

import multiprocessing as mp
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerstate import present
from layerstate.runtime import one_thread, torch_threads
from store.errors import LayerstateError

if TYPE_CHECKING:
    from capture.experiment import CapturePlan, RunSpec
    from capture.record import CaptureResult
    from capture.train import TrainResult
    from layerstate.experiment import Experiment

Say = Callable[[str], None]
#: ``progress(description, total_steps)`` -> a ``callback(step, point)`` for one run's training.
TrainProgress = Callable[[str, int], Callable[[int, dict], None]]
#: ``progress(description, total_sequences)`` -> a ``callback(n_sequences_done)`` for one capture.
CaptureProgress = Callable[[str, int], Callable[[int], None]]

#: Seconds the driver waits for a cluster's first worker, and for every worker to read the
#: store's token (:func:`check_store_shared`).
WORKER_WAIT_S = 60.0
#: Prefix of the token file :func:`check_store_shared` writes into a store's root (and removes).
TOKEN_PREFIX = ".layerstate-shared-"


class StoreNotSharedError(LayerstateError):
    """The workers of a dask cluster cannot see the store the driver writes to."""


def store_url(path: str | Path) -> str:
    """The store's address as every process should use it: a local path made absolute
    (workers need not share the driver's working directory); URLs unchanged."""
    from store.location import Location

    loc = Location(str(path))
    return str(loc.local_path) if loc.is_local else loc.url


# ----------------------------------------------------------------------------- units of work
def _train_one(spec: RunSpec, url: str, device: str,
               progress: Callable[[int, dict], None] | None = None,
               storage_options: dict | None = None) -> TrainResult:
    """Train one run; torch's thread count (which training sets) is restored afterwards."""
    from capture.train import train_run
    from store import Store

    with torch_threads():
        st = Store.open(url, mode="r+", storage_options=storage_options)
        return train_run(st, spec, device=device, progress=progress)


def _train_in_worker(args: tuple[RunSpec, str, str, dict | None]) -> TrainResult:
    """A process or cluster worker: one run, one BLAS and torch thread unless [train]
    threads says more."""
    spec, url, device, storage_options = args
    with one_thread():
        return _train_one(spec, url, device, storage_options=storage_options)


@contextmanager
def _task_writer(store: Any, run_id: str) -> Iterator[None]:
    """A cluster task's hold on run ``run_id``'s writer lock (its lease and local lock) for
    the whole task; the library's writers inside take it again (re-entrant).

    Unlike the library, which refuses a second writer at once, a task waits out a lease held
    by another host (:func:`store.lease.acquire_waiting`): dask runs the task of a worker
    that died again elsewhere, and the dead worker's lease can only expire from there. A
    lease that is renewed meanwhile (a live writer) is refused in one line, as is a live
    writer on this host."""
    from store.lease import acquire_waiting

    lease = acquire_waiting(store.lock(run_id).lease)
    try:
        with store.lock(run_id):
            yield
    finally:
        lease.release()


def train_task(spec: RunSpec, url: str, storage_options: dict | None, device: str) -> TrainResult:
    """One run's training as a cluster task: opens the store at ``url`` itself, and waits
    out a lease that another host's dead worker left on the run (:func:`_task_writer`)."""
    from store import Store

    with one_thread():
        st = Store.open(url, mode="r+", storage_options=storage_options)
        with _task_writer(st, spec.run_id):
            return _train_one(spec, url, device, storage_options=storage_options)


def capture_task(spec: RunSpec, url: str, storage_options: dict | None, kind: str, length: int,
                 device: str, after: Any = None) -> CaptureResult:
    """One (run, length) capture as a cluster task (``kind`` ``"len"``, or ``"cf"`` for the
    counterfactual twins): opens the store itself, checks that the run was trained from
    this experiment, rebuilds the model from its stored weights and captures (resumable).
    ``after`` is the result of the task this one waits for (the run's training or its
    previous capture), unused."""
    from capture.record import capture_counterfactuals, capture_length, check_capturable
    from store import Store

    cap = spec.exp.capture
    with one_thread():
        st = Store.open(url, mode="r+", storage_options=storage_options)
        check_capturable(st, spec)
        with _task_writer(st, spec.run_id):
            if kind == "cf":
                return capture_counterfactuals(st, spec.run_id, length,
                                               n_pairs=cap.counterfactual_pairs, device=device)
            return capture_length(st, spec.run_id, length, n_sequences=cap.n_sequences,
                                  dtype=cap.dtype, sites=cap.sites, batch_size=cap.batch_size,
                                  device=device)


def _captures(plan: CapturePlan) -> list[tuple[str, int]]:
    """Every (kind, length) one run is captured at, in the order of a local capture."""
    cap = plan.capture
    return [("len", L) for L in cap.lengths] + (
        [("cf", L) for L in cap.counterfactual_lengths] if cap.counterfactual_pairs else [])


# ----------------------------------------------------------------------------- the cluster
def check_store_shared(client: Any, url: str, storage_options: dict | None = None) -> int:
    """Make sure every worker of ``client``'s cluster sees the store at ``url``.

    The driver writes a random token into the store's root, each worker reads it back
    through the same URL and storage options, and the token is removed. A worker that reads
    nothing (a local directory on another host, a ``memory://`` store) or another token (a
    different directory at the same path) stops the work before it starts. Returns the number
    of workers checked (waiting up to :data:`WORKER_WAIT_S` for a first one).

    Raises
    ------
    StoreNotSharedError
        Naming the store, what a worker saw, and the fix: a shared filesystem every worker
        mounts at the same path, or an object-store URL.
    SchedulerError
        No worker joined the cluster in time, or the workers did not answer.
    """
    from analysis.compute import SchedulerError
    from store.location import Location

    address = client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except Exception:  # noqa: BLE001 - distributed's timeout type varies by version
        raise SchedulerError(
            f"no dask worker joined the scheduler at {address} within {WORKER_WAIT_S:g} s; "
            f"start some (`dask worker {address}`)"
        ) from None
    token = secrets.token_hex(16)
    name = TOKEN_PREFIX + token
    fs, root = Location(url, storage_options or {}).filesystem()
    path = f"{root.rstrip('/')}/{name}"
    fs.pipe_file(path, token.encode())
    try:
        workers = sorted(client.nthreads())
        futures = [client.submit(_read_token, url, storage_options, name, token, workers=[w],
                                 allow_other_workers=False, pure=False, key=f"layerstate-share-{w}-{token}")
                   for w in workers]
        deadline = time.monotonic() + WORKER_WAIT_S
        answers = []
        for fut in futures:
            try:
                answers.append(fut.result(timeout=max(deadline - time.monotonic(), 0.1)))
            except TimeoutError:
                client.cancel(futures)
                raise SchedulerError(
                    f"dask workers at {address} did not answer within {WORKER_WAIT_S:g} s (busy "
                    "with other work?); run again when they are free"
                ) from None
        seen = dict(zip(workers, answers, strict=True))
    finally:
        try:
            fs.rm_file(path)
        except Exception:  # noqa: BLE001 - a token left behind is harmless (zarr ignores it)
            pass
    blind = {w: why for w, why in seen.items() if why}
    if blind:
        worker, why = next(iter(blind.items()))
        raise StoreNotSharedError(
            f"the store {url} is not the same store for every dask worker ({len(blind)} of "
            f"{len(seen)} could not read what this process wrote there; {worker}: {why}); put it "
            "on a shared filesystem every worker mounts at the same path, or use an object-store URL "
            "(e.g. s3://bucket/acts.zarr with -S KEY=VALUE options)"
        )
    return len(seen)


def _read_token(url: str, storage_options: dict | None, name: str, token: str) -> str:
    """On a worker: '' when the store's token reads back, else what went wrong (one line)."""
    from store.location import Location

    try:
        fs, root = Location(url, storage_options or {}).filesystem()
        found = fs.cat_file(f"{root.rstrip('/')}/{name}").decode(errors="replace")
    except Exception as exc:  # noqa: BLE001 - any failure means the worker cannot see it
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "" if found == token else "a different store answers at that address"


def _cancel_on_error(client: Any, futures: list) -> Callable[[], None]:
    def cancel() -> None:
        try:
            client.cancel(futures)
        except Exception:  # noqa: BLE001 - a closing cluster cancels them anyway
            pass

    return cancel


def _cluster_lost(client: Any, exc: BaseException, url: str) -> LayerstateError | None:
    """A one-line error if ``exc`` means the client lost its cluster while waiting for the
    training and capture tasks (:func:`analysis.compute.cluster_lost`), else None (a task's
    own error is left as it is)."""
    from analysis.compute import cluster_lost

    return cluster_lost(client, exc,
                        f"what finished is kept in {url} (trained runs, recorded blocks)")


@contextmanager
def _waiting(client: Any, futures: list, url: str) -> Iterator[None]:
    """Around waiting for ``futures``: on any error they are cancelled, and a cluster that
    went away (:func:`_cluster_lost`) becomes one line saying how to resume."""
    try:
        yield
    except BaseException as exc:
        lost = _cluster_lost(client, exc, url)
        if lost is not None:
            raise lost from None
        _cancel_on_error(client, futures)()
        raise


def _submit_training(client: Any, specs: list[RunSpec], url: str, storage_options: dict | None,
                     device: str) -> dict[str, Any]:
    tag = secrets.token_hex(4)
    return {spec.run_id: client.submit(train_task, spec, url, storage_options, device, pure=False,
                                       key=f"train-{spec.run_id}-{tag}")
            for spec in specs}


def _submit_capture(client: Any, specs: list[RunSpec], url: str, storage_options: dict | None,
                    device: str, trained: dict[str, Any] | None = None) -> list[Any]:
    """One task per (run, kind, length); the tasks of one run in a chain that starts after
    its training (when ``trained`` holds its future), so one run has one writer at a time."""
    tag = secrets.token_hex(4)
    futures = []
    for spec in specs:
        before = (trained or {}).get(spec.run_id)
        for kind, length in _captures(spec.exp):
            before = client.submit(capture_task, spec, url, storage_options, kind, length, device,
                                   after=before, pure=False,
                                   key=f"capture-{spec.run_id}-{kind}{length}-{tag}")
            futures.append(before)
    return futures


def _trained_as_completed(client: Any, futures: dict[str, Any]) -> Iterator[TrainResult]:
    from distributed import as_completed

    for fut in as_completed(list(futures.values()), loop=client.loop):
        yield fut.result()


def _where(client: Any) -> str:
    return f"the dask cluster at {client.scheduler.address} ({len(client.nthreads())} workers)"


# ----------------------------------------------------------------------------- stages
def train_experiment(
    exp: CapturePlan,
    store_path: str,
    *,
    jobs: int = 1,
    device: str = "cpu",
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
    """
    from analysis.compute import connect, is_local
    from store import Store

    url = store_url(store_path)
    specs = list(runs) if runs is not None else exp.runs()
    with connect(scheduler) as sched:
        if not is_local(sched):
            Store.open(url, mode="r+", storage_options=storage_options)  # one line if it is not one
            check_store_shared(sched, url, storage_options)
            futures = _submit_training(sched, specs, url, storage_options, device)
            with _waiting(sched, list(futures.values()), url):
                yield from _trained_as_completed(sched, futures)
            return
        if jobs <= 1 or device != "cpu":
            for i, spec in enumerate(specs, 1):
                step = progress(f"[{i}/{len(specs)}] {spec.run_id}", spec.train.steps) if progress else None
                yield _train_one(spec, url, device, step, storage_options)
            return
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            yield from pool.map(_train_in_worker,
                                [(spec, url, device, storage_options) for spec in specs])


def capture_experiment(
    exp: CapturePlan,
    store_path: str,
    *,
    device: str = "cpu",
    scheduler: Any = "threads",
    storage_options: dict | None = None,
    progress_factory: CaptureProgress | None = None,
) -> list[CaptureResult]:
    """Capture every trained run of the experiment at every configured length (resumable).

    Local schedulers: in this process, one torch thread, one consolidation at the end
    (``progress_factory`` gives a progress callback per group). Any other: one task per
    (run, length) on the cluster, after :func:`check_store_shared`; the store is
    consolidated here once they are done. Results in grid order either way.
    """
    from analysis.compute import connect, is_local
    from capture.record import capture_experiment as capture_here
    from store import Store

    url = store_url(store_path)
    with connect(scheduler) as sched:
        if is_local(sched):
            with one_thread():
                st = Store.open(url, mode="r+", storage_options=storage_options)
                return capture_here(st, exp, device=device, progress_factory=progress_factory)
        Store.open(url, mode="r+", storage_options=storage_options)  # one line if it is not one
        check_store_shared(sched, url, storage_options)
        futures = _submit_capture(sched, exp.runs(), url, storage_options, device)
        with _waiting(sched, futures, url):
            results = sched.gather(futures)
    Store.open(url, mode="r+", storage_options=storage_options).consolidate()
    return results


def evaluate_experiment_claims(store, exp: Experiment, say: Say = print):
    """Evaluate the experiment's claims (if any) and store them under ``results/claims``."""
    from analysis.claims import evaluate_stored_claims

    if not exp.claims:
        say("no claims declared; skipping statistics of claims")
        return None
    res = evaluate_stored_claims(store, exp.claims, absent=exp.absent_claims)
    for line in present.claim_summaries(res):
        say(line)
    return res


def probe_experiment(store, exp: Experiment, say: Say = print, scheduler: Any = None) -> list[str]:
    """Probe every task's runs (one result per task: ``probes/<task>``); skips stored ones.
    ``scheduler``: where the probes are fitted (:func:`analysis.compute.compute`)."""
    from analysis.probes import probe

    cfg = exp.analysis
    names = []
    for task in exp.grid.tasks:
        name = f"probes/{task}"
        names.append(name)
        runs = [r.run_id for r in exp.plan.runs() if r.task == task]
        params: dict[str, Any] = dict(
            positions=cfg.probe_positions, lengths=cfg.probe_lengths,
            train_length=cfg.probe_train_length, folds=cfg.probe_folds,
            method=cfg.probe_method, control=cfg.probe_control)
        request = result_request(store, runs, params)
        if stored_answers(store, name, request, say):
            continue
        t0 = time.perf_counter()
        ds = probe(store, runs=runs, **params, save=True, name=name, scheduler=scheduler,
                   attrs={REQUEST_ATTR: request})
        say(present.probe_summary(name, ds, time.perf_counter() - t0))
    return names


def intervene_experiment(store, exp: Experiment, say: Say = print, scheduler: Any = "threads") -> list[str]:
    """Ablations, patching and interchange per task, as configured; skips stored results.
    ``scheduler``: where they are computed (:func:`analysis.compute.compute`)."""
    from analysis.interventions import run_ablation, run_interchange, run_patching

    cfg = exp.analysis
    names: list[str] = []
    for task in exp.grid.tasks:
        runs = [r.run_id for r in exp.plan.runs() if r.task == task]
        # (result name, its parameters, the function computing and storing it)
        jobs: list[tuple[str, dict, Callable[..., Any]]] = []
        if cfg.ablate:
            params: dict[str, Any] = dict(
                settings=cfg.ablate_settings, lengths=cfg.ablate_lengths,
                fit_length=cfg.ablate_fit_length or exp.train.length,
                mode=cfg.ablate_mode, refit_rows=cfg.ablate_refit_rows)
            jobs.append((f"ablation/{task}", params, lambda p, a, task=task, runs=runs: run_ablation(
                store, task, runs=runs, **p, scheduler=scheduler, attrs=a)))
        has_pairs = all(cfg.patch_length in store.lengths(r, kind="cfclean") for r in runs)
        if cfg.patch and has_pairs:
            params = dict(length=cfg.patch_length, positions=cfg.patch_positions)
            jobs.append((f"patching/{task}", params, lambda p, a, task=task, runs=runs: run_patching(
                store, p["length"], task, runs=runs, positions=p["positions"],
                scheduler=scheduler, attrs=a)))
        if cfg.interchange and has_pairs and task in ("assoc_recall", "treecall"):
            params = dict(length=cfg.patch_length)
            jobs.append((f"interchange/{task}", params, lambda p, a, task=task, runs=runs: run_interchange(
                store, p["length"], task, runs=runs, scheduler=scheduler, attrs=a)))
        if (cfg.patch or cfg.interchange) and not has_pairs:
            say(f"{task}: no counterfactual pairs at length {cfg.patch_length}; set "
                "[capture] counterfactual_pairs and counterfactual_lengths to patch")
        for name, params, job in jobs:
            names.append(name)
            request = result_request(store, runs, params)
            if stored_answers(store, name, request, say):
                continue
            t0 = time.perf_counter()
            job(params, {REQUEST_ATTR: request})
            say(f"{name}: stored in {time.perf_counter() - t0:.0f}s")
    return names


# ----------------------------------------------------------------------------- stored results
#: The attribute in which `layerstate run` records what a result was computed from.
REQUEST_ATTR = "pipeline_request"


def result_request(store, runs: Sequence[str], params: dict) -> dict:
    """What a pipeline result is computed from: its parameters and each run's identity (its
    config hash and when it was created, so a run trained again is a different run), as
    plain JSON (the form it takes in the stored attributes)."""
    import json

    ident = {}
    for r in runs:
        a = store.run_attrs(r)
        ident[r] = {"config_hash": a.get("config_hash"), "created": a.get("created")}
    return json.loads(json.dumps({"runs": ident, "params": params}))


def stored_answers(store, name: str, request: dict, say: Say) -> bool:
    """Whether the stored result ``name`` was computed from ``request`` (then it is reused).

    A result stored from other runs (an experiment given more seeds, a run trained again) or
    with other parameters is stale: this says why in one line and returns False, and the
    caller computes it again (a result is derived data, recomputable from the store)."""
    if name not in store.results():
        return False
    stored = store.result_attrs(name).get(REQUEST_ATTR)
    why = _staleness(stored, request)
    if why is None:
        say(f"{name}: already stored")
        return True
    say(f"{name}: the stored result is out of date ({why}); computing it again")
    return False


def _staleness(stored: dict | None, request: dict) -> str | None:
    if not isinstance(stored, dict):
        return "it has no record of the runs and parameters it came from"
    old, new = stored.get("runs", {}), request["runs"]
    parts = []
    added, dropped = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    again = sorted(r for r in set(new) & set(old) if old[r] != new[r])
    for what, ids in (("it lacks {n} of the experiment's runs", added),
                      ("it covers {n} {runs} the experiment no longer has", dropped),
                      ("{n} {runs} trained again since it was computed", again)):
        if ids:
            shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
            runs = "run" if len(ids) == 1 else "runs"
            parts.append(what.format(n=len(ids), runs=runs) + f": {shown}")
    changed = sorted(k for k in set(stored.get("params", {})) | set(request["params"])
                     if stored.get("params", {}).get(k) != request["params"].get(k))
    if changed:
        parts.append("its parameters differ: " + ", ".join(
            f"{k} {stored.get('params', {}).get(k)!r} -> {request['params'].get(k)!r}"
            for k in changed))
    return "; ".join(parts) if parts else None


def run_experiment(
    exp_path: str | Path,
    out: str | Path,
    *,
    store: str | None = None,
    storage_options: dict | None = None,
    scheduler: Any = "auto",
    jobs: int = 2,
    device: str = "cpu",
    tasks: Sequence[str] | None = None,
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
    """
    from analysis.compute import check, connect, is_local
    from layerstate.experiment import load_experiment
    from store import Store

    exp = load_experiment(exp_path)
    if tasks:
        whole = len(exp.claims)
        exp = exp.part(tasks)
        say(f"part of {exp_path}: tasks {', '.join(exp.grid.tasks)}; {len(exp.plan.runs())} runs, "
            f"{len(exp.claims)} of its {whole} claims (those reading only these tasks; the other "
            f"{whole - len(exp.claims)} stay in the Holm correction with p = 1)")
    check(scheduler)
    t0 = time.perf_counter()
    with connect(scheduler, say=say) as sched:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        url = store_url(store if store is not None else out / "store.zarr")
        Store.create(url, title=exp.experiment.title or exp.experiment.name, exist_ok=True,
                     storage_options=storage_options)
        specs = exp.plan.runs()
        n = len(specs)
        cap = exp.capture
        if is_local(sched):
            say(f"== train ({n} runs, {jobs} at a time)")
            for i, res in enumerate(train_experiment(exp.plan, url, jobs=jobs, device=device,
                                                     storage_options=storage_options), 1):
                say(present.training_line(res, i, n))
            Store.open(url, mode="r+", storage_options=storage_options).consolidate()
            say(f"== capture (lengths {cap.lengths}, {cap.n_sequences} sequences each)")
            captured = capture_experiment(exp.plan, url, device=device, storage_options=storage_options)
        else:
            captured = _train_and_capture_on(sched, exp.plan, url, storage_options, device, say)
        say(present.capture_line(captured))
        st = Store.open(url, mode="r+", storage_options=storage_options)
        st.consolidate()
        if exp.analysis.probe:
            say(f"== probes ({exp.analysis.probe_positions} positions, {exp.analysis.probe_folds}-fold by sequence)")
            probe_experiment(st, exp, say, scheduler=sched)
        if exp.analysis.ablate or exp.analysis.patch or exp.analysis.interchange:
            say("== interventions")
            intervene_experiment(st, exp, say, scheduler=sched)
    say("== claims")
    evaluate_experiment_claims(st, exp, say)
    say("== report")
    from reports import build_report

    index = build_report(Store.open(url, storage_options=storage_options), out / "report", force=True,
                         experiment=exp.model_dump(mode="json"))
    say(f"done in {time.perf_counter() - t0:.0f}s: store {url}")
    say(present.report_line(index))
    if tasks:
        say(f"this part's claims were corrected with the other parts' tests at p = 1; once every part has run, "
            f"`layerstate combine {url} OTHER_PARTS... --claims {exp_path}` gives one verdict table")
    return index


def _train_and_capture_on(client: Any, plan: CapturePlan, url: str, storage_options: dict | None,
                          device: str, say: Say) -> list[CaptureResult]:
    """Training and capture as tasks on a cluster, each run's captures starting as soon as
    it is trained; a line per trained run as it finishes."""
    specs = plan.runs()
    n_workers = check_store_shared(client, url, storage_options)
    say(f"== train and capture ({len(specs)} runs; lengths {plan.capture.lengths}, "
        f"{plan.capture.n_sequences} sequences each) on {_where(client)}; {n_workers} workers "
        f"see {url}")
    trained = _submit_training(client, specs, url, storage_options, device)
    captures = _submit_capture(client, specs, url, storage_options, device, trained)
    with _waiting(client, [*trained.values(), *captures], url):
        for i, res in enumerate(_trained_as_completed(client, trained), 1):
            say(present.training_line(res, i, len(specs)))
        return client.gather(captures)
