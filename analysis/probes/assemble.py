"""Turn the sweep's per-cell outputs into one ``xarray.Dataset`` with named dims.

Ragged things are padded, never dropped: a run narrower than the widest (the transformer's
128 features beside the LSTM's 160 and the GRU's 185 at the default sizes) has NaN weights
beyond its width (``n_features`` says how wide each run is); positions
a length does not have, or where nothing is labelled, have NaN metrics and ``n_test = 0``;
sequences beyond a length's count have ``labelled = 0``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

from .cells import METRICS

CONTROL_TEXT = {
    "token": "Hewitt & Liang (2019) control task: each token type is mapped to a fixed random class "
    "drawn from the target's class distribution; the control label of a position is its token's class",
    "permute": "at each position the target labels are permuted across the sequences labelled there",
    None: "none",
}
TRANSFER_TEXT = (
    "probes fitted at train_length score the other lengths: a position p < train_length is scored by "
    "the probe of position p; a position the train length lacks (p >= train_length, or unlabelled there) "
    "by the pooled probe of the train length (see probe_position: -1 = pooled). Each fold's probe "
    "scores every sequence of the other length; per-sequence correctness uses the probe fitted on all "
    "training sequences"
)
WEIGHTS_TEXT = (
    "weights/intercept are the probe fitted on every labelled sequence of the fit length, in the raw "
    "feature space: logits = hidden @ weights.T + intercept, weights (class, feature) (softmax over the run's classes; NaN for "
    "classes the run lacks and features beyond its width). Binary probes are written in two-class "
    "softmax form (weights of the two classes are w/2 and -w/2). scaler_mean/scaler_scale are the "
    "standardisation the probe was fitted under: weights = coef / scaler_scale"
)


def assemble(plan: Any, outs: list) -> xr.Dataset:
    """The sweep's Dataset from its :class:`~analysis.probes.sweep.CellOut` list."""
    per_position = plan.options["mode"] in ("all", "list")
    grid = _Grid(_coords(plan, per_position), per_position)
    tables = _Tables(grid, plan)
    for o in outs:
        tables.put(o)
    ds = tables.dataset()
    summarise(ds, per_position, plan.options["control"] is not None)
    ds.attrs.update(_attrs(plan.options))
    _warn_unconverged(ds, searched=_grid(plan.options) is not None)
    return ds


def _grid(options: dict) -> tuple[float, ...] | None:
    """The C grid of a sweep that chose C (not the screening solver), else None."""
    C = options["C"]
    return tuple(C) if isinstance(C, tuple) and options["method"] != "screen" else None


# dims of each result variable; "cell" is "position" in per-position sweeps, else absent
_METRIC_DIMS = ("run", "length", "layer", "cell", "fold")
_FIT_DIMS = ("run", "fit_length", "layer", "cell")
_FIT_VARS = {  # name: (trailing dims, fill, dtype)
    "weights": (("class", "feature"), np.nan, np.float32),
    "intercept": (("class",), np.nan, np.float32),
    "scaler_mean": (("feature",), np.nan, np.float32),
    "scaler_scale": (("feature",), np.nan, np.float32),
    "n_iter": ((), -1, np.int32),
    "converged": ((), True, bool),
    "C": ((), np.nan, np.float64),
    "fold_C": (("fold",), np.nan, np.float64),
}
#: with a control task
_CONTROL_FIT_VARS = {"control_fold_C": (("fold",), np.nan, np.float64)}
#: with a C grid: per grid value
_GRID_VARS = {
    "cv_log_loss": (("C_grid",), np.nan, np.float64),
    "path_converged": (("C_grid",), True, bool),
}
_POOLED_DIMS = ("run", "fit_length", "layer")


