"""Linear probes over every layer, position and length of a store, with honest evaluation.

For every selected (run, length, layer, position) cell -- or position pool -- an L2-regularised
logistic-regression probe (binary or multinomial, scikit-learn's model) is fitted on standardised
hidden states (float16 cast to float32 first) and scored on held-out sequences::

    from analysis.probes import probe
    ds = probe("acts.zarr", target="state", positions="all")      # an xarray.Dataset
    ds.accuracy.mean(["fold", "position"]).sel(run="lstm-s3-s0")  # readability across layers

What is measured, per cell and fold (dims ``run, length, layer, position, fold``):
``accuracy``, ``balanced_accuracy``, ``log_loss``, the training fold's majority-class
``baseline`` (and ``baseline_log_loss``), the same probe on a control labelling
(``control_accuracy``) and ``selectivity = accuracy - control_accuracy`` (Hewitt & Liang).
Folds split *sequences*, never positions of one sequence across sides. Per run: ``profile``
(mean accuracy per layer) and ``best_layer``. The probe fitted on all sequences is kept as
``weights``/``intercept`` in raw feature space (for ablations), with its scaler. ``correct`` and
``labelled`` count, per sequence, the held-out hits and labelled positions: the per-sequence sums
that :mod:`analysis.stats` resamples.

Regularisation is chosen, not fixed: by default each cell's C comes from a small grid by inner
cross-validation grouped by sequence and nested inside the scoring folds (the control task too),
and only converged fits are eligible; the chosen C is part of the result (``C``, ``fold_C``).
Hewitt & Liang (2019) show why it matters: a probe's capacity changes what "readable" means.

Three solvers, one signature, so that the fast path is tested against its reference:
``method="exact"`` (lockstep preconditioned L-BFGS along the C path, the default),
``"reference"`` (scikit-learn, one fit at a time) and ``"screen"`` (closed-form shrinkage LDA,
no C).
The sweep is a dask graph over the store's chunks, one layer and a block of positions at a time;
:func:`analysis.compute.compute` runs it (local threads, a local cluster, a ``dask.distributed``
cluster or scheduler address; one BLAS thread per task).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr

from . import plan as _plan
from .cells import C_GRID, classification_metrics, fit_cell, fit_cells, score_cell
from .solvers import (
    Params,
    fit_exact,
    fit_reference,
    fit_screen,
    logits,
    path_exact,
    path_reference,
)
from .sweep import ProbePlan, build

__all__ = [
    "C_GRID",
    "Params",
    "ProbePlan",
    "classification_metrics",
    "fit_cell",
    "fit_cells",
    "find_result",
    "fit_exact",
    "fit_reference",
    "fit_screen",
    "logits",
    "path_exact",
    "path_reference",
    "plan_probes",
    "probe",
    "result_name",
    "runs_by_task",
    "save_probes",
    "setting_differences",
    "storage_name",
    "score_cell",
]


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
    control: bool | str = True,
    seed: int = 0,
    per_sequence: bool = True,
) -> ProbePlan:
    """Check a probe sweep and build its dask graph without computing anything.

    Labels, masks and tokens (small) are read to plan and validate; hidden states stay lazy.
    Arguments are those of :func:`probe`; call ``.compute(scheduler)`` on the result.
    """
    from store import Store

    st = Store.open(store) if isinstance(store, str) else store
    mode, pos_list, control_kind = _plan.check_options(positions, method, control, folds, C)
    run_ids = _plan.select_runs(st, runs)
    target = _plan.choose_target(st, run_ids, target)
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
        C=_plan.check_C(C),
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
    control: bool | str = True,
    scheduler: Any = None,
    seed: int = 0,
    per_sequence: bool = True,
    save: bool = False,
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
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
        accuracy ~1.0, and selectivity against it says nothing), ``"permute"`` shuffles each
        position's labels across sequences (what ``layerstate run`` and ``layerstate probe``
        use by default), ``False``/``"none"`` skips it.
    scheduler : None, "auto", "threads", "processes", "sync", "local:N", address str, Client or cluster
        Where to compute; see :func:`analysis.compute.compute`. Default: local threads, one BLAS
        thread each, or one-thread worker processes when the sweep is estimated at 20 s of CPU
        or more (the solver's many small numpy calls do not run side by side on threads).
    seed : int
        Seeds the folds and control labels (a run's draws do not depend on which other runs are
        selected).
    per_sequence : bool
        Also return ``correct``/``labelled`` per sequence (for the hierarchical bootstrap).
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
    from store import open_analysis

    if isinstance(store, str):  # a store that cannot be written keeps its results beside it
        store = open_analysis(store, write=save)
    plan = plan_probes(
        store,
        target,
        runs=runs,
        layers=layers,
        positions=positions,
        lengths=lengths,
        train_length=train_length,
        folds=folds,
        C=C,
        method=method,
        control=control,
        seed=seed,
        per_sequence=per_sequence,
    )
    ds = plan.compute(scheduler)
    ds.attrs.update(_task_attrs(store, list(ds.run.values)))
    ds.attrs.update(attrs or {})
    if save:
        if name is None:  # the default name: a stored result with other settings is kept
            name, note = storage_name(store, ds)
            if note:
                import warnings

                warnings.warn(note, stacklevel=2)
        save_probes(store, ds, name)
    return ds


def _task_attrs(store: Any, runs: list[str]) -> dict[str, str]:
    """``task`` (when the runs share one) and ``trained_target`` (the label they were trained on,
    when they declare one): what the result's default name says."""
    tasks = runs_by_task(store, [str(r) for r in runs])
    if len(tasks) != 1:
        return {}
    out = {"task": next(iter(tasks))}
    try:
        out["trained_target"] = _plan.choose_target(store, [str(r) for r in runs], None)
    except LookupError:
        pass
    return out


