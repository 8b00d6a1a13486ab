"""Probing a store: :func:`plan_probes` checks a sweep and builds its dask graph, :func:`probe`
computes it and, when asked, stores the result (:mod:`analysis.probes.results`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import xarray as xr

from analysis.probes import plan as sweep_plan
from store import Store, open_analysis

from .progress import Progress
from .results import runs_by_task, save_probes, storage_name
from .resume import compute_by_run, worth_keeping, writable
from .sweep import ProbePlan, build


def plan_probes(
    store: Any,
    target: str | None = None,
    *,
    runs: Any = None,
    layers: Any = None,
    positions: Any = "all",
    lengths: Any = None,
    train_length: int | None = None,
    folds: int = 5,
    C: float | Sequence[float] | None = None,
    method: str = "exact",
    control: bool | str = "permute",
    seed: int = 0,
    per_sequence: bool = True,
) -> ProbePlan:
    """Check a probe sweep and build its dask graph without computing anything.

    Labels, masks and tokens (small) are read to plan and validate; hidden states stay lazy.
    Arguments are those of :func:`probe`; call ``.compute(scheduler)`` on the result.
    """
    st = Store.open(store) if isinstance(store, str) else store
    mode, pos_list, control_kind = sweep_plan.check_options(positions, method, control, folds, C)
    run_ids = sweep_plan.select_runs(st, runs)
    target = sweep_plan.choose_target(st, run_ids, target)
    return build(
        st,
        target,
        run_ids,
        layers=layers,
        mode=mode,
        positions=pos_list,
        lengths=lengths,
        train_length=train_length,
        folds=int(folds),
        C=sweep_plan.check_C(C),
        method=method,
        control=control_kind,
        seed=int(seed),
        per_sequence=per_sequence,
    )


def probe(
    store: Any,
    target: str | None = None,
    *,
    runs: Any = None,
    layers: Any = None,
    positions: Any = "all",
    lengths: Any = None,
    train_length: int | None = None,
    folds: int = 5,
    C: float | Sequence[float] | None = None,
    method: str = "exact",
    control: bool | str = "permute",
    seed: int = 0,
    per_sequence: bool = True,
    scheduler: Any = None,
    save: bool = False,
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    resume: bool = True,
    say: Callable[[str], None] | None = None,
) -> xr.Dataset:
    """Fit and score linear probes for every selected (run, length, layer, position) cell.

    Parameters
    ----------
    store : Store or str
        The activation store (a path is opened read-only, or read-write when ``save``).
    target : str, optional
        The label to decode; default: the label the runs were trained on.
    runs : None, str, list of str, or dict
        Run ids, or attribute filters for :meth:`Store.select` (``{"arch": ["lstm", "gru"]}``).
    layers : None, str, int or list
        Layer names (``"embed"``, ``"L0"``, ...) or indices; default all.
    positions : {"all", "last", "pooled"} or int or list of int
        ``"all"``: one probe per position (each over the sequences labelled there); a list: those
        positions; ``"last"``: one probe on each sequence's last labelled position; ``"pooled"``:
        one probe on all labelled positions of all sequences (folds still split sequences).
        ``"last"`` and ``"pooled"`` results have no ``position`` dim.
    lengths : list of int, optional
        Sequence lengths; default every stored length.
    train_length : int, optional
        Fit at this length only (cross-validated there) and score the probes at the other
        ``lengths``; positions the train length lacks are scored by its pooled probe (see the
        ``transfer_rule`` attr and ``probe_position``).
    folds : int
        k of the k-fold split by sequence (default 5).
    C : float, list of float, or None
        Inverse L2 strength, scikit-learn's convention (``C * sum(loss) + ||w||^2 / 2``). A list
        is a grid: each cell's C is chosen from it by inner cross-validation (grouped by
        sequence, nested inside the folds that score the probe; lowest held-out log-loss, ties
        within 0.1% to the smaller C, only values whose fits converged), separately for each
        fold's probe, the stored probe and the control task. ``None`` (default) is the grid
        :data:`~analysis.probes.cells.C_GRID` (1e-3 ... 10, one decade apart); a number fixes C.
        The screening solver has no C.
    method : {"exact", "screen", "reference"}
        Solver: the fast lockstep L-BFGS, closed-form shrinkage LDA, or scikit-learn's
        ``LogisticRegression`` one fit at a time. Same outputs.
    control : bool or {"token", "permute", "none"}
        Control labelling for selectivity: ``True``/``"token"`` is Hewitt & Liang's (a fixed random
        class per token type; with 2-6 token types it is often decodable outright, control
        accuracy ~1.0, and selectivity against it says nothing), ``"permute"`` (default, as
        ``layerstate run`` and ``layerstate probe``) shuffles each position's labels across
        sequences, ``False``/``"none"`` skips it.
    scheduler : None, "auto", "threads", "processes", "sync", "local:N", address str, Client or cluster
        Where to compute; see :func:`analysis.compute.compute`. Default: local threads, one BLAS
        thread each, or one-thread worker processes when the sweep is estimated at 20 s of CPU
        or more (the solver's many small numpy calls do not run side by side on threads).
    seed : int
        Seeds the folds and control labels (a run's draws do not depend on which other runs are
        selected).
    per_sequence : bool
        Also return ``correct``/``labelled`` per sequence (for the hierarchical bootstrap;
        default True).
    save : bool
        Store the result under ``results/<name>`` (default :func:`result_name`:
        ``probes/<task>``, or ``probes/<task>.<target>`` for a label other than the trained one;
        when that name holds a result made with other settings, this one goes beside it as
        ``<name>-2`` with a warning, :func:`storage_name`). A ``name`` given is replaced.
    name : str, optional
        The result name when saving.
    attrs : mapping, optional
        Added to the result's attributes (`layerstate run` records there what it was
        computed from).
    progress : Progress, optional
        Told the sweep's size before the first fit and, on a local scheduler, the cells done
        as they finish (:class:`~analysis.probes.progress.Progress`).
    resume : bool
        On a store that can be written and a long sweep of several runs (default): each run's
        part is stored as it finishes, so the same call after an interruption computes only the
        runs it lacks (:mod:`analysis.probes.resume`; the same result as computing all at once;
        a sweep estimated under :data:`~analysis.probes.resume.RESUME_FROM_S` CPU seconds a run
        is cheaper to redo). ``say`` is told when parts are reused.

    Returns
    -------
    xarray.Dataset
        Metrics (``accuracy``, ``balanced_accuracy``, ``log_loss``, ``baseline``,
        ``baseline_log_loss``, ``control_accuracy``, ``selectivity``) with dims ``run, length,
        layer, [position], fold`` and ``n_test``; NaN with ``n_test = 0`` where a length lacks the
        position or nothing is labelled. Probes fitted on every sequence of a fit length
        (``weights (run, fit_length, layer, [position], class, feature)``, ``intercept``,
        ``scaler_mean``, ``scaler_scale``, ``n_iter``, ``converged``) and how C was chosen
        (``C`` of the stored probe, ``fold_C``/``control_fold_C`` per fold; with a grid also
        ``cv_log_loss`` and ``path_converged`` along ``C_grid``): raw-feature logits are
        ``hidden @ weights.T + intercept``; runs narrower than the widest are NaN-padded
        (``n_features``). With ``train_length``: ``probe_position`` and ``pooled_weights``.
        ``correct``/``labelled (..., sequence)`` per-sequence counts; ``profile``,
        ``control_profile``, ``selectivity_profile (run, length, layer)`` and ``best_layer``.
        Attributes record the method, C, folds, seed, control and every rule used.

    Raises
    ------
    KeyError
        A target label or run that does not exist (the message lists those that do).
    ValueError
        No run matches; a layer/position/length out of range; a cell whose training folds hold
        a single class (the message names the cells); NaN/Inf hidden states (named by run,
        length, layer).
    """
    if isinstance(store, str):  # a store that cannot be written keeps its results beside it
        store = open_analysis(store, write=save)
    def plan_of(selected: Any) -> ProbePlan:
        return plan_probes(store, target, runs=selected, layers=layers, positions=positions, lengths=lengths,
                           train_length=train_length, folds=folds, C=C, method=method, control=control,
                           seed=seed, per_sequence=per_sequence)

    plan = plan_of(runs)
    if resume and worth_keeping(plan) and writable(store):
        ds = compute_by_run(store, plan, plan_of, scheduler=scheduler, progress=progress, say=say)
    else:
        ds = plan.compute(scheduler, progress=progress)
    ds.attrs.update(task_attrs(store, list(ds.run.values)))
    ds.attrs.update(attrs or {})
    if save:
        if name is None:  # the default name: a stored result with other settings is kept
            name, note = storage_name(store, ds)
            if note:
                warnings.warn(note, stacklevel=2)
        save_probes(store, ds, name)
    return ds


def task_attrs(store: Any, runs: list[str]) -> dict[str, str]:
    """``task`` (when the runs share one) and ``trained_target`` (the label they were trained on,
    when they declare one): what the result's default name says."""
    tasks = runs_by_task(store, [str(r) for r in runs])
    if len(tasks) != 1:
        return {}
    out = {"task": next(iter(tasks))}
    try:
        out["trained_target"] = sweep_plan.choose_target(store, [str(r) for r in runs], None)
    except LookupError:
        pass
    return out
