"""Ablation and erasure by resuming the forward pass from stored activations.

For every (run, length, layer, setting): read the layer's stored states, erase a direction or
subspace at every position, resume the model above that layer (`SequenceModel.forward_from`),
and count correct predictions of the target label per sequence; beside it, refit a probe on
the erased states (cross-validated by sequence) to measure what is still linearly decodable.
Unablated accuracy is measured the same way (resuming from the unedited stored states), so
float16 storage rounding cancels out of the drop.

Settings (strings, ``"method"`` or ``"method:k"``; ``"pca:1,2,4"`` expands to three):

============  =================================================================================
``probe``     the logistic probe's directions at the fit length (one per class; one if binary)
``stored``    the directions in ``results/probes/<target>`` (made by ``layerstate probe``)
``given``     the ``directions`` argument
``inlp:k``    k rounds of INLP
``leace``     closed-form LEACE (always mean-based: it erases ``x - mean``)
``pca:k``     the top-k principal directions; ``svd:k`` the top-k uncentred singular directions
``random:k``  k random orthonormal directions: the control for a k-dimensional subspace
``matched:S`` the matched control of setting S (e.g. ``matched:leace``, ``matched:inlp:4``): a
              random subspace of S's dimension that removes the same share of the variance
              on the fitting rows (:func:`~analysis.interventions.erasure.matched_np`); a
              mean ablation when S is LEACE or ``mode="mean"``
============  =================================================================================

What each erasure removed is measured beside its drop (docs/interventions.md): per (run,
length, layer, setting) ``variance_removed``, ``mean_shift`` and ``removed_rank`` on the
evaluated states (every position), per (run, length, layer) the states' ``state_rank`` and
``distinct_states``; ``flag_variance`` marks an erasure removing more than
`MAX_VARIANCE_REMOVED` of the layer's variance and ``degenerate`` one whose layer varies in no
more dimensions than it erases (``state_rank <= n_directions``).

Choices that are **ours**:

- Directions are fitted on the labelled positions (``mask``) of the first ``fit_fraction`` of
  the sequences stored at ``fit_length``, pooled over positions; every measure at the fit
  length uses only the remaining sequences. At other lengths (OOD) every stored sequence is
  used (they were never seen by the fit).
- ``mode="mean"`` replaces the component by its mean over the fitting rows instead of zero.
- The refitted probe is ``StandardScaler`` + ``LogisticRegression(C)``, fitted as
  `analysis.probes.probe` fits its own (the probes' solver, C chosen from its grid by
  cross-validation over sequences, convergence reported; ``probe_C`` records the choice) with
  ``folds`` contiguous folds of sequences; each sequence is predicted by the probe trained
  without it. The probe directions (``probe``, ``inlp``) choose their C the same way.
- ``chance`` is the accuracy of always predicting the most frequent class of the evaluated
  positions.

Every per-sequence count is kept (dim ``sequence``) so that `analysis.stats` can bootstrap
over sequences and seeds: ``correct / n_labelled`` summed over sequences is the accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dask
import numpy as np
import torch
import xarray as xr

from analysis import registry
from analysis.interventions import erasure, removal
from analysis.interventions._common import (
    PortableModel,
    read_layer,
    resume_logits,
    target_of,
)
from analysis.interventions.directions import (
    Setting,
    check_directions,
    fit_rows,
    fixed_directions,
    load_probe_directions,
    parse_settings,
    setting_directions,
)
from analysis.interventions.engine import (
    DelayedCell,
    InterventionPlan,
    Var,
    assemble,
    open_plan,
    select_runs,
)
from analysis.interventions.intervals import store_with_intervals
from analysis.interventions.matched import (
    matched_eraser,
    name_seed,
    run_factors,
    with_matched,
)
from analysis.interventions.refit import refit_correct, refit_reference
from capture.device import Device, as_device
from store import Store
from store.errors import InvalidArgumentError

__all__ = [
    "MAX_VARIANCE_REMOVED",
    "MODES",
    "VARIABLES",
    "ablation",
    "refit_correct",
    "refit_reference",
    "run_ablation",
]

MODES = ("zero", "mean")
#: An erasure removing more than this share of the layer's total variance is flagged
#: (``flag_variance``): it removed most of what the layer carries, so its drop does not single
#: out the concept (docs/interventions.md, "What an erasure removed").
MAX_VARIANCE_REMOVED = 0.5


# ----------------------------------------------------------------------------- tasks
def _fit_eraser(rows, setting: Setting, mode: str, fixed, seed: list[int], n_features: int,
                target=None):
    """The `Eraser` of one setting, from the fitting rows (``target``: the eraser a matched
    control matches)."""
    x, y, groups = rows
    if setting.method == "matched":
        return matched_eraser(x, setting, mode, target, seed)
    if setting.method == "leace":
        return erasure.leace_np(x, y)
    if setting.method in ("given", "stored"):
        directions = fixed
    else:
        directions = setting_directions(x, y, setting, np.random.default_rng(seed), n_features,
                                        groups=groups)
    mean = x.astype(np.float64).mean(0) if mode == "mean" else None
    return erasure.projection_np(directions, mean)


def _eval_data(ds: xr.Dataset, layer: str, idx: np.ndarray):
    """hidden (sequence, position, feature) float32, labels and mask (sequence, position)."""
    labels = np.asarray(ds[target_of(ds)].isel(sequence=idx).values, dtype=np.int64)
    mask = np.asarray(ds["mask"].isel(sequence=idx).values, dtype=bool) & (labels >= 0)
    return read_layer(ds, layer, idx), labels, mask


def _label_counts(data) -> tuple[np.ndarray, float]:
    """Labelled positions per sequence, and the majority-class accuracy (``chance``)."""
    _, labels, mask = data
    counts = np.bincount(labels[mask]) if mask.any() else np.zeros(1)
    return mask.sum(1), counts.max() / max(mask.sum(), 1)


def _evaluate(model: PortableModel, layer: str, data, eraser, refit: dict | None,
              batch_size: int):
    """Per-sequence correct counts of the model and of the refitted probe (``refit``: the
    keyword arguments of `refit_correct`, or None to skip it), and what the states offer
    (no eraser: state rank, distinct states, total variance) or what the eraser removed
    (variance share, mean shift, rank), over every evaluated position."""
    hidden, labels, mask = data
    flat = hidden.reshape(-1, hidden.shape[-1])
    stats: tuple[float | int, ...]
    if eraser is None:
        edited, stats = hidden, removal.state_stats_np(flat)
    else:
        edited = erasure.erase_torch(torch.from_numpy(hidden), eraser).numpy()
        stats = removal.removal_stats_np(flat, *eraser)
    pred = resume_logits(model.module, layer, edited, batch_size).argmax(-1)
    correct = ((pred == labels) & mask).sum(1).astype(np.float64)
    probe, C = refit_correct(edited, labels, mask, **refit) if refit else (None, None)
    return (correct, probe, C, *stats)


# ----------------------------------------------------------------------------- the graph
def _plan(store, runs, lengths, layers, settings, fit_length, fit_fraction, folds) -> InterventionPlan:
    """The ablation plan: ``length`` and ``setting`` axes, fitting and evaluated sequences."""
    runs = select_runs(store, runs, "ablate")
    if lengths is None:
        common = set(store.lengths(runs[0]))
        for rid in runs[1:]:
            common &= set(store.lengths(rid))
        lengths = sorted(common)
    lengths = [int(L) for L in lengths]
    if fit_length is None:
        trained = {store.run_attrs(r).get("train_config", {}).get("length") for r in runs}
        fit_length = trained.pop() if len(trained) == 1 and None not in trained else min(lengths)
    fit_length = int(fit_length)
    groups = [("len", L) for L in sorted({*lengths, fit_length})]
    plan = open_plan(store, runs, groups, layers, layers_at=("len", fit_length))
    plan.fit_length = fit_length
    plan.axes = {"length": lengths, "setting": [s.name for s in settings]}
    for rid in runs:
        n_all = plan.group(rid, fit_length).sizes["sequence"]
        n_fit = int(round(n_all * fit_fraction))
        if n_fit < 2 or n_all - n_fit < max(folds, 2):
            raise InvalidArgumentError(
                f"run {rid!r} has {n_all} sequences at length {fit_length}: too few to fit on "
                f"{fit_fraction:.0%} and evaluate {folds}-fold on the rest; capture more "
                "sequences or change fit_fraction"
            )
        plan.fit_sequences[rid] = np.arange(n_fit)
        for L in lengths:
            n = plan.group(rid, L).sizes["sequence"]
            plan.sequences[rid, L] = np.arange(n_fit, n) if L == fit_length else np.arange(n)
    return plan


def _given_directions(plan: InterventionPlan, settings, directions, rid: str) -> dict[str, xr.DataArray]:
    """Per method ("given", "stored") the run's (layer, direction, feature) directions."""
    methods = {s.base.method for s in settings}
    out = {}
    if "given" in methods:
        if directions is None:
            raise InvalidArgumentError("setting 'given' needs directions=DataArray (layer, direction, feature)")
        da = directions.sel(run=rid) if "run" in directions.dims else directions
        out["given"] = check_directions(da, "directions")
    if "stored" in methods:
        out["stored"] = load_probe_directions(
            plan.store, plan.target[rid], run_id=rid, length=plan.fit_length
        )
    return out


