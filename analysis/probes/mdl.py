"""Minimum description length of a label given the hidden states: the online code of Voita &
Titov (2020), with the project's probe and solver.

A cell's labelled rows are transmitted in blocks. The sender and the receiver agree on an order
of the *sequences* (a seeded random permutation, like the folds: a sequence is never split
between blocks) and on block ends at the portions :data:`PORTIONS` of the sequences (0.1%,
0.2%, ..., 50%, 100%). The first block is sent with the uniform code, ``log2 K`` bits per row
(``K`` = the run's classes of the label); every later block is sent with the probe trained on
all the blocks before it, ``-log2 p(y | x)`` bits per row. The sum is the online codelength; the
uniform codelength ``m log2 K`` over the compression ``uniform / online`` says how much the
probe's access to the states saves. A label the states do not carry compresses about 1 (never
much below: each block's probe is no better than the prior, and the prior costs a few bits per
class); a label they carry linearly compresses well above it.

Coding: a block's probe, trained on ``n`` rows, codes with its probability mixed with the
uniform code, ``(1 - w) p + w / K`` with ``w = K / (n + K)`` (:func:`mixture_weight`: as if the
training rows had held one more row of each class). The receiver knows ``n``, so this is a code;
it keeps a class the training blocks never showed at a finite cost (the solvers give it
probability 0), and it fades as the blocks grow: after 1000 rows of 2 classes it costs at most
0.003 bits a row. Without it, a probe trained on the first one or two sequences (0.1% of a few
hundred) put almost all its mass on the classes it saw and a shuffled label "compressed" to
0.8; with it, about 1.

Each block's probe is the accuracy probes' model (standardised features, L2 logistic
regression, :mod:`analysis.probes.solvers`), fitted for all blocks of a cell -- and of all
cells of a task, and the control labelling's blocks beside them -- in one lockstep batch
(:func:`~analysis.probes.solvers.path_exact_many`). With a grid of C (the default
:data:`~analysis.probes.cells.C_GRID`) each block is coded at the C that coded the *previous*
block best (the first coded block at the grid value nearest 1): a choice made only on data the
receiver already has, so the code stays a code; only C values at which the block's fit
converged are eligible. :func:`reference_cell_code` is the plain loop (scikit-learn's
``LogisticRegression`` per block and C, the same rules) it is tested and benchmarked against.

The sweep over a store (which cells, the graph, the stored result) is
:mod:`analysis.probes.mdl_sweep`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cells import choose
from .solvers import PATHS, Params, logits_by_class, path_exact_many

#: Block ends, as portions of the cell's sequences (Voita & Titov's split).
PORTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)
#: The ``purpose`` of :func:`analysis.probes.plan.probe_rng` that draws the transmission order.
ORDER_PURPOSE = 5


def mixture_weight(n_train: int | np.ndarray, n_classes: int) -> np.ndarray:
    """Weight of the uniform code in a block's coding probability: ``K / (n + K)`` for a probe
    trained on ``n`` rows (see the module)."""
    return n_classes / (np.asarray(n_train, dtype=np.float64) + n_classes)


def block_ends(n_sequences: int, portions: Sequence[float] = PORTIONS) -> np.ndarray:
    """Where each block ends, in sequences (ascending, distinct, the last ``n_sequences``): each
    portion of ``n_sequences`` rounded half up, at least 1. A portion that rounds like the one
    before it makes no block of its own (a small cell has fewer blocks)."""
    if n_sequences < 1:
        raise ValueError(f"an online code needs at least one sequence, got {n_sequences}")
    p = np.asarray(portions, dtype=np.float64)
    if p.size == 0 or not np.all(np.diff(p) > 0) or p[0] <= 0 or p[-1] != 1.0:
        raise ValueError(f"portions must ascend strictly from above 0 to 1.0, got {list(portions)!r}")
    ends = np.clip(np.floor(p * n_sequences + 0.5).astype(np.int64), 1, n_sequences)
    return np.unique(ends)


def cell_ranks(global_rank: np.ndarray) -> np.ndarray:
    """The rank (0 ..) of each row's sequence among the cell's own sequences, in the order of
    the length's transmission order ``global_rank`` (each row's sequence's place in it)."""
    uniq = np.unique(global_rank)
    return np.searchsorted(uniq, global_rank)


@dataclass
class CodeInput:
    """One cell: rows ``X (m, d)``, target ``y`` and ``control`` (or None) class indices, and
    ``rank (m,)``, the place of each row's sequence in the transmission order (0 .. S-1, the
    cell's own sequences: :func:`cell_ranks`)."""

    X: np.ndarray
    y: np.ndarray
    control: np.ndarray | None
    rank: np.ndarray


