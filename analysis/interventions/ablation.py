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
============  =================================================================================

Choices that are **ours**:

- Directions are fitted on the labelled positions (``mask``) of the first ``fit_fraction`` of
  the sequences stored at ``fit_length``, pooled over positions; every measure at the fit
  length uses only the remaining sequences. At other lengths (OOD) every stored sequence is
  used (they were never seen by the fit).
- ``mode="mean"`` replaces the component by its mean over the fitting rows instead of zero.
- The refitted probe is ``StandardScaler`` + ``LogisticRegression(C=1)`` with ``folds``
  contiguous folds of sequences; each sequence is predicted by the probe trained without it.
- ``chance`` is the accuracy of always predicting the most frequent class of the evaluated
  positions.

Every per-sequence count is kept (dim ``sequence``) so that `analysis.stats` can bootstrap
over sequences and seeds: ``correct / n_labelled`` summed over sequences is the accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dask
import dask.array as dsa
import numpy as np
import torch
import xarray as xr

from analysis.interventions import erasure as E
from analysis.interventions._common import (
    check_lengths,
    check_weights,
    compute,
    layer_list,
    open_group,
    read_layer,
    rebuild,
    resume_logits,
    site_description,
    target_of,
)
from store import MissingError, Store

#: method -> whether it takes ``:k``.
METHODS = {
    "probe": False,
    "stored": False,
    "given": False,
    "leace": False,
    "inlp": True,
    "pca": True,
    "svd": True,
    "random": True,
}
MODES = ("zero", "mean")


@dataclass(frozen=True)
class Setting:
    """One way of erasing: a method and, for subspace methods, its size ``k``."""

    method: str
    k: int | None = None

    @property
    def name(self) -> str:
        """``"pca:4"``, ``"leace"``, ..."""
        return self.method if self.k is None else f"{self.method}:{self.k}"


def parse_settings(settings: Sequence[str]) -> list[Setting]:
    """Parse setting strings (``"probe"``, ``"inlp:8"``, ``"pca:1,2,4"``).

    Returns
    -------
    list of Setting
        In the order given, sweeps expanded, duplicates dropped.
    """
    if isinstance(settings, str):
        settings = [settings]
    forms = ", ".join(f"{m}:K" if needs_k else m for m, needs_k in METHODS.items())
    out: list[Setting] = []
    for text in settings:
        method, _, ks = str(text).partition(":")
        if method not in METHODS:
            raise ValueError(f"unknown ablation setting {text!r}; valid forms: {forms}")
        if METHODS[method] != bool(ks):
            need = "needs a size, e.g. 'pca:4'" if METHODS[method] else "takes no ':k'"
            raise ValueError(f"setting {text!r}: {method} {need}; valid forms: {forms}")
        try:
            sizes = [int(k) for k in ks.split(",")] if ks else [None]
        except ValueError:
            raise ValueError(f"setting {text!r}: k must be integers like 'pca:1,2,4'") from None
        for k in sizes:
            if Setting(method, k) not in out:
                out.append(Setting(method, k))
    return out