def _check_options(mode: str, fit_fraction: float, folds: int, refit_rows: int) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 0 < fit_fraction < 1:
        raise InvalidArgumentError(f"fit_fraction must be in (0, 1), got {fit_fraction}")
    if folds < 2:
        raise InvalidArgumentError(f"folds must be >= 2, got {folds}")
    if refit_rows < 10:
        raise InvalidArgumentError(f"refit_rows must be >= 10, got {refit_rows}")


def _check_sizes(plan: InterventionPlan, settings: list[Setting]) -> None:
    for rid in plan.runs:
        d = plan.n_features[rid]
        for s in settings:
            if s.base.k is not None:
                erasure.check_k(s.base.k, d, s.name, f" of run {rid!r}")


def ablation(
    store: Store,
    runs: Sequence[str] | None = None,
    lengths: Sequence[int] | None = None,
    *,
    settings: Sequence[str] = ("probe",),
    layers: Sequence[str] | None = None,
    fit_length: int | None = None,
    directions: xr.DataArray | None = None,
    mode: str = "zero",
    fit_fraction: float = 0.5,
    refit: bool = True,
    matched: bool = False,
    folds: int = 3,
    refit_rows: int = 10_000,
    seed: int = 0,
    batch_size: int = 256,
    device: Device | str = "cpu",
) -> xr.Dataset:
    """Build (lazily) the ablation grid over runs x lengths x layers x settings.

    Nothing is computed here except reading metadata; compute the result with
    `analysis.compute.compute` (or use `run_ablation`, which also stores it).

    Parameters
    ----------
    store : Store
    runs : list of str, optional
        Default: every run in the store.
    lengths : list of int, optional
        Lengths to evaluate at (default: those stored for every run). Directions fitted at
        `fit_length` are applied at all of them (OOD when they differ).
    settings : list of str
        See the module docstring, e.g. ``["probe", "inlp:8", "leace", "pca:1,4,16",
        "random:1,4,16"]``.
    layers : list of str, optional
        Layer names (default all stored).
    fit_length : int, optional
        Default: the runs' training length if stored, else the shortest length.
    directions : xarray.DataArray, optional
        (layer, direction, feature), optionally with ``run``: used by setting ``"given"``.
    mode : {"zero", "mean"}
        Projection settings set the removed component to zero or to its fitting mean.
    fit_fraction : float
        Share of the fit-length sequences used to fit (the rest are evaluated).
    refit : bool
        Also refit a probe on the erased states (residual decodability).
    matched : bool
        Add the matched control ``matched:S`` after every setting S of
        `analysis.interventions.matched.MATCHABLE` (probe, stored, given, leace, inlp) that does
        not list it already.
    folds : int
        Cross-validation folds (by sequence) of the refitted probe.
    refit_rows : int
        At most this many labelled rows train each fold's probe (a seeded random subset; the
        fit is the costly part of a cell); every held-out row is still predicted.
    seed : int
        Seeds the random-subspace control (with the layer index and k) and the refit subsets.
    batch_size : int
        Sequences per resumed forward pass.
    device : Device or str
        Where each run's model is rebuilt and resumed (``"cpu"``, ``"cuda[:N]"``, or a
        :class:`~capture.device.Device` the command line resolved), checked before anything is
        read; the stored states are read on the host. Recorded as the result's ``device``
        attribute.

    Returns
    -------
    xarray.Dataset, dask-backed
        Dims ``run, length, layer, setting, sequence``. Per sequence: ``correct``,
        ``probe_correct`` (run, length, layer, setting, sequence); ``correct_clean``,
        ``probe_correct_clean`` (run, length, layer, sequence); ``probe_C`` (run, length,
        layer, setting) and ``probe_C_clean`` (run, length, layer), the refitted probe's chosen
        C; ``n_labelled`` and
        ``sequence_id`` (run, length, sequence; NaN / -1 where a run has fewer sequences).
        Summaries: ``accuracy``, ``accuracy_clean``, ``accuracy_drop`` (clean - ablated),
        ``probe_accuracy``, ``probe_accuracy_clean``, ``chance`` (run, length),
        ``n_directions`` (run, layer, setting: dimension removed). Coordinates ``method`` and
        ``k`` (setting), ``arch``, ``target`` (run), ``site`` (run, layer).
    """
    _check_options(mode, fit_fraction, folds, refit_rows)
    where = as_device(device)
    parsed = with_matched(parse_settings(settings)) if matched else parse_settings(settings)
    plan = _plan(store, runs, lengths, layers, parsed, fit_length, fit_fraction, folds)
    plan.device = where
    _check_sizes(plan, parsed)
    probe = {"folds": folds, "max_rows": refit_rows} if refit else None
    cells = _cells(plan, parsed, directions, mode, probe, seed, batch_size)
    variables = {k: v for k, v in VARIABLES.items() if refit or not k.startswith("probe")}
    ds = assemble(
        plan,
        variables,
        cells,
        coords={
            "method": ("setting", [s.method for s in parsed]),
            "k": ("setting", [-1 if s.base.k is None else s.base.k for s in parsed]),
            "matched_to": ("setting", ["" if s.of is None else s.of.name for s in parsed]),
            "target": ("run", [plan.target[r] for r in plan.runs]),
            **run_factors(plan),
            "site": (("run", "layer"), plan.site_names("every position")),
        },
        attrs={
            "analysis": "ablation",
            "mode": mode,
            "fit_length": plan.fit_length,
            "fit_fraction": fit_fraction,
            "folds": folds,
            "seed": seed,
            "accuracy": "sum(correct) / sum(n_labelled) over sequences, target label positions",
            "accuracy_drop": "accuracy_clean - accuracy (both resumed from the stored layer)",
            "variance_removed": "trace Cov(x - erased(x)) / trace Cov(x) over every evaluated "
            "position (docs/interventions.md)",
            "mean_shift": "|mean(x - erased(x))| / sqrt(trace Cov(x))",
            "max_variance_removed": MAX_VARIANCE_REMOVED,
            "flag_variance": f"variance_removed > {MAX_VARIANCE_REMOVED}",
            "degenerate": "state_rank <= n_directions: the layer's states vary in no more "
            "dimensions than the erasure removes",
            "state_rtol": removal.STATE_RTOL,
            "matched": "matched:S is a random subspace of S's rank removing S's share of the "
            "variance on the fitting rows (analysis.interventions.erasure.matched_np)",
        },
    )
    return _summaries(ds, refit)