class _Tables:
    """The result arrays, allocated full of "missing" and filled cell by cell."""

    def __init__(self, grid: _Grid, plan: Any) -> None:
        self.grid, self.plan, opt = grid, plan, plan.options
        self.metrics = {m: grid.full(_METRIC_DIMS, np.nan) for m in METRICS}
        self.n_test = grid.full(("run", "length", "cell", "fold"), 0, np.int32)
        self.fit_vars = dict(_FIT_VARS)
        if opt["control"] is not None:
            self.fit_vars.update(_CONTROL_FIT_VARS)
        if "C_grid" in grid.coords:
            self.fit_vars.update(_GRID_VARS)
        self.fit = {
            k: grid.full(_FIT_DIMS + tail, fill, dt)
            for k, (tail, fill, dt) in self.fit_vars.items()
        }
        self.transfer = grid.per_position and any(plan.test_lengths.values())
        if self.transfer:
            self.pooled_weights = grid.full(_POOLED_DIMS + ("class", "feature"), np.nan, np.float32)
            self.pooled_intercept = grid.full(_POOLED_DIMS + ("class",), np.nan, np.float32)
        self.correct = None
        if opt["per_sequence"]:
            dtype = np.int16 if opt["mode"] == "pooled" else np.int8  # counts vs 0/1
            self.correct = grid.full(("run", "length", "layer", "cell", "sequence"), 0, dtype)

    def put(self, o: Any) -> None:
        """File one :class:`~analysis.probes.sweep.CellOut`."""
        g = self.grid
        r, L, lay = g.index("run", o.run), g.index("length", o.length), g.index("layer", o.layer)
        cls = g.class_index(self.plan.runs[o.run].classes)
        if g.per_position and o.kind != "position":  # the train length's pooled probe (transfer)
            at = (r, g.index("fit_length", o.length), lay)
            self.pooled_weights[at][cls, : o.weights.shape[0]] = o.weights.T
            self.pooled_intercept[at][cls] = o.bias
            return
        cell = (g.index("position", o.position),) if g.per_position else ()
        for m in METRICS:
            self.metrics[m][(r, L, lay) + cell] = o.metrics[m]
        self.n_test[(r, L) + cell] = o.n_test
        if self.correct is not None:
            self.correct[(r, L, lay) + cell][: o.seq_correct.size] = o.seq_correct
        if o.fitted:
            self._put_fit(o, (r, g.index("fit_length", o.length), lay) + cell, cls)

    def _put_fit(self, o: Any, at: tuple, cls: np.ndarray) -> None:
        d = o.weights.shape[0]
        self.fit["weights"][at][cls, :d] = o.weights.T  # (class, feature) view of the cell
        self.fit["intercept"][at][cls] = o.bias
        self.fit["scaler_mean"][at][:d] = o.mean
        self.fit["scaler_scale"][at][:d] = o.scale
        self.fit["n_iter"][at] = o.n_iter
        self.fit["converged"][at] = o.converged
        sel = o.selection
        self.fit["C"][at] = sel.C
        self.fit["fold_C"][at] = sel.fold_C
        if "control_fold_C" in self.fit and sel.control_fold_C is not None:
            self.fit["control_fold_C"][at] = sel.control_fold_C
        if "cv_log_loss" in self.fit:
            self.fit["cv_log_loss"][at] = sel.cv_log_loss
            self.fit["path_converged"][at] = sel.path_converged

    def dataset(self) -> xr.Dataset:
        g, opt = self.grid, self.plan.options
        ds = xr.Dataset(coords=g.coords)
        for m, arr in self.metrics.items():
            if m != "control_accuracy" or opt["control"] is not None:
                ds[m] = (g.dims(_METRIC_DIMS), arr)
        if opt["control"] is not None:
            ds["selectivity"] = ds["accuracy"] - ds["control_accuracy"]
        ds["n_test"] = (g.dims(("run", "length", "cell", "fold")), self.n_test)
        for name, arr in self.fit.items():
            ds[name] = (g.dims(_FIT_DIMS + self.fit_vars[name][0]), arr)
        if self.transfer:
            ds["pooled_weights"] = (_POOLED_DIMS + ("class", "feature"), self.pooled_weights)
            ds["pooled_intercept"] = (_POOLED_DIMS + ("class",), self.pooled_intercept)
            ds["probe_position"] = (("run", "length", "position"), _probe_positions(self.plan, g))
        if self.correct is not None:
            ds["correct"] = (g.dims(("run", "length", "layer", "cell", "sequence")), self.correct)
            ds["labelled"] = (
                g.dims(("run", "length", "cell", "sequence")),
                _labelled(self.plan, g),
            )
        n_features = [self.plan.runs[r].n_features for r in g.coords["run"]]
        ds["n_features"] = ("run", np.array(n_features, dtype=np.int32))
        return ds


