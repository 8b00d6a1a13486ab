"""What a probe sweep will do: the runs, lengths, layers and cells, checked before any fit.

Everything here reads only the small per-position arrays (labels, mask, tokens) -- eagerly,
through xarray's lazy indexing, never through dask -- so that a sweep fails on bad input in
seconds and names the cell, before it spends minutes on hidden states. Hidden states stay lazy.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis.probes.cells import C_GRID
from store.errors import InvalidArgumentError, MissingError
from store.io.lengths import require_target

POSITION_MODES = ("all", "last", "pooled")
CONTROLS = ("token", "permute")
METHODS = ("exact", "screen", "reference")


@dataclass
class LengthLabels:
    """Labels of one (run, length), as class indices of the run (``-1`` = not labelled).

    ``y`` and ``control`` (sequence, position), ``control`` None without a control task;
    ``fold`` (sequence,) the fold of each sequence (``-1`` where the length is only scored);
    ``inner`` (sequence,) its inner group for choosing C (see :func:`inner_groups`).
    """

    run: str
    length: int
    y: np.ndarray
    control: np.ndarray | None
    fold: np.ndarray
    inner: np.ndarray

    @property
    def labelled(self) -> np.ndarray:
        return self.y >= 0


@dataclass
class RunPlan:
    """One run: its class values, layers, feature size and the labels of each length."""

    run: str
    classes: np.ndarray
    layers: list[str]
    n_features: int
    labels: dict[int, LengthLabels] = field(default_factory=dict)


# ----------------------------------------------------------------------------- selection


def select_runs(store: Any, runs: Any) -> list[str]:
    """Run ids from ``None`` (all), one id, a list of ids, or a mapping of attribute filters."""
    every = store.run_ids()
    if runs is None:
        chosen = every
    elif isinstance(runs, Mapping):
        chosen = store.select(**runs)
    else:
        chosen = [runs] if isinstance(runs, str) else list(runs)
        unknown = [r for r in chosen if r not in every]
        if unknown:
            raise MissingError(
                f"runs {unknown} are not in the store; runs there: {', '.join(every) or '(none)'}"
            )
    if not chosen:
        raise InvalidArgumentError(
            f"no runs match the selection {runs!r}; runs in the store: {', '.join(every) or '(none)'} "
            "(select with runs=None for all, a list of ids, or a dict of attributes like {'arch': 'lstm'})"
        )
    return list(chosen)


def choose_target(store: Any, runs: list[str], target: str | None) -> str:
    """The label to probe: ``target``, or the target every selected (run, length) declares
    (its ``target`` attribute, else its only label: docs/store-format.md, S23).

    Raises a one-line :class:`~store.errors.MissingError` asking for ``target=`` (``--target``)
    when a length has several labels and declares none, or the runs declare different ones.
    """
    if target is not None:
        return target

    found: dict[str, list[str]] = {}
    for r in runs:
        for L in store.lengths(r):
            ds = store.open_length(r, L, lazy="xarray")
            found.setdefault(require_target(ds, f"run {r!r} length {L}"), []).append(f"{r}/{L}")
    if not found:
        raise MissingError(
            f"the selected runs {runs} have no stored lengths to probe; capture them first "
            "(`layerstate capture`)"
        )
    if len(found) != 1:
        tasks = sorted({str(store.run_attrs(r).get("task")) for r in runs})
        raise MissingError(
            f"the selected runs were trained on different targets {sorted(map(str, found))} "
            f"(tasks {', '.join(tasks)}); probe one task at a time: --task {tasks[0]} "
            "(Python: runs={'task': ...}), or --target LABEL for a label every run has"
        )
    return str(next(iter(found)))


def choose_lengths(
    store: Any, run: str, lengths: Sequence[int] | None, train_length: int | None
) -> tuple[list[int], list[int]]:
    """(fit lengths, scored-only lengths) of a run.

    Without ``train_length`` every selected length is cross-validated. With it, probes are fitted
    (and cross-validated) at ``train_length`` only and scored at the other selected lengths.
    """
    stored = store.lengths(run)
    wanted = stored if lengths is None else [int(L) for L in np.atleast_1d(lengths)]
    need = sorted(set(wanted) | ({int(train_length)} if train_length is not None else set()))
    missing = [L for L in need if L not in stored]
    if missing:
        raise InvalidArgumentError(
            f"run {run!r} has no stored length {missing}; stored lengths: {stored} "
            "(pick lengths=... among them, or capture the missing ones)"
        )
    if train_length is None:
        return need, []
    return [int(train_length)], [L for L in need if L != int(train_length)]


def choose_layers(available: list[str], layers: Any, run: str) -> list[str]:
    """Layer names from ``None`` (all), a name, an index, or a list of either."""
    if layers is None:
        return list(available)
    out = []
    for lay in [layers] if isinstance(layers, str | int | np.integer) else list(layers):
        if isinstance(lay, int | np.integer) and not isinstance(lay, bool):
            if not 0 <= lay < len(available):
                raise InvalidArgumentError(
                    f"layer index {lay} is out of range for run {run!r}, which has "
                    f"{len(available)} layers {available}; use 0..{len(available) - 1} or a name"
                )
            out.append(available[int(lay)])
        elif lay in available:
            out.append(str(lay))
        else:
            raise InvalidArgumentError(
                f"layer {lay!r} is not in run {run!r}; its layers are {available} (pick among them)"
            )
    return out


def check_C(C: Any) -> float | tuple[float, ...]:
    """A fixed C (a positive number, or a one-value list) or a grid to choose from (ascending,
    distinct); ``None`` is the default grid :data:`analysis.probes.cells.C_GRID`."""
    if C is None:
        return tuple(C_GRID)
    grid: list[float] = []
    if not isinstance(C, bool | str):
        values = [C] if isinstance(C, int | float | np.integer | np.floating) else C
        try:
            grid = sorted({float(c) for c in values})
        except (TypeError, ValueError):
            grid = []
    if not grid or any(not (c > 0 and np.isfinite(c)) for c in grid):
        raise InvalidArgumentError(
            f"C (inverse L2 strength) must be a positive number (a fixed C) or a list of them "
            f"(a grid to choose from by inner cross-validation), got {C!r}"
        )
    return grid[0] if len(grid) == 1 else tuple(grid)


def check_options(
    positions: Any, method: str, control: Any, folds: int, C: Any
) -> tuple[str, list[int] | None, str | None]:
    """Validate the sweep options; returns (position mode, explicit positions, control kind)."""
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(folds, int | np.integer) or not 2 <= folds <= 1000:
        raise InvalidArgumentError(
            f"folds must be an integer from 2 to 1000 (k-fold cross-validation by sequence), got {folds!r}"
        )
    check_C(C)
    if control is True:
        kind = "token"
    elif control is False or control is None or control == "none":
        kind = None
    elif control in CONTROLS:
        kind = control
    else:
        raise InvalidArgumentError(f"control must be True, False or one of {CONTROLS}, got {control!r}")
    if isinstance(positions, str):
        if positions not in POSITION_MODES:
            raise InvalidArgumentError(
                f"positions must be one of {POSITION_MODES} or a list of position indices, got {positions!r}"
            )
        return positions, None, kind
    pos = [positions] if isinstance(positions, int | np.integer) else list(positions)
    if not pos or any(
        not isinstance(p, int | np.integer) or isinstance(p, bool) or p < 0 for p in pos
    ):
        raise InvalidArgumentError(
            f"positions must be non-negative integers (or 'all', 'last', 'pooled'), got {positions!r}"
        )
    return "list", sorted({int(p) for p in pos}), kind


# ----------------------------------------------------------------------------- labels


def probe_rng(seed: int, run: str, length: int, purpose: int) -> np.random.Generator:
    """A generator that depends only on (seed, run, length, purpose), not on selection order
    (the probes' own; training and capture draw from ``capture.train.rng_for``)."""
    return np.random.default_rng([int(seed), zlib.crc32(run.encode()), int(length), purpose])


def read_labels(store: Any, run: str, length: int, target: str) -> tuple[np.ndarray, np.ndarray]:
    """The raw target (sequence, position) with -1 where unlabelled, and the tokens.

    Read through xarray's lazy indexing (no dask), so planning never computes a dask graph.
    """
    ds = store.open_length(run, length, lazy="xarray")
    names = list(ds.attrs.get("labels", []))
    if target not in names:
        raise MissingError(
            f"label {target!r} does not exist in run {run!r} length {length}; labels there: "
            f"{', '.join(names) or '(none)'} (pass target=... with one of them)"
        )
    y = np.asarray(ds[target].values).astype(np.int64)
    mask = np.asarray(ds["mask"].values).astype(bool)
    tokens = np.asarray(ds["tokens"].values).astype(np.int64)
    return np.where(mask & (y >= 0), y, -1), tokens


def token_control(
    tokens: dict[int, np.ndarray],
    y: dict[int, np.ndarray],
    n_classes: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Hewitt & Liang's control task: each token type gets a fixed random class, drawn from the
    target's empirical class distribution; returns the map (token id -> class index).

    Redrawn (up to 100 times) until the labelled positions carry at least two control classes,
    which a small vocabulary would otherwise often fail (two token types, two classes: 1 in 2).
    """
    labelled = np.concatenate([y[L][y[L] >= 0] for L in y])
    seen = np.unique(np.concatenate([tokens[L][y[L] >= 0] for L in y]))
    freq = np.bincount(labelled, minlength=n_classes) / max(labelled.size, 1)
    size = int(max(t.max(initial=0) for t in tokens.values())) + 1
    mapping = rng.choice(n_classes, size=size, p=freq)
    for _ in range(100):
        if np.unique(mapping[seen]).size >= min(2, seen.size):
            break
        mapping = rng.choice(n_classes, size=size, p=freq)
    return mapping


def permuted_control(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Control labelling that shuffles each position's labels across the sequences labelled
    there: same class balance per position, no relation to the hidden states."""
    out = np.full_like(y, -1)
    for p in range(y.shape[1]):
        rows = np.flatnonzero(y[:, p] >= 0)
        out[rows, p] = y[rng.permutation(rows), p]
    return out


def assign_folds(n: int, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Balanced random folds of sequences: ``fold[s]`` in ``0 .. folds-1``."""
    return rng.permutation(np.arange(n) % folds)


def inner_groups(fold: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Each sequence's inner group for choosing C inside outer fold f: with 3 or more folds the
    sequence's own fold (the inner folds of f are the other outer folds); with 2, the fold split
    into two random halves of its sequences (``2 * fold + half``), so the one training fold still
    has two inner folds. Sequences never straddle groups."""
    if folds >= 3:
        return fold.copy()
    out = np.full_like(fold, -1)
    for f in range(folds):
        members = np.flatnonzero(fold == f)
        out[members] = 2 * f + rng.permutation(np.arange(members.size) % 2)
    return out


def build_labels(
    store: Any,
    run: str,
    fit_lengths: list[int],
    test_lengths: list[int],
    target: str,
    control: str | None,
    folds: int,
    seed: int,
) -> tuple[np.ndarray, dict[int, LengthLabels]]:
    """Class values of the run (over the selected lengths) and each length's labels."""
    raw, tokens = {}, {}
    for L in fit_lengths + test_lengths:
        raw[L], tokens[L] = read_labels(store, run, L, target)
    classes = np.unique(np.concatenate([r[r >= 0] for r in raw.values()]))
    if classes.size == 0:
        raise InvalidArgumentError(
            f"label {target!r} of run {run!r} is undefined (-1 or masked) at every position of "
            f"lengths {sorted(raw)}; probe a label that is defined somewhere"
        )
    idx = {
        L: np.where(r >= 0, np.searchsorted(classes, np.maximum(r, 0)), -1) for L, r in raw.items()
    }
    if control == "token":
        mapping = token_control(tokens, idx, classes.size, probe_rng(seed, run, 0, 1))
    out = {}
    for L in raw:
        if control == "token":
            ctrl = np.where(idx[L] >= 0, mapping[tokens[L]], -1)
        elif control == "permute":
            ctrl = permuted_control(idx[L], probe_rng(seed, run, L, 2))
        else:
            ctrl = None
        n = idx[L].shape[0]
        fold = (
            assign_folds(n, folds, probe_rng(seed, run, L, 3)) if L in fit_lengths else np.full(n, -1)
        )
        inner = (
            inner_groups(fold, folds, probe_rng(seed, run, L, 4)) if L in fit_lengths else fold.copy()
        )
        out[L] = LengthLabels(run, L, idx[L], ctrl, fold, inner)
    return classes, out


# ----------------------------------------------------------------------------- cells


def last_positions(y: np.ndarray) -> np.ndarray:
    """Each sequence's last labelled position (sequence,), -1 where none is labelled."""
    lab = y >= 0
    last = y.shape[1] - 1 - np.argmax(lab[:, ::-1], axis=1)
    return np.where(lab.any(1), last, -1)


def cell_rows(lab: LengthLabels, mode: str, position: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(sequence, position) of a cell's rows, sorted by sequence then position."""
    if mode == "pooled":
        seq, pos = np.nonzero(lab.labelled)  # labelled is (sequence, position)
        return seq, pos
    if mode == "last":
        last = last_positions(lab.y)
        seq = np.flatnonzero(last >= 0)
        return seq, last[seq]
    seq = np.flatnonzero(lab.labelled[:, position])
    return seq, np.full(seq.size, position)


def check_fit_cell(
    lab: LengthLabels, seq: np.ndarray, pos: np.ndarray, folds: int, n_classes: int
) -> str | None:
    """Why a cell cannot be cross-validated (a short reason, the same for similar cells), or None."""
    y = lab.y[seq, pos]
    counts = np.zeros((folds, n_classes), dtype=np.int64)
    np.add.at(counts, (lab.fold[seq], y), 1)
    if (counts.sum(1) == 0).any():
        return f"fewer labelled sequences than folds ({folds})"
    train = counts.sum(0)[None, :] - counts
    if ((train > 0).sum(1) < 2).any():
        return "a single class in the training sequences of a fold"
    return None


def compact(values: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``'0-2, 5'``: position lists in error messages stay short."""
    vals = sorted(values)
    parts, start = [], None
    for i, v in enumerate(vals):
        if start is None:
            start = v
        if i + 1 == len(vals) or vals[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)