def runs_by_task(store: Any, runs: Sequence[str] | None = None) -> dict[str, list[str]]:
    """The runs (default: every run) grouped by their ``task`` attribute, tasks sorted."""
    out: dict[str, list[str]] = {}
    for r in store.run_ids() if runs is None else runs:
        out.setdefault(str(store.run_attrs(r).get("task")), []).append(r)
    return dict(sorted(out.items()))


def result_name(ds: xr.Dataset) -> str:
    """The default result name of a probe Dataset: ``probes/<task>`` for the target its runs
    were trained on, ``probes/<task>.<target>`` for another label (:func:`store.schema.probe_name`);
    ``probes/<target>`` when its runs are of several tasks."""
    from store import schema

    task = ds.attrs.get("task")
    if not task:
        return schema.result_name(schema.PROBES, str(ds.attrs["target"]))
    return schema.probe_name(str(task), str(ds.attrs["target"]), ds.attrs.get("trained_target"))


#: The attributes that make two probe results of the same runs different results.
SETTING_ATTRS = ("target", "positions", "folds", "control", "train_length", "method", "C", "seed")


def setting_differences(old: xr.Dataset, new: xr.Dataset) -> list[str]:
    """How the probe result ``new`` differs from the stored ``old`` in what it was made from:
    ``["folds 3 -> 5", "control permute -> token"]``; empty when they are the same sweep."""
    out = [f"{k} {old.attrs.get(k)} -> {new.attrs.get(k)}" for k in SETTING_ATTRS
           if str(old.attrs.get(k)) != str(new.attrs.get(k))]
    for dim in ("run", "length", "layer"):
        a = sorted(map(str, old[dim].values)) if dim in old.coords else []
        b = sorted(map(str, new[dim].values)) if dim in new.coords else []
        if a != b:
            out.append(f"{dim}s {','.join(a)} -> {','.join(b)}")
    return out


def storage_name(store: Any, ds: xr.Dataset, name: str | None = None, *,
                 where: str | None = None) -> tuple[str, str | None]:
    """Where to store the probe result ``ds`` without silently replacing another one:
    ``(name, note)``.

    A stored result of that name made with the same settings from the same runs is replaced
    (the same sweep again). One with other settings is kept: with ``name`` given, a
    :class:`~store.RunConflictError` says so and how to go on; with the default name
    (:func:`result_name`) this result goes under the next free ``<name>-2``, ``-3``, ... and
    ``note`` says why. ``where``: the store as the user named it, for the suggested commands.
    """
    from store import RunConflictError
    from store.contents.results import describe_settings

    default = result_name(ds)
    wanted = name or default
    where = where or str(store.location)
    have = store.results()
    if wanted not in have or not setting_differences(store.read_result(wanted), ds):
        return wanted, None
    old = store.read_result(wanted)
    diff = "; ".join(setting_differences(old, ds))
    if name is not None:
        in_source = wanted not in getattr(store, "results_store", store).results()
        fix = (f"give another --name (e.g. --name {_next_free(wanted, have)})"
               + ("" if in_source else f", or remove it first: layerstate forget {where} --result {wanted}"))
        raise RunConflictError(f"result {wanted} holds probes with other settings ({diff}); {fix}")
    free = _next_free(wanted, have)
    return free, (f"{wanted} already holds probes made with other settings "
                  f"({describe_settings(old.attrs)}); this result ({diff}) is stored as {free}, "
                  f"beside it (--name chooses the name; claims pick one with result = \"{_short(free)}\")")


def find_result(store: Any, target: str, run_id: str | None = None) -> str:
    """The stored probe result that holds probes of ``target`` (for ``run_id``, when given):
    ``probes/<target>`` where one has that name, else the result whose ``target`` attribute
    it is and that holds the run; of several, ``probes/<task>`` of the run's task, else the
    newest. ``probes/<target>`` (absent) when there is none, so the caller says what to run."""
    from store import schema

    plain = schema.result_name(schema.PROBES, target)
    names = store.results()
    if plain in names:
        return plain
    found = []
    for n in names:
        parsed = schema.parse_result_name(n)
        if parsed is None or parsed[0] != schema.PROBES or str(store.result_attrs(n).get("target")) != target:
            continue
        if run_id is None or run_id in [str(r) for r in store.read_result(n).run.values]:
            found.append(n)
    if not found:
        return plain
    if run_id is not None:
        own = schema.probe_name(str(store.run_attrs(run_id).get("task")))
        if own in found:
            return own
    return sorted(found, key=lambda n: str(store.result_attrs(n).get("created", "")))[-1]


def _short(name: str) -> str:
    """``probes/dyck-2`` -> ``dyck-2``: how a claim's ``result`` names it."""
    from store import schema

    parsed = schema.parse_result_name(name)
    return parsed[1] if parsed else name


def _next_free(name: str, have: Sequence[str]) -> str:
    i = 2
    while f"{name}-{i}" in have:
        i += 1
    return f"{name}-{i}"


def save_probes(store: Any, ds: xr.Dataset, name: str | None = None) -> str:
    """Write a probe Dataset to ``results/<name>`` (default :func:`result_name`), with the
    seed-level intervals of its profiles (:func:`analysis.probes.intervals.add_probe_intervals`);
    returns the name."""
    from analysis.probes.intervals import add_probe_intervals

    name = name or result_name(ds)
    store.write_result(name, add_probe_intervals(ds, store))
    return name