_PER_SETTING = ("run", "length", "layer", "setting", "sequence")
_PER_LAYER = ("run", "length", "layer", "sequence")
_PER_LENGTH = ("run", "length", "sequence")
_SETTING_CELL = ("run", "length", "layer", "setting")
_LAYER_CELL = ("run", "length", "layer")
#: What the ablation cells fill (``probe_*`` only with ``refit``).
VARIABLES = {
    "correct": Var(_PER_SETTING),
    "probe_correct": Var(_PER_SETTING),
    "correct_clean": Var(_PER_LAYER),
    "probe_correct_clean": Var(_PER_LAYER),
    "probe_C": Var(_SETTING_CELL),
    "probe_C_clean": Var(_LAYER_CELL),
    "n_labelled": Var(_PER_LENGTH),
    "sequence_id": Var(_PER_LENGTH, np.int64, -1),
    "chance": Var(("run", "length")),
    "n_directions": Var(("run", "layer", "setting"), np.int64, -1),
    "variance_removed": Var(_SETTING_CELL),
    "mean_shift": Var(_SETTING_CELL),
    "removed_rank": Var(_SETTING_CELL, np.int64, -1),
    "state_rank": Var(_LAYER_CELL, np.int64, -1),
    "distinct_states": Var(_LAYER_CELL, np.int64, -1),
    "total_variance": Var(_LAYER_CELL),
}
#: Output names of `_evaluate` without and with an eraser (after the correct counts and C).
_STATE_STATS = ("state_rank", "distinct_states", "total_variance")
_REMOVAL_STATS = ("variance_removed", "mean_shift", "removed_rank")


