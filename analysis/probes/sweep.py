"""The probe sweep as a dask graph: one task per (run, length, layer, block of positions).

Tasks read hidden states straight from the store's chunks -- one layer at a time, a block of
positions at a time -- so memory holds a few ``(sequence, position-block, feature)`` slabs, never
a whole length, let alone the store. Each task fits its cells with one solver and returns small
arrays (metrics, the full-data probe); :meth:`ProbePlan.compute` runs the graph once and
:func:`analysis.probes.assemble.assemble` turns the outputs into one ``xarray.Dataset``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import dask
import numpy as np

from analysis.compute import compute, is_local
from analysis.probes.assemble import assemble
from store.errors import InvalidArgumentError, InvalidArrayError

from . import plan
from .cells import CellInput, CellModels, Selection, fit_cells, score_cell
from .progress import Progress, counting, sweep_size

#: Upper bound on one task's hidden-state slab and its copies (float16 slab, its assembly from
#: chunks, the float32 rows of a cell); two worker threads then hold a few of these at a time.
BLOCK_BYTES = 48 * 2**20
#: Single-thread CPU seconds of the exact solver per (row x feature x class x C value) of a fitted
#: cell, control task and cross-validation included: 111.6 s for 200 cells of 2000 rows x 128
#: features x 6 classes x 5 C values (``bench/probes.py``, quiet machine). Only decides where
#: a sweep runs (:attr:`ProbePlan.cpu_s`), so an estimate within a factor of two is enough.
EXACT_S_PER_UNIT = 7e-8
#: At most this many bytes of stored chunks per gathering task (``"last"``/``"pooled"`` cells):
#: each task reads its chunks in one zarr call, which reads them concurrently. One dask task per
#: 4 MiB chunk read a cold 4 GB store at 0.6-0.7x a plain sequential read; 32 chunks per task
#: at 1.0x (docs/measured.md, "Scale-out").
GATHER_BYTES = 128 * 2**20
#: At most this many positions per task: enough work to amortise decoding the layer's chunks
#: (a chunk holds every position), few enough that both threads stay busy.
MAX_BLOCK_POSITIONS = 8


@dataclass
class Cell:
    """The rows of one cell: sequences ``seq`` and positions ``pos`` (m,), their target and
    control class indices, folds and inner groups (for choosing C). ``kind`` is ``"position"``
    (one position; data come as a slab and ``col`` is the slab column), ``"last"`` or
    ``"pooled"`` (data are the gathered rows). ``source`` is, for cells scored at another length, the key of the fitted cell whose
    probes score them."""

    run: str
    length: int
    layer: str
    kind: str
    position: int | None
    seq: np.ndarray
    pos: np.ndarray
    y: np.ndarray
    control: np.ndarray | None
    fold: np.ndarray
    inner: np.ndarray
    col: int | None = None
    source: Any = None

    @property
    def key(self) -> Any:
        """How transfer finds this cell's probes: the position, or ``"last"``/``"pooled"``."""
        return self.position if self.kind == "position" else self.kind

    def where(self) -> str:
        pos = f"position {self.position}" if self.kind == "position" else f"positions {self.kind!r}"
        return f"run {self.run!r}, length {self.length}, layer {self.layer!r}, {pos}"


@dataclass
class Job:
    """The cells of one task and how to treat them."""

    cells: list[Cell]
    method: str
    C: float | tuple[float, ...]
    folds: int
    n_classes: int
    n_sequences: int
    per_sequence: bool
    keep_models: bool = False


class _JobSettings(TypedDict):
    """The :class:`Job` fields shared by every task of one run."""

    method: str
    C: float | tuple[float, ...]
    folds: int
    n_classes: int
    per_sequence: bool


@dataclass
class CellOut:
    """What a task returns per cell (all small). ``weights`` (d, K) and ``bias`` (K,) are the
    probe fitted on all rows, in raw-feature space; ``mean``/``scale`` (d,) its scaler;
    ``selection`` how its C and its folds' C were chosen (fit tasks only)."""

    run: str
    length: int
    layer: str
    kind: str
    position: int | None
    metrics: dict[str, np.ndarray]
    n_test: np.ndarray
    seq_correct: np.ndarray | None
    weights: np.ndarray | None = None
    bias: np.ndarray | None = None
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    n_iter: int = 0
    converged: bool = True
    fitted: bool = False
    selection: Selection | None = None