# ----------------------------------------------------------------------------- directions
def fit_directions(
    store: Store,
    run_id: str,
    length: int,
    *,
    method: str = "probe",
    k: int | None = None,
    layers: Sequence[str] | None = None,
    sequences: slice | np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> xr.DataArray:
    """Fit erasure directions per layer from stored activations.

    Parameters
    ----------
    store : Store
    run_id : str
    length : int
        Stored length to fit at (e.g. the training length 40).
    method : {"probe", "inlp", "pca", "svd", "random"}
        See the module docstring; ``k`` is the number of INLP rounds or the subspace size.
    k : int, optional
    layers : list of str, optional
        Default: every stored layer.
    sequences : slice or array of int, optional
        Which stored sequences to fit on (default all).
    rng : numpy.random.Generator, optional
        Needed for ``"random"``.

    Returns
    -------
    xarray.DataArray, (layer, direction, feature)
        Zero-padded to the largest number of directions over layers (a zero row removes
        nothing); attrs ``method``, ``k``, ``run``, ``length``.
    """
    setting = parse_settings([method if k is None else f"{method}:{k}"])[0]
    if setting.method in ("given", "stored", "leace"):
        raise ValueError(
            f"fit_directions fits probe, inlp, pca, svd or random directions, not "
            f"{setting.method!r}; for LEACE use analysis.interventions.leace"
        )
    if setting.method == "random" and rng is None:
        raise ValueError("method 'random' needs rng=numpy.random.default_rng(seed)")
    ds = open_group(store, run_id, length)
    names = layer_list(ds, layers)
    idx = np.arange(ds.sizes["sequence"])[sequences if sequences is not None else slice(None)]
    rows = []
    for name in names:
        x, y = _fit_rows_from(ds, name, idx)
        rows.append(_setting_directions(x, y, setting, rng, ds.sizes["feature"]))
    width = max(r.shape[0] for r in rows)
    padded = np.zeros((len(names), width, ds.sizes["feature"]))
    for i, r in enumerate(rows):
        padded[i, : r.shape[0]] = r
    return xr.DataArray(
        padded,
        dims=("layer", "direction", "feature"),
        coords={"layer": names},
        attrs={"method": setting.method, "k": -1 if k is None else int(k), "run": run_id,
               "length": int(length)},
    )


def load_probe_directions(
    store: Store, target: str, *, run_id: str | None = None, length: int | None = None
) -> xr.DataArray:
    """Probe directions stored by ``layerstate probe`` under ``results/probes/<target>``.

    Read, in this order of preference: ``direction``; ``weights`` when it has no ``position``
    dim (a pooled sweep); ``pooled_weights`` (the train length's pooled probe of a
    per-position sweep). All are in raw feature space (``logits = hidden @ weights +
    intercept``). Dims ``run`` and ``fit_length`` (or ``length``) are selected when present;
    ``class`` becomes ``direction``. Rows and features may be NaN-padded (classes a run lacks,
    features beyond its width); ablation drops them.

    Parameters
    ----------
    store : Store
    target : str
        The label the probes were fitted to.
    run_id : str, optional
        Needed when the result has a ``run`` dim.
    length : int, optional
        The fit length; needed when the result has a ``fit_length``/``length`` dim.

    Returns
    -------
    xarray.DataArray, (layer, direction, feature)

    Raises
    ------
    MissingError
        No probes were fitted for `target` (names ``layerstate probe``).
    """
    name = f"probes/{target}"
    if name not in store.results():
        raise MissingError(
            f"no probe directions for target {target!r} in {store.location} (results/{name}); "
            "fit probes first with `layerstate probe`, or use the ablation setting 'probe', "
            "which fits them here"
        )
    ds = store.read_result(name)
    candidates = [
        v for v in ("direction", "weights", "pooled_weights")
        if v in ds.data_vars and "position" not in ds[v].dims
    ]
    if not candidates:
        raise KeyError(
            f"results/{name} holds no pooled probe weights (variables: "
            f"{', '.join(map(str, ds.data_vars))}); re-run `layerstate probe` with pooled "
            "positions or a train length, or use the ablation setting 'probe'"
        )
    da = ds[candidates[0]]
    for dims, value in ((("run",), run_id), (("fit_length", "length"), length)):
        for dim in dims:
            if dim not in da.dims:
                continue
            if value is None:
                raise ValueError(f"results/{name} has a {dim!r} dim; pass the {dim} to pick")
            if value not in da[dim].values:
                raise KeyError(
                    f"results/{name} has no {dim} {value!r}; it has "
                    f"{', '.join(map(str, da[dim].values))}; fit probes there with `layerstate probe`"
                )
            da = da.sel({dim: value})
    da = da.rename({"class": "direction"}) if "class" in da.dims else da
    return _check_directions(da, f"results/{name}")


def _check_directions(da: xr.DataArray, what: str) -> xr.DataArray:
    if set(da.dims) != {"layer", "direction", "feature"}:
        raise ValueError(
            f"{what} has dims {da.dims}; directions must be (layer, direction, feature) "
            "(optionally with a 'run' dim); select or rename the others"
        )
    return da.transpose("layer", "direction", "feature")


def _fit_rows_from(ds: xr.Dataset, layer: str, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labelled rows of one layer: x (row, feature) float32, y (row,) int64."""
    hidden = read_layer(ds, layer, idx)  # (sequence, position, feature)
    target = target_of(ds)
    labels = np.asarray(ds[target].isel(sequence=idx).values, dtype=np.int64)
    mask = np.asarray(ds["mask"].isel(sequence=idx).values, dtype=bool) & (labels >= 0)
    return hidden[mask], labels[mask]


def _setting_directions(x, y, setting: Setting, rng, n_features: int) -> np.ndarray:
    """Directions (direction, feature) of one fitted setting on rows x, y."""
    if setting.method == "probe":
        return E.probe_directions_np(x, y)
    k = setting.k
    assert k is not None, setting  # parse_settings gives every subspace method a k
    if setting.method == "inlp":
        return E.inlp_np(x, y, k).T
    if setting.method in ("pca", "svd"):
        return E.pca_np(x, k, center=setting.method == "pca")
    return E.random_np(n_features, k, rng)


# ----------------------------------------------------------------------------- tasks
def _fit_eraser(rows, setting: Setting, mode: str, fixed, seed: list[int], n_features: int):
    """The `Eraser` of one setting, from the fitting rows."""
    x, y = rows
    if setting.method == "leace":
        return E.leace_np(x, y)
    if setting.method in ("given", "stored"):
        directions = fixed
    else:
        directions = _setting_directions(x, y, setting, np.random.default_rng(seed), n_features)
    mean = x.astype(np.float64).mean(0) if mode == "mean" else None
    return E.projection_np(directions, mean)


def _eval_data(ds: xr.Dataset, layer: str, idx: np.ndarray):
    """hidden (sequence, position, feature) float32, labels and mask (sequence, position)."""
    labels = np.asarray(ds[target_of(ds)].isel(sequence=idx).values, dtype=np.int64)
    mask = np.asarray(ds["mask"].isel(sequence=idx).values, dtype=bool) & (labels >= 0)
    return read_layer(ds, layer, idx), labels, mask


def _refit_correct(
    x: np.ndarray, labels: np.ndarray, mask: np.ndarray, folds: int, max_rows: int, seed: list
) -> np.ndarray:
    """Per-sequence correct counts of a probe refitted with sequences held out by fold.

    x (sequence, position, feature); returns (sequence,) float. Each fold trains on at most
    `max_rows` labelled rows of the other sequences (a seeded random subset) and predicts every
    labelled row of its own.
    """
    from sklearn.linear_model import LogisticRegression

    n = x.shape[0]
    rng = np.random.default_rng(seed)
    correct = np.zeros(n)
    for held in np.array_split(np.arange(n), folds):
        train = np.setdiff1d(np.arange(n), held)
        xt, yt = x[train][mask[train]], labels[train][mask[train]]
        if yt.size > max_rows:
            keep = np.sort(rng.choice(yt.size, size=max_rows, replace=False))
            xt, yt = xt[keep], yt[keep]
        xt = xt.astype(np.float64)
        xh, yh = x[held][mask[held]].astype(np.float64), labels[held][mask[held]]
        if np.unique(yt).size < 2:
            pred = np.full(yh.shape, yt[0] if yt.size else -1)
        else:
            mean, scale = xt.mean(0), xt.std(0)
            scale[scale < 1e-6] = 1.0
            probe = LogisticRegression(max_iter=500).fit((xt - mean) / scale, yt)
            pred = probe.predict((xh - mean) / scale)
        seq_of_row = np.repeat(held, mask[held].sum(1))
        np.add.at(correct, seq_of_row, pred == yh)
    return correct


def _evaluate(model, layer: str, data, eraser, refit: dict | None, batch_size: int):
    """Per-sequence correct counts of the model and of the refitted probe (``refit``: the
    keyword arguments of `_refit_correct`, or None to skip it)."""
    hidden, labels, mask = data
    edited = hidden if eraser is None else E.erase_torch(torch.from_numpy(hidden), eraser).numpy()
    pred = resume_logits(model, layer, edited, batch_size).argmax(-1)
    correct = ((pred == labels) & mask).sum(1).astype(np.float64)
    probe = _refit_correct(edited, labels, mask, **refit) if refit else None
    return correct, probe


# ----------------------------------------------------------------------------- the graph
@dataclass
class _Plan:
    """Everything known before computing: per run its lengths, sequences and layers."""

    runs: list[str]
    lengths: list[int]
    layers: list[str]
    settings: list[Setting]
    fit_length: int
    groups: dict  # (run, length) -> the stored group, opened once (lazy, no dask)
    eval_idx: dict  # (run, length) -> ndarray of stored sequence indices
    fit_idx: dict  # run -> ndarray
    run_layers: dict  # run -> list of layers it has
    n_features: dict  # run -> int
    arch: dict
    target: dict


def _plan(store, runs, lengths, layers, settings, fit_length, fit_fraction, folds) -> _Plan:
    runs = list(store.run_ids() if runs is None else runs)
    if not runs:
        raise MissingError(f"no runs to ablate in {store.location}; train some with `layerstate train`")
    for rid in runs:
        check_weights(store, rid)
    if lengths is None:
        common = set(store.lengths(runs[0]))
        for rid in runs[1:]:
            common &= set(store.lengths(rid))
        lengths = sorted(common)
    lengths = [int(L) for L in lengths]
    if fit_length is None:
        trained = {store.run_attrs(r).get("train_config", {}).get("length") for r in runs}
        fit_length = trained.pop() if len(trained) == 1 and None not in trained else min(lengths)
    plan = _Plan(runs, lengths, [], settings, int(fit_length), {}, {}, {}, {}, {}, {}, {})
    for rid in runs:
        check_lengths(store, rid, sorted({*lengths, plan.fit_length}))
        for L in sorted({*lengths, plan.fit_length}):
            plan.groups[rid, L] = open_group(store, rid, L)
        ds = plan.groups[rid, plan.fit_length]
        plan.run_layers[rid] = layer_list(ds, layers)
        plan.n_features[rid] = ds.sizes["feature"]
        plan.arch[rid] = str(ds.attrs["run"].get("arch", ""))
        plan.target[rid] = target_of(ds)
        n_fit = int(round(ds.sizes["sequence"] * fit_fraction))
        if n_fit < 2 or ds.sizes["sequence"] - n_fit < max(folds, 2):
            raise ValueError(
                f"run {rid!r} has {ds.sizes['sequence']} sequences at length {plan.fit_length}: "
                f"too few to fit on {fit_fraction:.0%} and evaluate {folds}-fold on the rest; "
                "capture more sequences or change fit_fraction"
            )
        plan.fit_idx[rid] = np.arange(n_fit)
        for L in lengths:
            n = plan.groups[rid, L].sizes["sequence"]
            plan.eval_idx[rid, L] = np.arange(n_fit, n) if L == plan.fit_length else np.arange(n)
    for rid in runs:
        for name in plan.run_layers[rid]:
            if name not in plan.layers:
                plan.layers.append(name)
    return plan


def _given_directions(store, plan: _Plan, directions, rid: str) -> dict[str, xr.DataArray]:
    """Per method ("given", "stored") the run's (layer, direction, feature) directions."""
    methods = {s.method for s in plan.settings}
    out = {}
    if "given" in methods:
        if directions is None:
            raise ValueError("setting 'given' needs directions=DataArray (layer, direction, feature)")
        da = directions.sel(run=rid) if "run" in directions.dims else directions
        out["given"] = _check_directions(da, "directions")
    if "stored" in methods:
        out["stored"] = load_probe_directions(
            store, plan.target[rid], run_id=rid, length=plan.fit_length
        )
    return out


def _fixed_directions(plan: _Plan, given: dict, rid: str, layer: str, setting: Setting):
    """The (direction, feature) rows of a given/stored setting at one layer (else None)."""
    if setting.method not in given:
        return None
    da = given[setting.method]
    if layer not in [str(v) for v in da.layer.values]:
        raise KeyError(
            f"{setting.method} directions have no layer {layer!r} (they have "
            f"{', '.join(map(str, da.layer.values))}); fit them for every ablated layer"
        )
    values = np.asarray(da.sel(layer=layer).values, dtype=np.float64)
    d = plan.n_features[rid]
    if values.shape[-1] < d or np.isfinite(values[:, d:]).any():
        raise ValueError(
            f"{setting.method} directions have {values.shape[-1]} features; run {rid!r} has {d} "
            "(wider directions may only be NaN-padded)"
        )
    values = values[:, :d]
    return values[np.isfinite(values).all(1)]  # NaN rows: classes the run lacks


def _check_sizes(plan: _Plan) -> None:
    for rid in plan.runs:
        d = plan.n_features[rid]
        for s in plan.settings:
            if s.k is not None:
                E.check_k(s.k, d, s.name, f" of run {rid!r}")


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
    folds: int = 3,
    refit_rows: int = 10_000,
    seed: int = 0,
    batch_size: int = 256,
) -> xr.Dataset:
    """Build (lazily) the ablation grid over runs x lengths x layers x settings.

    Nothing is computed here except reading metadata; compute the result with
    `analysis.interventions.compute` (or use `run_ablation`, which also stores it).

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
    folds : int
        Cross-validation folds (by sequence) of the refitted probe.
    refit_rows : int
        At most this many labelled rows train each fold's probe (a seeded random subset; the
        fit is the costly part of a cell); every held-out row is still predicted.
    seed : int
        Seeds the random-subspace control (with the layer index and k) and the refit subsets.
    batch_size : int
        Sequences per resumed forward pass.

    Returns
    -------
    xarray.Dataset, dask-backed
        Dims ``run, length, layer, setting, sequence``. Per sequence: ``correct``,
        ``probe_correct`` (run, length, layer, setting, sequence); ``correct_clean``,
        ``probe_correct_clean`` (run, length, layer, sequence); ``n_labelled`` and
        ``sequence_id`` (run, length, sequence; NaN / -1 where a run has fewer sequences).
        Summaries: ``accuracy``, ``accuracy_clean``, ``accuracy_drop`` (clean - ablated),
        ``probe_accuracy``, ``probe_accuracy_clean``, ``chance`` (run, length),
        ``n_directions`` (run, layer, setting: dimension removed). Coordinates ``method`` and
        ``k`` (setting), ``arch``, ``target`` (run), ``site`` (run, layer).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 0 < fit_fraction < 1:
        raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction}")
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    if refit_rows < 10:
        raise ValueError(f"refit_rows must be >= 10, got {refit_rows}")
    parsed = parse_settings(settings)
    plan = _plan(store, runs, lengths, layers, parsed, fit_length, fit_fraction, folds)
    _check_sizes(plan)
    cells = _graph(store, plan, directions, mode, refit, folds, refit_rows, seed, batch_size)
    return _assemble(plan, cells, refit, mode, fit_fraction, folds, seed)


def _seeded(probe: dict | None, *seed: int) -> dict | None:
    """The refit's arguments with its own seed (None: no refit)."""
    return None if probe is None else {**probe, "seed": list(seed)}


def _graph(store, plan: _Plan, directions, mode, refit, folds, refit_rows, seed, batch_size):
    """Delayed tasks: a model per run, fit rows per (run, layer), erasers, evaluations."""
    delayed = dask.delayed
    out: dict = {}
    for rid in plan.runs:
        model = delayed(rebuild, pure=False)(store, rid)
        given = _given_directions(store, plan, directions, rid)
        for li, layer in enumerate(plan.layers):
            if layer not in plan.run_layers[rid]:
                continue
            rows = delayed(_fit_rows_from, pure=False)(
                plan.groups[rid, plan.fit_length], layer, plan.fit_idx[rid]
            )
            erasers = {}
            for s in plan.settings:
                fixed = _fixed_directions(plan, given, rid, layer, s)
                erasers[s] = delayed(_fit_eraser, pure=False)(
                    rows, s, mode, fixed, [seed, li, s.k or 0], plan.n_features[rid]
                )
                out["rank", rid, layer, s] = erasers[s].rank
            for L in plan.lengths:
                data = delayed(_eval_data, pure=False)(
                    plan.groups[rid, L], layer, plan.eval_idx[rid, L]
                )
                probe = {"folds": folds, "max_rows": refit_rows} if refit else None
                out["base", rid, L, layer] = delayed(_evaluate, pure=False)(
                    model, layer, data, None, _seeded(probe, seed, L, li, 0), batch_size
                )
                out["labels", rid, L] = data[1:]
                for si, s in enumerate(plan.settings):
                    out["cell", rid, L, layer, s] = delayed(_evaluate, pure=False)(
                        model, layer, data, erasers[s], _seeded(probe, seed, L, li, si + 1),
                        batch_size,
                    )
    return out


def _gather(plan: _Plan, refit: bool, keys: list, values: list) -> dict:
    """Scatter the tasks' per-sequence outputs into NaN-padded grid arrays."""
    results = dict(zip(keys, values, strict=True))
    R, T, Y, S = len(plan.runs), len(plan.lengths), len(plan.layers), len(plan.settings)
    N = max(len(v) for v in plan.eval_idx.values())
    nan = np.nan
    arrays = {
        "correct": np.full((R, T, Y, S, N), nan),
        "probe_correct": np.full((R, T, Y, S, N), nan),
        "correct_clean": np.full((R, T, Y, N), nan),
        "probe_correct_clean": np.full((R, T, Y, N), nan),
        "n_labelled": np.full((R, T, N), nan),
        "sequence_id": np.full((R, T, N), -1, dtype=np.int64),
        "chance": np.full((R, T), nan),
        "n_directions": np.full((R, Y, S), -1, dtype=np.int64),
    }
    for key, value in results.items():
        kind, rid, *rest = key
        r = plan.runs.index(rid)
        if kind == "rank":
            layer, s = rest
            arrays["n_directions"][r, plan.layers.index(layer), plan.settings.index(s)] = value
        elif kind == "labels":
            (L,) = rest
            t, (labels, mask) = plan.lengths.index(L), value
            n = labels.shape[0]
            arrays["n_labelled"][r, t, :n] = mask.sum(1)
            arrays["sequence_id"][r, t, :n] = plan.eval_idx[rid, L]
            counts = np.bincount(labels[mask]) if mask.any() else np.zeros(1)
            arrays["chance"][r, t] = counts.max() / max(mask.sum(), 1)
        else:
            t, y = plan.lengths.index(rest[0]), plan.layers.index(rest[1])
            correct, probe = value
            n = correct.shape[0]
            at = (r, t, y) if kind == "base" else (r, t, y, plan.settings.index(rest[2]))
            suffix = "_clean" if kind == "base" else ""
            arrays["correct" + suffix][(*at, slice(0, n))] = correct
            if refit:
                arrays["probe_correct" + suffix][(*at, slice(0, n))] = probe
    return arrays


def _assemble(plan: _Plan, cells: dict, refit, mode, fit_fraction, folds, seed) -> xr.Dataset:
    keys = list(cells)
    gathered = dask.delayed(_gather, pure=False)(plan, refit, keys, [cells[k] for k in keys])
    R, T, Y, S = len(plan.runs), len(plan.lengths), len(plan.layers), len(plan.settings)
    N = max(len(v) for v in plan.eval_idx.values())
    dims = {
        "correct": (("run", "length", "layer", "setting", "sequence"), (R, T, Y, S, N), float),
        "probe_correct": (("run", "length", "layer", "setting", "sequence"), (R, T, Y, S, N), float),
        "correct_clean": (("run", "length", "layer", "sequence"), (R, T, Y, N), float),
        "probe_correct_clean": (("run", "length", "layer", "sequence"), (R, T, Y, N), float),
        "n_labelled": (("run", "length", "sequence"), (R, T, N), float),
        "sequence_id": (("run", "length", "sequence"), (R, T, N), np.int64),
        "chance": (("run", "length"), (R, T), float),
        "n_directions": (("run", "layer", "setting"), (R, Y, S), np.int64),
    }
    if not refit:
        dims = {k: v for k, v in dims.items() if not k.startswith("probe")}
    data = {
        name: (d, dsa.from_delayed(gathered[name], shape=shape, dtype=dtype))
        for name, (d, shape, dtype) in dims.items()
    }
    sites = [
        [site_description(plan.arch[r], y, "every position") for y in plan.layers] for r in plan.runs
    ]
    ds = xr.Dataset(
        data,
        coords={
            "run": plan.runs,
            "length": plan.lengths,
            "layer": plan.layers,
            "setting": [s.name for s in plan.settings],
            "sequence": np.arange(N),
            "method": ("setting", [s.method for s in plan.settings]),
            "k": ("setting", [-1 if s.k is None else s.k for s in plan.settings]),
            "arch": ("run", [plan.arch[r] for r in plan.runs]),
            "target": ("run", [plan.target[r] for r in plan.runs]),
            "site": (("run", "layer"), sites),
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
        },
    )
    return _summaries(ds, refit)


def _summaries(ds: xr.Dataset, refit: bool) -> xr.Dataset:
    total = ds.n_labelled.sum("sequence")
    ds["accuracy"] = ds.correct.sum("sequence") / total
    ds["accuracy_clean"] = ds.correct_clean.sum("sequence") / total
    ds["accuracy_drop"] = ds.accuracy_clean - ds.accuracy
    if refit:
        ds["probe_accuracy"] = ds.probe_correct.sum("sequence") / total
        ds["probe_accuracy_clean"] = ds.probe_correct_clean.sum("sequence") / total
    return ds


def run_ablation(
    store: Store,
    name: str = "default",
    *,
    scheduler: str | None = "threads",
    num_workers: int | None = None,
    **kwargs,
) -> xr.Dataset:
    """Compute `ablation` and store it as ``results/ablation/<name>``.

    Parameters
    ----------
    store : Store
        Opened with ``mode="r+"``.
    name : str
    scheduler, num_workers
        Passed to `compute`.
    **kwargs
        Everything `ablation` takes.

    Returns
    -------
    xarray.Dataset
        The computed result (same variables as `ablation`).
    """
    result = compute(ablation(store, **kwargs), scheduler=scheduler, num_workers=num_workers)
    store.write_result(f"ablation/{name}", result)
    return result