def _refit_names(refit: bool, suffix: str = "") -> tuple[str | None, str | None]:
    """The names of the refit's two outputs (per-sequence correct counts, chosen C)."""
    return (f"probe_correct{suffix}", f"probe_C{suffix}") if refit else (None, None)


def _seeded(probe: dict | None, *seed: int) -> dict | None:
    """The refit's arguments with its own seed (None: no refit)."""
    return None if probe is None else {**probe, "seed": list(seed)}


def _cells(plan: InterventionPlan, settings, directions, mode, probe, seed, batch_size) -> list[DelayedCell]:
    """Delayed tasks: a model per run, fit rows per (run, layer), erasers, evaluations."""
    delayed = dask.delayed
    refit = probe is not None
    fit_length = plan.fit_length
    if fit_length is None:  # set by _plan
        raise ValueError("an ablation plan needs its fit length")
    cells: list[DelayedCell] = []
    for rid in plan.runs:
        model = plan.model(rid)
        given = _given_directions(plan, settings, directions, rid)
        first = True
        for li, layer in enumerate(plan.layers):
            if layer not in plan.run_layers[rid]:
                continue
            rows = delayed(fit_rows, pure=False)(
                plan.group(rid, fit_length), layer, plan.fit_sequences[rid]
            )
            erasers = _layer_erasers(plan, settings, given, rid, (li, layer), rows, mode, seed)
            for s in settings:
                at = {"run": rid, "layer": layer, "setting": s.name}
                cells.append(DelayedCell(at, ("n_directions",), erasers[s].rank))
            for L in plan.axes["length"]:
                data = delayed(_eval_data, pure=False)(
                    plan.group(rid, L), layer, plan.sequences[rid, L]
                )
                if first:  # labels do not depend on the layer: counted once per length
                    at = {"run": rid, "length": L}
                    cells.append(DelayedCell(at, ("sequence_id",), plan.sequences[rid, L]))
                    cells.append(DelayedCell(at, ("n_labelled", "chance"),
                                      delayed(_label_counts, pure=False)(data)))
                base = delayed(_evaluate, pure=False)(
                    model, layer, data, None, _seeded(probe, seed, L, li, 0), batch_size
                )
                at = {"run": rid, "length": L, "layer": layer}
                cells.append(DelayedCell(at, ("correct_clean", *_refit_names(refit, "_clean"),
                                       *_STATE_STATS), base))
                for si, s in enumerate(settings):
                    erased = delayed(_evaluate, pure=False)(
                        model, layer, data, erasers[s], _seeded(probe, seed, L, li, si + 1),
                        batch_size,
                    )
                    at = {"run": rid, "length": L, "layer": layer, "setting": s.name}
                    cells.append(DelayedCell(at, ("correct", *_refit_names(refit),
                                           *_REMOVAL_STATS), erased))
            first = False
    return cells