# ----------------------------------------------------------------------------- tasks


def rows_of(data: np.ndarray, cell: Cell) -> np.ndarray:
    """A cell's hidden states (m, d) as float32, refusing NaN/Inf (never a silent NaN metric)."""
    X = data[cell.seq, cell.col] if cell.col is not None else data
    X = np.asarray(X, dtype=np.float32)  # float16 arithmetic breaks reductions (docs/measured.md)
    if not np.isfinite(X).all():
        raise InvalidArrayError(
            f"hidden states of {cell.where()} contain NaN or Inf; a probe cannot use them. "
            "Recapture that run (did the model diverge?) or leave the layer out with layers=[...]"
        )
    return X


def _out(cell: Cell, scores: Any, job: Job) -> CellOut:
    seq_correct = None
    if job.per_sequence:
        seq_correct = np.bincount(cell.seq[scores.correct], minlength=job.n_sequences).astype(
            np.int32
        )
    return CellOut(
        run=cell.run,
        length=cell.length,
        layer=cell.layer,
        kind=cell.kind,
        position=cell.position,
        metrics=scores.metrics,
        n_test=scores.n_test,
        seq_correct=seq_correct,
    )


def fit_task(data: Any, job: Job) -> tuple[list[CellOut], dict | None]:
    """Fit and cross-validate every cell of ``job`` on its data (a slab or gathered pieces).

    Returns the cells' outputs and, if ``job.keep_models``, their fitted probes by
    :attr:`Cell.key` (for scoring other lengths). The task's cells are fitted in one lockstep
    batch (:func:`~analysis.probes.cells.fit_cells`), but every cell starts from zero (and
    warm-starts only along its own C path) and keeps its own solver state: warm starts from the
    neighbouring position saved no iterations (measured), and without them a cell's result does
    not depend on how positions were grouped into tasks.
    """
    data = np.concatenate(data) if isinstance(data, list) else data
    inputs = [CellInput(rows_of(data, c), c.y, c.control, c.fold, c.inner) for c in job.cells]
    fits = fit_cells(inputs, folds=job.folds, n_classes=job.n_classes, method=job.method, C=job.C)
    outs, models = [], {}
    for cell, (scores, fitted) in zip(job.cells, fits, strict=True):
        out = _out(cell, scores, job)
        full = fitted.params.take(slice(job.folds, job.folds + 1))  # fitted on every row
        w, b = full.original_space()
        out.weights, out.bias = w[0].astype(np.float32), b[0].astype(np.float32)
        out.mean, out.scale = full.mean[0].astype(np.float32), full.scale[0].astype(np.float32)
        out.n_iter, out.fitted = fitted.selection.n_iter, True
        out.converged = fitted.selection.converged
        out.selection = fitted.selection
        outs.append(out)
        if job.keep_models:
            models[cell.key] = fitted
    return outs, (models if job.keep_models else None)


def score_task(data: Any, job: Job, *fitted: dict) -> list[CellOut]:
    """Score every cell of ``job`` with probes fitted at another length (``fitted``: the
    ``keep_models`` outputs of the fit tasks they come from)."""
    data = np.concatenate(data) if isinstance(data, list) else data
    models: dict[Any, CellModels] = {}
    for part in fitted:
        models.update(part)
    return [
        _out(c, score_cell(models[c.source], rows_of(data, c), c.y, c.control, folds=job.folds), job)
        for c in job.cells
    ]