@dataclass
class CellCode:
    """A cell's online code. ``block_bits (B,)`` bits of each block (the first: uniform),
    ``block_end (B,)`` each block's last sequence (exclusive), ``block_C (B,)`` the C each
    block was coded at (NaN for the first); ``control_bits (B,)`` the same for the control
    labelling (None without); ``uniform`` = ``m log2 K``; ``converged``: every block's probe
    at its chosen C met its tolerance."""

    block_bits: np.ndarray
    block_end: np.ndarray
    block_C: np.ndarray
    control_bits: np.ndarray | None
    uniform: float
    n_rows: int
    n_sequences: int
    converged: bool

    @property
    def codelength(self) -> float:
        return float(self.block_bits.sum())

    @property
    def compression(self) -> float:
        return self.uniform / self.codelength

    @property
    def control_codelength(self) -> float:
        return float("nan") if self.control_bits is None else float(self.control_bits.sum())


def block_problems(
    y: np.ndarray, control: np.ndarray | None, rank: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The problems of a cell's code: per labelling (target, then control) one per coded block
    ``b`` = 1 .. B-1, training on the sequences ranked below ``ends[b-1]``. Returns
    ``targets``, ``train`` and ``coded`` (the rows block ``b`` sends), each (P, m)."""
    targets, train, coded = [], [], []
    for lab in [y] + ([control] if control is not None else []):
        for b in range(1, ends.size):
            targets.append(lab)
            train.append(rank < ends[b - 1])
            coded.append((rank >= ends[b - 1]) & (rank < ends[b]))
    m = y.size
    if not targets:  # one block only: everything goes by the uniform code
        return np.zeros((0, m), np.int64), np.zeros((0, m), bool), np.zeros((0, m), bool)
    return np.stack(targets).astype(np.int64), np.stack(train), np.stack(coded)


def coded_bits(params: Params, X: np.ndarray, targets: np.ndarray, train: np.ndarray, coded: np.ndarray,
               n_classes: int) -> np.ndarray:
    """Bits each problem spends on its ``coded`` rows: ``sum -log2((1 - w) p(y|x) + w / K)``,
    ``w`` the :func:`mixture_weight` of its ``train`` rows: (P,), float64 (softmax in float64
    from the float32 logits)."""
    w = mixture_weight(train.sum(1), n_classes)
    P = targets.shape[0]
    out = np.zeros(P)
    for lo in range(0, P, 16):  # a few problems at a time bounds the (p, K, m) logits
        ps = np.arange(lo, min(P, lo + 16))
        rows = np.flatnonzero(coded[ps].any(0))
        if rows.size == 0:
            continue
        z = logits_by_class(params.take(ps), X[rows]).astype(np.float64)  # (p, K, r); -inf unseen
        z -= z.max(1, keepdims=True)
        e = np.exp(z)
        prob = np.take_along_axis(e, targets[ps][:, rows][:, None, :], 1)[:, 0] / e.sum(1)
        bits = -np.log2((1.0 - w[ps, None]) * prob + w[ps, None] / n_classes)
        out[ps] = (bits * coded[ps][:, rows]).sum(1)
    return out


def _start_index(grid: np.ndarray) -> int:
    """The grid value nearest 1 (in log): the first coded block's C."""
    return int(np.argmin(np.abs(np.log(grid))))


def _choose_blocks(bits: np.ndarray, conv: np.ndarray, grid: np.ndarray, n_blocks: int, labellings: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Per labelling, each coded block's C (the one that coded the block before best, among
    those its own fit converged at): ``bits (nC, P)``, ``conv (nC, P)``. Returns the block bits
    (labellings, n_blocks - 1), the chosen C of the target's blocks, their indices, and whether
    every chosen fit converged."""
    nb = n_blocks - 1
    out = np.zeros((labellings, nb))
    chosen = np.zeros((labellings, nb), dtype=np.int64)
    ok = True
    for li in range(labellings):
        for b in range(nb):
            p = li * nb + b
            if grid.size == 1:
                j = 0
            elif b == 0:
                j = _start_index(grid)
                if not conv[j, p] and conv[:, p].any():  # nearest converged value instead
                    cand = np.flatnonzero(conv[:, p])
                    j = int(cand[np.argmin(np.abs(np.log(grid[cand])))])
            else:
                j = choose(bits[:, p - 1], conv[:, p])
            chosen[li, b] = j
            out[li, b] = bits[j, p]
            ok &= bool(conv[j, p])
    return out, grid[chosen[0]], chosen, ok


def cell_codes(cells: Sequence[CodeInput], n_classes: int, C: float | Sequence[float], *,
               method: str = "exact", portions: Sequence[float] = PORTIONS) -> list[CellCode]:
    """The online code of each cell (one width and class count: one layer of one run or task);
    with ``method="exact"`` every block of every cell is fitted in one lockstep batch, along
    the C grid with warm starts (``"reference"``: :func:`~analysis.probes.solvers.path_reference`
    per cell, the same problems one at a time)."""
    grid = np.sort(np.atleast_1d(np.asarray(C, dtype=np.float64)))
    if method not in ("exact", "reference"):
        raise ValueError(f"an online code is fitted with method 'exact' or 'reference', got {method!r}")
    setups = []
    for c in cells:
        n_seq = int(c.rank.max()) + 1 if c.rank.size else 0
        ends = block_ends(n_seq, portions)
        targets, train, coded = block_problems(c.y, c.control, c.rank, ends)
        setups.append((np.asarray(c.X, dtype=np.float32), targets, train, coded, ends, n_seq))
    fit = [i for i, s in enumerate(setups) if s[1].shape[0]]
    paths: dict[int, list[Params]] = {}
    if fit and method == "exact":
        done = path_exact_many([setups[i][:3] for i in fit], n_classes, [float(g) for g in grid])
        paths = dict(zip(fit, done, strict=True))
    elif fit:
        paths = {i: PATHS[method](*setups[i][:3], n_classes, [float(g) for g in grid]) for i in fit}
    log2k = float(np.log2(n_classes))
    out = []
    for i, (c, (X, targets, train, coded, ends, n_seq)) in enumerate(zip(cells, setups, strict=True)):
        first = np.count_nonzero(c.rank < ends[0]) * log2k
        labellings = 1 + (c.control is not None)
        if i in paths:
            path = paths[i]
            bits = np.stack([coded_bits(p, X, targets, train, coded, n_classes) for p in path])
            conv = np.stack([p.converged for p in path])
            blocks, block_C, _, ok = _choose_blocks(bits, conv, grid, ends.size, labellings)
        else:
            blocks, block_C, ok = np.zeros((labellings, 0)), np.zeros(0), True
        target_bits = np.concatenate([[first], blocks[0]])
        control_bits = np.concatenate([[first], blocks[1]]) if c.control is not None else None
        out.append(CellCode(target_bits, ends, np.concatenate([[np.nan], block_C]), control_bits,
                            c.y.size * log2k, int(c.y.size), n_seq, ok))
    return out


# ----------------------------------------------------------------------------- the plain loop


def reference_cell_code(X: np.ndarray, y: np.ndarray, rank: np.ndarray, n_classes: int,
                        C: float | Sequence[float], *, portions: Sequence[float] = PORTIONS,
                        tol: float = 1e-4, max_iter: int = 200) -> CellCode:
    """The online code the obvious way: for each block, ``StandardScaler`` and scikit-learn's
    ``LogisticRegression`` (float64, each C fitted from scratch) on the rows before it, then
    ``predict_proba`` on the block. The same blocks, coding, and choice of C as
    :func:`cell_codes` (target only)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    grid = np.sort(np.atleast_1d(np.asarray(C, dtype=np.float64)))
    n_seq = int(rank.max()) + 1
    ends = block_ends(n_seq, portions)
    X64 = np.asarray(X, dtype=np.float64)
    nb = ends.size - 1
    bits = np.zeros((grid.size, nb))
    conv = np.ones((grid.size, nb), dtype=bool)
    for b in range(nb):
        train = rank < ends[b]
        code = (rank >= ends[b]) & (rank < ends[b + 1])
        sc = StandardScaler().fit(X64[train])
        Xt, Xc, yt = sc.transform(X64[train]), sc.transform(X64[code]), y[train]
        classes = np.unique(yt)
        w = float(mixture_weight(yt.size, n_classes))
        for j, c in enumerate(grid):
            prob = np.zeros((Xc.shape[0], n_classes))
            if classes.size == 1:
                prob[:, classes[0]] = 1.0
            else:
                lr = LogisticRegression(C=float(c), tol=tol, max_iter=max_iter)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lr.fit(Xt, yt)
                conv[j, b] = int(np.max(lr.n_iter_)) < max_iter
                prob[:, lr.classes_] = lr.predict_proba(Xc)
            p_true = prob[np.arange(Xc.shape[0]), y[code]]
            bits[j, b] = float(-np.log2((1 - w) * p_true + w / n_classes).sum())
    blocks, block_C, _, ok = _choose_blocks(bits, conv, grid, ends.size, 1) if nb else (
        np.zeros((1, 0)), np.zeros(0), None, True)
    first = np.count_nonzero(rank < ends[0]) * np.log2(n_classes)
    return CellCode(np.concatenate([[first], blocks[0]]), ends, np.concatenate([[np.nan], block_C]), None,
                    y.size * float(np.log2(n_classes)), int(y.size), n_seq, ok)