def _layer_erasers(plan: InterventionPlan, settings, given: dict, rid: str, where: tuple[int, str], rows,
                   mode: str, seed: int) -> dict[Setting, Any]:
    """One delayed `_fit_eraser` per setting at one (run, layer); a matched control's target
    eraser is shared with its setting when that is listed too, and fitted for it otherwise."""
    li, layer = where
    out: dict[Setting, Any] = {}

    def fit(s: Setting) -> Any:
        if s not in out:
            target = None if s.of is None else fit(s.of)
            fixed = fixed_directions(plan, given, rid, layer, s.base)
            # a matched control's own random draw: seeded apart from random:k's
            draw = [seed, li, s.k or 0] if s.of is None else [seed, li, name_seed(s)]
            out[s] = dask.delayed(_fit_eraser, pure=False)(
                rows, s, mode, fixed, draw, plan.n_features[rid], target
            )
        return out[s]

    for s in settings:
        fit(s)
    return out


def _summaries(ds: xr.Dataset, refit: bool) -> xr.Dataset:
    total = ds.n_labelled.sum("sequence")
    ds["accuracy"] = ds.correct.sum("sequence") / total
    ds["accuracy_clean"] = ds.correct_clean.sum("sequence") / total
    ds["accuracy_drop"] = ds.accuracy_clean - ds.accuracy
    if refit:
        ds["probe_accuracy"] = ds.probe_correct.sum("sequence") / total
        ds["probe_accuracy_clean"] = ds.probe_correct_clean.sum("sequence") / total
    measured = ds.state_rank >= 0
    ds["flag_variance"] = ds.variance_removed > MAX_VARIANCE_REMOVED
    ds["degenerate"] = measured & (ds.n_directions >= 0) & (ds.state_rank <= ds.n_directions)
    ds["degenerate"] = ds.degenerate.transpose(*_SETTING_CELL)
    return ds