def _warn_unconverged(ds: xr.Dataset, searched: bool) -> None:
    """Warn when a probe that is scored or stored did not meet its tolerance. With a C grid that
    happens only when no C of the grid converged (larger C that did not are merely avoided:
    ``path_converged`` and the report count those cells)."""
    stopped = int((~ds["converged"]).sum())
    if not stopped:
        return
    if searched:
        why = (
            "no C of the grid let every fit converge, so the smallest C was used; its scores are "
            "those of the last iterate. Add smaller values to the grid"
        )
    else:
        why = (
            "their scores are those of the last iterate. Separable data at a large C can do "
            "this: lower C, or let a grid choose it (C=None)"
        )
    warnings.warn(
        f"{stopped} cell(s) have probes that stopped before the gradient fell below 1e-4 "
        f"(see the `converged`, `n_iter` and `C` variables); {why}",
        RuntimeWarning,
        stacklevel=4,
    )


class _Grid:
    """Index lookups and array allocation over the result's coords; ``cell`` is the
    ``position`` dim in per-position sweeps and absent otherwise."""

    def __init__(self, coords: dict, per_position: bool) -> None:
        self.coords, self.per_position = coords, per_position
        self._index = {
            k: {v: i for i, v in enumerate(np.asarray(vals).tolist())}
            for k, vals in coords.items()
            if not isinstance(vals, tuple)  # dim coords only
        }

    def dims(self, dims: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(
            "position" if d == "cell" else d for d in dims if d != "cell" or self.per_position
        )

    def full(self, dims: tuple[str, ...], fill: Any, dtype: Any = np.float64) -> np.ndarray:
        shape = tuple(len(self.coords[d]) for d in self.dims(dims))
        return np.full(shape, fill, dtype=dtype)

    def index(self, dim: str, value: Any) -> int:
        return self._index[dim][value]

    def class_index(self, classes: np.ndarray) -> np.ndarray:
        return np.array([self._index["class"][int(v)] for v in classes], dtype=np.int64)


def _coords(plan: Any, per_position: bool) -> dict[str, Any]:
    runs = list(plan.runs)
    lengths = sorted({L for r in runs for L in plan.fit_lengths[r] + plan.test_lengths[r]})
    layers: list[str] = []
    for rp in plan.runs.values():
        layers += [lay for lay in rp.layers if lay not in layers]
    c: dict[str, Any] = {
        "run": np.array(runs, dtype=str),
        "length": np.array(lengths, dtype=np.int64),
        "layer": np.array(layers, dtype=str),
        "fold": np.arange(plan.options["folds"], dtype=np.int64),
        "class": np.unique(np.concatenate([rp.classes for rp in plan.runs.values()])).astype(
            np.int64
        ),
        "feature": np.arange(max(rp.n_features for rp in plan.runs.values()), dtype=np.int64),
        "fit_length": np.array(
            sorted({L for r in runs for L in plan.fit_lengths[r]}), dtype=np.int64
        ),
    }
    grid = _grid(plan.options)
    if grid is not None:
        c["C_grid"] = np.array(grid, dtype=np.float64)
    if per_position:
        pos = plan.options["positions"] if plan.options["mode"] == "list" else range(max(lengths))
        c["position"] = np.array(list(pos), dtype=np.int64)
    if plan.options["per_sequence"]:
        n = max(lab.y.shape[0] for rp in plan.runs.values() for lab in rp.labels.values())
        c["sequence"] = np.arange(n, dtype=np.int64)
    T = plan.options["train_length"]
    c["evaluation"] = (
        "length",
        np.array(
            ["cross-validation" if T is None or L == T else f"transfer from {T}" for L in lengths],
            dtype=str,
        ),
    )
    return c


def _labelled(plan: Any, grid: _Grid) -> np.ndarray:
    """Labelled rows per (run, length, [position], sequence): the denominators of ``correct``."""
    out = grid.full(("run", "length", "cell", "sequence"), 0, np.int16)
    mode = plan.options["mode"]
    for run, rp in plan.runs.items():
        r = grid.index("run", run)
        for L, lab in rp.labels.items():
            j, n = grid.index("length", L), lab.y.shape[0]
            if grid.per_position:
                for p in range(lab.y.shape[1]):
                    if p in grid._index["position"]:
                        out[r, j, grid.index("position", p), :n] = lab.labelled[:, p]
            elif mode == "last":
                out[r, j, :n] = lab.labelled.any(1)
            else:
                out[r, j, :n] = lab.labelled.sum(1)
    return out


def _probe_positions(plan: Any, grid: _Grid) -> np.ndarray:
    """Which train-length probe scored each (run, length, position): p, -1 = pooled, -2 = none."""
    out = grid.full(("run", "length", "position"), -2, np.int64)
    for run in plan.runs:
        r = grid.index("run", run)
        for L in plan.fit_lengths[run]:
            for p in grid.coords["position"]:
                if p < L:
                    out[r, grid.index("length", L), grid.index("position", int(p))] = p
        for (rr, L, key), src in plan.sources.items():
            if rr == run:
                out[r, grid.index("length", L), grid.index("position", key)] = (
                    -1 if src == "pooled" else src
                )
    return out


#: The variables :func:`summarise` derives from the others.
SUMMARY = ("profile", "control_profile", "selectivity_profile", "best_layer")


def summarise(ds: xr.Dataset, per_position: bool, control: bool) -> None:
    """Per-run readability profile across layers and the best layer (:data:`SUMMARY`)."""
    over = ["fold", "position"] if per_position else ["fold"]
    ds["profile"] = ds["accuracy"].mean(over)  # NaN cells (no data) are skipped by mean
    if control:
        ds["control_profile"] = ds["control_accuracy"].mean(over)
        ds["selectivity_profile"] = ds["selectivity"].mean(over)
    prof = ds["profile"].values
    best = np.full(prof.shape[:2], "", dtype=object)
    ok = ~np.isnan(prof).all(-1)
    idx = np.where(ok, np.argmax(np.nan_to_num(prof, nan=-np.inf), axis=-1), 0)
    best[ok] = ds["layer"].values[idx[ok]]
    ds["best_layer"] = (("run", "length"), best.astype(str))


def _attrs(opt: dict) -> dict[str, Any]:
    mode = opt["mode"]
    return {
        "analysis": "linear probes",
        "target": opt["target"],
        "method": opt["method"],
        "C": _C_attr(opt),
        "C_selection": _C_text(opt),
        "folds": opt["folds"],
        "seed": opt["seed"],
        "positions": mode if mode != "list" else "list",
        "position_rule": {
            "all": "one probe per position",
            "list": "one probe per listed position",
            "last": "one probe on each sequence's last labelled position",
            "pooled": "one probe on all labelled positions of each sequence",
        }[mode],
        "control": opt["control"] or "none",
        "control_description": CONTROL_TEXT[opt["control"]],
        "selectivity": "accuracy - control_accuracy (Hewitt & Liang 2019)",
        "split": f"{opt['folds']}-fold cross-validation by sequence (no sequence on both sides)",
        "baseline": "majority class of the training fold",
        "train_length": -1 if opt["train_length"] is None else int(opt["train_length"]),
        "transfer_rule": TRANSFER_TEXT if opt["train_length"] is not None else "none",
        "weights": WEIGHTS_TEXT,
        "solver": {
            "exact": "lockstep preconditioned L-BFGS along the C path with warm starts "
            "(float32, gtol 1e-4 on the mean-loss gradient)",
            "screen": "shrinkage LDA (closed form, shrinkage 0.1)",
            "reference": "scikit-learn LogisticRegression (lbfgs, warm starts along the C path) "
            "per problem",
        }[opt["method"]],
        "missing": "NaN metrics with n_test = 0: the length lacks the position or nothing is labelled there",
    }


def _C_attr(opt: dict) -> Any:
    """The ``C`` attribute: the fixed C, or ``"chosen per cell"`` (the grid is ``C_grid``)."""
    if opt["method"] == "screen":
        return "none (screening solver)"
    return "chosen per cell" if _grid(opt) is not None else float(opt["C"])


def _C_text(opt: dict) -> str:
    if opt["method"] == "screen":
        return "the screening solver (shrinkage LDA) has no C"
    grid = _grid(opt)
    if grid is None:
        return f"fixed C = {float(opt['C']):g} (inverse L2 strength, scikit-learn's convention)"
    inner = (
        "the other outer folds"
        if opt["folds"] >= 3
        else "the two halves (by sequence) of the other fold"
    )
    return (
        f"C chosen per cell from the grid {', '.join(f'{c:g}' for c in grid)} by inner "
        f"cross-validation nested in the {opt['folds']} outer folds and grouped by sequence: each "
        f"outer fold's probe (target and control alike) takes the C with the lowest held-out "
        f"log-loss on its inner folds ({inner}); the stored probe takes the C with the lowest "
        "log-loss of the outer folds' probes. Only C values at which those fits converged are "
        "eligible; log-losses within 0.1% count as tied and the smaller C wins. Per cell: C, "
        "fold_C, control_fold_C, cv_log_loss and path_converged"
    )