def _take(chunk: np.ndarray, seq: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Rows (seq, pos) of one chunk ``(sequence, position, feature)``, as (m, feature)."""
    return np.asarray(chunk)[seq, pos]


# ----------------------------------------------------------------------------- graph


@dataclass
class ProbePlan:
    """A checked, built, not yet computed probe sweep; :meth:`compute` returns the Dataset."""

    tasks: list
    runs: dict[str, plan.RunPlan]
    options: dict[str, Any]
    fit_lengths: dict[str, list[int]]
    test_lengths: dict[str, list[int]]
    sources: dict[tuple, Any]
    #: Estimated single-thread CPU seconds of the fits (see :data:`EXACT_S_PER_UNIT`): with
    #: ``scheduler=None``, a long sweep runs on worker processes (:mod:`analysis.compute`).
    cpu_s: float = 0.0
    #: Cells of each (run, length), at every one of the run's layers (:mod:`.progress`).
    cell_counts: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Cells of each task of :attr:`tasks`, in order (what a finished task advances progress by).
    task_cells: list[int] = field(default_factory=list)
    #: The run of each task of :attr:`tasks`, in order (:mod:`analysis.probes.resume`).
    task_runs: list[str] = field(default_factory=list)

    def compute(self, scheduler: Any = None, num_workers: int | None = None,
                progress: Progress | None = None):
        """Run the graph on ``scheduler`` (any of :func:`analysis.compute.compute`'s) and
        assemble the result Dataset. ``progress`` (:class:`~analysis.probes.progress.Progress`)
        is told the sweep's size first, then the cells done as tasks finish (local schedulers)."""
        if progress is None:
            return self.assemble(compute(self.tasks, scheduler, num_workers, cpu_s=self.cpu_s))
        progress.start(sweep_size(self, scheduler, num_workers))
        cells_of = {t.key: n for t, n in zip(self.tasks, self.task_cells, strict=True)}
        with counting(cells_of, progress) if is_local(scheduler) else nullcontext():
            results = compute(self.tasks, scheduler, num_workers, cpu_s=self.cpu_s)
        progress.finish()
        return self.assemble(results)

    def assemble(self, results: list):
        """The result Dataset from the computed :attr:`tasks` (in order); for computing them
        together with other graphs in one :func:`analysis.compute.compute` call."""
        return assemble(self, [o for part in results for o in part])


def _position_blocks(cells: list[Cell], n: int, d: int) -> list[list[Cell]]:
    """Consecutive position cells grouped so one block's slab stays under ``BLOCK_BYTES``."""
    per_position = max(1, n * d * 2 * 3)
    size = int(np.clip(BLOCK_BYTES // per_position, 1, MAX_BLOCK_POSITIONS))
    return [cells[i : i + size] for i in range(0, len(cells), size)]


def _gather(layer_array: Any, seq: np.ndarray, pos: np.ndarray, source: Any = None) -> list:
    """Delayed pieces of rows (seq, pos) of a ``(sequence, position, feature)`` dask array;
    concatenated in order they are the rows (``seq`` must be sorted).

    With ``source`` (the group's ``hidden`` as a lazily indexed, dask-free xarray Variable, and
    this layer's index), each piece reads a run of stored chunks (up to :data:`GATHER_BYTES`)
    in one zarr call and keeps only the wanted positions; without it, one piece per stored
    chunk, through the dask array's own tasks.
    """
    bounds = np.cumsum((0,) + tuple(layer_array.chunks[0]))
    if source is None:
        parts = []
        for b, blk in enumerate(layer_array.to_delayed().reshape(-1)):
            sel = (seq >= bounds[b]) & (seq < bounds[b + 1])
            if sel.any():
                parts.append(dask.delayed(_take, pure=True)(blk, seq[sel] - bounds[b], pos[sel]))
        return parts
    var, layer_at = source
    per_row = int(np.prod(layer_array.shape[1:])) * layer_array.dtype.itemsize
    batches: list[tuple[int, int]] = []
    for b in range(len(bounds) - 1):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if batches and (hi - batches[-1][0]) * per_row <= GATHER_BYTES:
            batches[-1] = (batches[-1][0], hi)
        else:
            batches.append((lo, hi))
    parts = []
    for lo, hi in batches:
        sel = (seq >= lo) & (seq < hi)
        if sel.any():
            parts.append(dask.delayed(_read_rows, pure=True)(
                var, layer_at, lo, hi, seq[sel] - lo, pos[sel]))
    return parts


def _read_rows(var: Any, layer_at: int, lo: int, hi: int, seq: np.ndarray,
               pos: np.ndarray) -> np.ndarray:
    """Rows (seq, pos) (relative to sequence ``lo``) of one layer of sequences ``lo:hi``, read
    in one call: only the wanted positions come back, the chunks are read concurrently."""
    cols = np.unique(pos)
    block = np.asarray(var[lo:hi, cols, layer_at, :].values)
    return block[seq, np.searchsorted(cols, pos)]


def _position_of(cell: Cell) -> int:
    """The position of a ``"position"`` cell (always set for that kind)."""
    if cell.position is None:
        raise ValueError(f"position cell has no position: {cell.where()}")
    return cell.position


def cell_jobs(layer_array: Any, cells: list[Cell], source: Any = None):
    """(cells, data) of each task over one layer: slabs of position blocks, gathered rows for
    ``last``/``pooled`` cells (``source``: see :func:`_gather`)."""
    by_position = [c for c in cells if c.kind == "position"]
    n, _, d = layer_array.shape
    for block in _position_blocks(by_position, n, d):
        wanted = [_position_of(c) for c in block]
        if wanted == list(range(wanted[0], wanted[-1] + 1)):
            slab = layer_array[:, wanted[0] : wanted[-1] + 1, :]
        else:  # sparse positions: take only those, not the span between them
            slab = layer_array[:, wanted, :]
        yield [replace(c, col=j) for j, c in enumerate(block)], slab
    for c in cells:
        if c.kind != "position":
            yield [c], _gather(layer_array, c.seq, c.pos, source)


def build_graph(
    runs: dict[str, plan.RunPlan],
    hidden: dict[tuple[str, int], Any],
    cells: dict[tuple[str, int], list[Cell]],
    fit_lengths: dict[str, list[int]],
    test_lengths: dict[str, list[int]],
    *,
    method: str,
    C: float | tuple[float, ...],
    folds: int,
    per_sequence: bool,
    rows_from: dict[tuple[str, int], Any] | None = None,
    sizes: list[int] | None = None,
    owners: list[str] | None = None,
) -> list:
    """Delayed tasks of the whole sweep; each computes to a list of :class:`CellOut`.
    ``rows_from``: per (run, length), ``hidden`` as a dask-free lazy Variable (wrapped in a
    named ``Delayed``), which gathering tasks read many chunks at a time from (:func:`_gather`).
    ``sizes``, if given, gets each task's number of cells appended, in the tasks' order, and
    ``owners`` each task's run."""
    tasks = []
    for run, rp in runs.items():
        common: _JobSettings = {
            "method": method,
            "C": C,
            "folds": folds,
            "n_classes": rp.classes.size,
            "per_sequence": per_sequence,
        }
        for layer in rp.layers:
            models: dict[Any, Any] = {}
            keep = bool(test_lengths[run])
            for L in fit_lengths[run]:
                arr = layer_states(hidden[run, L], layer)
                src = _source(rows_from, hidden, run, L, layer)
                for job_cells, data in cell_jobs(arr, [replace(c, layer=layer) for c in cells[run, L]], src):
                    job = Job(job_cells, keep_models=keep, **common, n_sequences=arr.shape[0])
                    summary, fitted = dask.delayed(fit_task, nout=2, pure=True)(data, job)
                    tasks.append(summary)
                    models.update({c.key: fitted for c in job_cells})
                    if sizes is not None:
                        sizes.append(len(job_cells))
                    if owners is not None:
                        owners.append(run)
            for L in test_lengths[run]:
                arr = layer_states(hidden[run, L], layer)
                src = _source(rows_from, hidden, run, L, layer)
                for job_cells, data in cell_jobs(arr, [replace(c, layer=layer) for c in cells[run, L]], src):
                    deps = list(
                        {id(models[c.source]): models[c.source] for c in job_cells}.values()
                    )
                    job = Job(job_cells, **common, n_sequences=arr.shape[0])
                    tasks.append(dask.delayed(score_task, pure=True)(data, job, *deps))
                    if sizes is not None:
                        sizes.append(len(job_cells))
                    if owners is not None:
                        owners.append(run)
    return tasks


def _source(rows_from: dict | None, hidden: dict, run: str, L: int, layer: str) -> Any:
    """(lazy Variable, layer index) for :func:`_gather`, or None."""
    if rows_from is None or (run, L) not in rows_from:
        return None
    return rows_from[run, L], layer_index(hidden[run, L], layer)


def layer_index(hidden: Any, layer: str) -> int:
    """Where ``layer`` lies along a ``hidden`` DataArray's ``layer`` axis."""
    return [str(v) for v in hidden["layer"].values].index(layer)


def layer_states(hidden: Any, layer: str) -> Any:
    """One layer of a lazy ``hidden`` DataArray as a dask array (sequence, position, feature)."""
    return hidden.data[:, :, layer_index(hidden, layer), :]


# ----------------------------------------------------------------------------- cells


def plan_cells(
    runs: dict[str, plan.RunPlan],
    fit_lengths: dict[str, list[int]],
    test_lengths: dict[str, list[int]],
    mode: str,
    positions: list[int] | None,
    folds: int,
    train_length: int | None,
    target: str,
) -> tuple[dict[tuple[str, int], list[Cell]], dict[tuple, Any]]:
    """The cells of every (run, length), checked; and which probe scores each transfer cell.

    Raises one ``ValueError`` listing every cell that cannot be cross-validated.
    """
    cells: dict[tuple[str, int], list[Cell]] = {}
    sources: dict[tuple, Any] = {}
    problems: list[str] = []
    for run, rp in runs.items():
        for L in fit_lengths[run]:
            lab = rp.labels[L]
            cells[run, L] = length_cells(lab, mode, positions, must_exist=train_length is None)
            if test_lengths[run] and mode in ("all", "list"):
                # the pooled probe scores the positions the train length lacks
                cells[run, L].append(_cell(lab, "pooled", None))
            problems += _check(cells[run, L], lab, folds, rp.classes.size)
        fitted = {c.key for L in fit_lengths[run] for c in cells[run, L]}
        for L in test_lengths[run]:
            cells[run, L] = length_cells(rp.labels[L], mode, positions, must_exist=True)
            for c in cells[run, L]:
                c.source = c.key if c.key in fitted else "pooled"
                sources[run, L, c.key] = c.source
    if problems:
        raise InvalidArgumentError(
            f"cannot cross-validate probes of target {target!r} at {'; '.join(problems[:6])}"
            f"{' ...' if len(problems) > 6 else ''}. Each training fold needs at least two classes "
            "and each fold a labelled sequence: leave those positions out (positions=[...]), "
            "pool them (positions='pooled'), or use fewer folds"
        )
    return cells, sources


def length_cells(
    lab: plan.LengthLabels, mode: str, positions: list[int] | None, must_exist: bool
) -> list[Cell]:
    L = lab.y.shape[1]
    if mode in ("last", "pooled"):
        return [_cell(lab, mode, None)]
    wanted: range | list[int]
    if mode == "all":
        wanted = range(L)
    elif positions is None:
        raise InvalidArgumentError(f"probe mode {mode!r} needs a list of positions")
    else:
        wanted = positions
    if must_exist and mode == "list" and max(wanted) >= L:
        raise InvalidArgumentError(
            f"position {max(wanted)} is out of range for run {lab.run!r} length {L} "
            f"(positions 0..{L - 1}); pass positions below {L}"
        )
    out = [_cell(lab, "position", p) for p in wanted if p < L]
    return [c for c in out if c.seq.size]  # unlabelled positions have no cell (n_test = 0)


def _cell(lab: plan.LengthLabels, kind: str, position: int | None) -> Cell:
    seq, pos = plan.cell_rows(lab, "all" if kind == "position" else kind, position)
    return Cell(
        run=lab.run,
        length=lab.length,
        layer="",
        kind=kind,
        position=position,
        seq=seq.astype(np.int32),  # compact: the graph carries these arrays for every cell
        pos=pos.astype(np.int32),
        y=lab.y[seq, pos].astype(np.int32),
        control=None if lab.control is None else lab.control[seq, pos].astype(np.int32),
        fold=lab.fold[seq].astype(np.int16),
        inner=lab.inner[seq].astype(np.int16),
    )


def _check(cells: list[Cell], lab: plan.LengthLabels, folds: int, n_classes: int) -> list[str]:
    """One line per reason, naming the cells (positions compacted: ``0-2, 7``)."""
    bad: dict[str, list[Any]] = {}
    for c in cells:
        why = plan.check_fit_cell(lab, c.seq, c.pos, folds, n_classes)
        if why is not None:
            bad.setdefault(why, []).append(c.position if c.kind == "position" else c.kind)
    out = []
    for why, where in bad.items():
        ints = [w for w in where if isinstance(w, int)]
        names = [repr(w) for w in where if not isinstance(w, int)]
        listed = ", ".join(
            ([f"position(s) {plan.compact(ints)}"] if ints else []) + [f"positions {n}" for n in names]
        )
        out.append(f"run {lab.run!r} length {lab.length} {listed}: {why}")
    return out


def build(
    store: Any,
    target: str,
    run_ids: list[str],
    *,
    layers: Any,
    mode: str,
    positions: list[int] | None,
    lengths: Any,
    train_length: int | None,
    folds: int,
    C: float | tuple[float, ...],
    method: str,
    control: str | None,
    seed: int,
    per_sequence: bool,
) -> ProbePlan:
    """Check everything and build the graph; nothing is computed (see :func:`analysis.probes.probe`)."""
    runs: dict[str, plan.RunPlan] = {}
    fit_L: dict[str, list[int]] = {}
    test_L: dict[str, list[int]] = {}
    hidden: dict[tuple[str, int], Any] = {}
    rows_from: dict[tuple[str, int], Any] = {}
    for run in run_ids:
        fit_L[run], test_L[run] = plan.choose_lengths(store, run, lengths, train_length)
        for L in fit_L[run] + test_L[run]:
            hidden[run, L] = store.open_length(run, L)["hidden"]
            if mode in ("last", "pooled"):  # their cells gather rows across many chunks
                var = store.open_length(run, L, lazy="xarray")["hidden"].variable
                # named, not tokenized: tokenizing a dask-free Variable reads all of its data
                name = f"hidden-rows-{dask.base.tokenize(str(store.location), run, L)}"
                rows_from[run, L] = dask.delayed(var, name=name)
        first = hidden[run, fit_L[run][0]]
        available = [str(v) for v in first["layer"].values]
        chosen = plan.choose_layers(available, layers, run)
        for L in fit_L[run] + test_L[run]:
            plan.choose_layers([str(v) for v in hidden[run, L]["layer"].values], chosen, run)
        classes, labels = plan.build_labels(
            store, run, fit_L[run], test_L[run], target, control, folds, seed
        )
        runs[run] = plan.RunPlan(run, classes, chosen, int(first.sizes["feature"]), labels)
    cells, sources = plan_cells(runs, fit_L, test_L, mode, positions, folds, train_length, target)
    sizes: list[int] = []
    owners: list[str] = []
    tasks = build_graph(
        runs,
        hidden,
        cells,
        fit_L,
        test_L,
        method=method,
        C=C,
        folds=folds,
        per_sequence=per_sequence,
        rows_from=rows_from or None,
        sizes=sizes,
        owners=owners,
    )
    options = {
        "target": target,
        "method": method,
        "C": C,
        "folds": int(folds),
        "seed": int(seed),
        "control": control,
        "mode": mode,
        "positions": positions,
        "train_length": train_length,
        "per_sequence": per_sequence,
    }
    cpu_s = estimate_cpu_s(runs, cells, fit_L, method=method, C=C)
    counts = {key: len(c) for key, c in cells.items()}
    return ProbePlan(tasks, runs, options, fit_L, test_L, sources, cpu_s, counts, sizes, owners)


def estimate_cpu_s(
    runs: dict[str, plan.RunPlan],
    cells: dict[tuple[str, int], list[Cell]],
    fit_lengths: dict[str, list[int]],
    *,
    method: str,
    C: float | tuple[float, ...],
) -> float:
    """Single-thread CPU seconds the sweep's fits should take with the exact solver or the
    reference one (rows x features x classes x C values of every fitted cell, at every layer);
    ``"screen"`` (closed form, one matrix product per cell) counts as none."""
    if method == "screen":
        return 0.0
    n_C = len(C) if isinstance(C, tuple) else 0.2  # a fixed C skips the inner search
    units = 0.0
    for run, rp in runs.items():
        rows = sum(c.seq.size for L in fit_lengths[run] for c in cells[run, L])
        units += rows * rp.n_features * rp.classes.size * n_C * len(rp.layers)
    return units * EXACT_S_PER_UNIT