def run_ablation(
    store: Store,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    lengths: Sequence[int] | None = None,
    settings: Sequence[str] = ("probe",),
    layers: Sequence[str] | None = None,
    fit_length: int | None = None,
    directions: xr.DataArray | None = None,
    mode: str = "zero",
    fit_fraction: float = 0.5,
    refit: bool = True,
    matched: bool = False,
    folds: int = 3,
    refit_rows: int = 10_000,
    seed: int = 0,
    batch_size: int = 256,
    device: Device | str = "cpu",
    scheduler: Any = "threads",
    num_workers: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    extend: bool = False,
) -> xr.Dataset:
    """Compute `ablation` and store it as ``results/ablation/<name>`` of ``store`` (opened with
    ``mode="r+"``), with the seed-level intervals of its accuracy drop, accuracy and
    refitted-probe accuracies (`store_with_intervals`). ``runs`` to ``device``: as `ablation`
    takes them; ``scheduler``, ``num_workers``, ``attrs``, ``extend``: as `store_with_intervals`
    takes them. Returns the computed result (the variables of `ablation`) with its intervals
    (`analysis.interventions.intervals.add_intervals`)."""
    def build(chosen: Sequence[str] | None) -> xr.Dataset:
        return ablation(store, chosen, lengths, settings=settings, layers=layers, fit_length=fit_length,
                        directions=directions, mode=mode, fit_fraction=fit_fraction, refit=refit, matched=matched,
                        folds=folds, refit_rows=refit_rows, seed=seed, batch_size=batch_size, device=device)

    return store_with_intervals(store, registry.ABLATION, name, build, runs, scheduler=scheduler,
                                num_workers=num_workers, attrs=attrs, extend=extend)
