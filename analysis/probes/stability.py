"""Cross-seed stability of what a probe found: at each layer, how alike the probe subspaces of
independently trained seeds are, once their states are put in one coordinate system.

Why an alignment. Two seeds of one architecture are separately trained networks; nothing ties
feature 7 of one to feature 7 of the other (a recurrent or residual layer has no privileged
basis: any rotation of its states, undone by the next layer's weights, is the same network).
Raw probe weight vectors of two seeds are therefore as alike as two random directions whatever
the models learned, and comparing them directly measures nothing. Both runs' states on the
*same* input sequences are needed to find the rotation between them:

* **shared sequences**: rows both runs hold (identical token rows) -- a store whose seeds
  were captured on the same evaluation sequences;
* **re-run** (layerstate's own stores): capture draws each seed's evaluation sequences from
  its own seed, so two seeds share none; run seed b's stored model on seed a's stored tokens
  (and a's on b's), so each has its partner's states on its own sequences.

The map. On one half of the sequences (every labelled position), centred states ``A`` of one
run and ``B`` of the other give the orthogonal Procrustes rotation ``R`` minimising
``||s A R - B||`` (one SVD of the ``d x d`` cross-product; ``s`` a scale). Orthogonal, so a
direction maps as the states do and angles are kept: the overlap of unrelated directions stays
at its null. The other half scores the map: ``alignment_r2`` = the share of ``B``'s centred
variance that ``s A R`` predicts on sequences the map never saw. A low value means there is no
rotation between the seeds' layers, and then the overlap says little either way.

The overlap. A probe's classes' weight rows, centred over classes (a shift common to all
classes changes no softmax), span its subspace: ``k = classes - 1`` directions. Seed a's rows
are mapped by ``R``; with ``Q_a, Q_b`` orthonormal bases the principal angles ``theta_i``
between the subspaces have ``cos theta_i`` the singular values of ``Q_a^T Q_b``, and the
overlap is their mean squared cosine (``||Q_a^T Q_b||_F^2 / min(k_a, k_b)``, in [0, 1]:
1 the same subspace, 0 orthogonal). Null: two random subspaces of dimensions ``k_a, k_b`` in
the layer's width ``d`` have expected overlap ``max(k_a, k_b) / d`` (``k/d``; 1/d for binary
probes). With a re-run, the pair's value is the mean of the two maps (fitted on a's and on
b's sequences). ``raw_overlap``, without the map, is kept as the check that alignment matters.

The shuffled-label null. Where two seeds hold the same sequences, both seeds' probes are fitted
on the same rows and labels; at a layer that does not carry the label each probe fits chance
structure of those rows, which after the map is largely the same in both seeds, so the overlap
reads high there too (and at an embedding whose states take a few values, any probe lies in
their span). So each pair is also measured on labels that mean nothing: the label permuted across
sequences (at each position, among the sequences labelled there), the same permutation for both
seeds, probes refitted at each run's stored C on the rows the map uses, mapped by the same maps
and compared the same way. :data:`SHUFFLES` permutations give a band: per permutation the mean
over the cell's pairs, its central 95% stored (``shuffled_*``). The probed label, where a layer
lacks it, is itself one such labelling, so it is the band's upper end -- not its mean -- that
the overlap's interval must clear: "the seeds agree" reads the lower end above both nulls
(:func:`agreement_frame`).

Over seeds. A cell (task, arch, variant) with ``n`` seeds has ``n(n-1)/2`` pairs; the estimate
is the mean overlap over pairs, a U-statistic whose pairs share seeds, so the pairs are not
independent data. Each seed's summary is its jackknife pseudo-value
``n U - (n-1) U_(-i)`` (``U_(-i)``: the mean over the pairs without seed i), equal to
``U + 2(n-1)/(n-2) (m_i - U)`` with ``m_i`` the seed's mean overlap with the others: their mean
is ``U`` and the t interval over them is the jackknife interval of the pair mean -- about twice
as wide as a t over the ``m_i``, which forgets that every pair counts twice. So the stored
interval and a claim (``metric = "probe_stability"``: the t or the sign test over seeds) both
test over seeds, at least 3 of them; 2 seeds make one pair and no interval.

The sweep reads the full-data probes a probe result stores (``weights``: no refit of the real
label) and refits only the null's probes; a re-run adds two forwards of the models per pair and
length (:attr:`StabilityPlan.cpu_s`). Named
``stability/<probe result's name>`` with the probe result it read::

    from analysis.probes import probe_stability
    ds = probe_stability("acts.zarr", "probes/parity", save=True)
    ds.overlap_profile.sel(length=40)          # per seed pair and layer
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.stats
import xarray as xr

#: Sequences both runs must hold for the map to be fitted on stored states alone.
MIN_SHARED = 32
#: At most this many sequences (every labelled position of each) feed one map.
MAP_SEQUENCES = 512
#: How a pair's two runs get states on the same sequences: "auto" (shared sequences, else a
#: re-run), "shared" or "rerun".
INPUTS = ("auto", "shared", "rerun")
#: Label permutations whose refitted probes give the shuffled-label null (their overlaps averaged).
SHUFFLES = 20
#: Single-thread CPU seconds per (row x feature^2) of a map (the cross-product and the held-out
#: score, every labelled row of the sequences it uses). This and the two below were measured on the
#: quick demo store (3 tasks x 5 architectures x 2 seeds, 192 sequences of length 40, pooled
#: probes, re-run: 23.1 s of CPU on a loaded 2-core machine, of which maps 0.8 s, null probes
#: 7.4 s, re-runs 6.2 s); they decide nothing, they are what the command announces.
S_PER_UNIT = 3e-10
#: ... per (row x feature x class x shuffle) of the shuffled-label null's probes (one lockstep fit
#: of every shuffle at the run's stored C).
NULL_S_PER_UNIT = 2e-9
#: ... per token of a re-run forward (the mean over the demo's five architectures: 1e-5 for the
#: LSTM up to 4e-5 for the Mamba, whose scan is a Python loop on the CPU).
RERUN_S_PER_TOKEN = 2.7e-5
#: The whole sweep over the three parts above: reading the stored states and labels, the
#: overlaps (23.1 s against 14.4 s on the demo store).
OVERHEAD = 1.6


# ----------------------------------------------------------------------------- the measure
def probe_subspace(weights: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
    """An orthonormal basis ``(d, k)`` of the span of a probe's class weight rows ``(class, d)``
    centred over classes (rows with NaN are classes the run does not have). ``k`` is the
    rank: classes - 1 for a fitted probe, 0 for none."""
    W = np.asarray(weights, dtype=np.float64)
    W = W[np.isfinite(W).all(1)]
    if W.shape[0] < 2:
        return np.zeros((W.shape[1], 0))
    W = W - W.mean(0)
    _, s, vt = np.linalg.svd(W, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return np.zeros((W.shape[1], 0))
    return vt[s > rtol * s[0]].T


def overlap(Qa: np.ndarray, Qb: np.ndarray) -> float:
    """Mean squared cosine of the principal angles between two subspaces (orthonormal bases
    ``(d, k)``): ``||Qa^T Qb||_F^2 / min(k_a, k_b)``; NaN when either is empty."""
    k = min(Qa.shape[1], Qb.shape[1])
    if k == 0:
        return float("nan")
    return float(np.sum((Qa.T @ Qb) ** 2) / k)


def null_overlap(k_a: int, k_b: int, d: int) -> float:
    """The expected :func:`overlap` of uniformly random subspaces of dimensions ``k_a, k_b`` in
    ``R^d``: ``E||Qa^T Qb||_F^2 = k_a k_b / d`` over ``min(k_a, k_b)`` angles."""
    if min(k_a, k_b) == 0:
        return float("nan")
    return max(k_a, k_b) / d


@dataclass
class Alignment:
    """An orthogonal map ``R (d, d)`` of one run's centred states onto another's, its scale
    and the share of the target's variance it predicts on held-out sequences."""

    R: np.ndarray
    scale: float
    r2: float


def fit_alignment(A_fit: np.ndarray, B_fit: np.ndarray, A_test: np.ndarray, B_test: np.ndarray,
                  groups: tuple[np.ndarray, np.ndarray] | None = None) -> Alignment:
    """Orthogonal Procrustes of centred ``A_fit`` onto centred ``B_fit`` (rows: the same inputs
    in both runs), scored on ``A_test``/``B_test``. ``groups`` (fit rows', test rows' label):
    each row is centred by its label's mean over the fit rows instead of the overall mean, so
    the map never sees the label (see the module)."""
    A_fit, B_fit = np.asarray(A_fit, np.float64), np.asarray(B_fit, np.float64)
    A_test, B_test = np.asarray(A_test, np.float64), np.asarray(B_test, np.float64)
    gf, gt = groups if groups is not None else (np.zeros(len(A_fit), np.int64), np.zeros(len(A_test), np.int64))
    Ac, Bc, At, Bt = A_fit.copy(), B_fit.copy(), A_test.copy(), B_test.copy()
    ma_all, mb_all = A_fit.mean(0), B_fit.mean(0)
    for g in np.unique(np.concatenate([gf, gt])):
        f, t = gf == g, gt == g
        ma, mb = (A_fit[f].mean(0), B_fit[f].mean(0)) if f.any() else (ma_all, mb_all)
        Ac[f] -= ma
        Bc[f] -= mb
        At[t] -= ma
        Bt[t] -= mb
    R, sv = scipy.linalg.orthogonal_procrustes(Ac, Bc)
    norm = float(np.sum(Ac ** 2))
    s = float(sv) / norm if norm > 0 else 0.0
    tot = float(np.sum(Bt ** 2))
    r2 = 1.0 - float(np.sum((s * At @ R - Bt) ** 2)) / tot if tot > 0 else float("nan")
    return Alignment(R, s, r2)


def aligned_overlap(Wa: np.ndarray, Wb: np.ndarray, R: np.ndarray | None) -> tuple[float, float, float]:
    """``(overlap, raw overlap, null)`` of probes ``Wa``, ``Wb`` (class, d): seed a's rows mapped
    by ``R`` (a's coordinates to b's) first, and without the map."""
    Qa, Qb = probe_subspace(Wa), probe_subspace(Wb)
    mapped = Qa if R is None else probe_subspace(np.asarray(Wa, np.float64) @ R)
    return overlap(mapped, Qb), overlap(Qa, Qb), null_overlap(Qa.shape[1], Qb.shape[1], Qb.shape[0])


# ----------------------------------------------------------------------------- over seeds
def jackknife_pseudo(pairs: np.ndarray) -> np.ndarray:
    """Per-seed jackknife pseudo-values ``n U - (n-1) U_(-i)`` of the mean ``U`` of a symmetric
    ``(n, n)`` matrix of pair values (diagonal ignored); NaN for fewer than 3 seeds."""
    P = np.asarray(pairs, dtype=np.float64)
    n = P.shape[0]
    if n < 3:
        return np.full(n, np.nan)
    off = ~np.eye(n, dtype=bool)
    U = P[off].mean()
    m = np.where(off, P, 0.0).sum(1) / (n - 1)
    return U + 2.0 * (n - 1) / (n - 2) * (m - U)


def seed_interval(pairs: np.ndarray, ci_level: float = 0.95) -> tuple[float, float, float, int, str]:
    """``(estimate, lower, upper, n_seeds, method)`` of the mean pair value: the t interval over
    the seeds' :func:`jackknife_pseudo` values, clipped to [0, 1] (an overlap's range); with 2
    seeds the one pair's value and no interval."""
    P = np.asarray(pairs, dtype=np.float64)
    n = P.shape[0]
    if n < 2:
        return float("nan"), float("nan"), float("nan"), n, ""
    est = float(P[~np.eye(n, dtype=bool)].mean())
    if n == 2:
        return est, float("nan"), float("nan"), 2, "one pair"
    ps = jackknife_pseudo(P)
    half = float(scipy.stats.t.ppf(0.5 + ci_level / 2, n - 1) * ps.std(ddof=1) / np.sqrt(n))
    return est, max(0.0, est - half), min(1.0, est + half), n, "jackknife t over seeds"


# ----------------------------------------------------------------------------- the sweep
@dataclass
class PairPlan:
    """Two runs of one cell, and per length how they get states on the same sequences:
    ``("shared", ia, ib)`` (rows of each run's stored sequences that match) or ``("rerun",)``."""

    a: str
    b: str
    cell: tuple[str, str, str]
    sources: dict[int, tuple] = field(default_factory=dict)


@dataclass
class StabilityPlan:
    """A checked stability sweep; :meth:`compute` returns the Dataset."""

    store: Any
    result: str
    probes: xr.Dataset
    pairs: list[PairPlan]
    lengths: list[int]
    layers: list[str]
    options: dict[str, Any]
    target: str = ""

    @property
    def reruns(self) -> int:
        return sum(s[0] == "rerun" for p in self.pairs for s in p.sources.values())

    @property
    def cpu_s(self) -> float:
        """Roughly the single-thread CPU seconds of :meth:`compute` (maps, null probes, re-runs)."""
        width = {str(r): int(v) for r, v in zip(self.probes.run.values, self.probes["n_features"].values,
                                                  strict=True)}
        classes = int(self.probes.sizes.get("class", 2))
        per_position = int(self.probes.sizes.get("position", 0))
        pooled = str(self.probes.attrs.get("positions", "")) == "pooled"
        total, fitted = 0.0, set()
        for pp in self.pairs:
            d = max(width[pp.a], width[pp.b])
            for L in self.lengths:
                n = min(MAP_SEQUENCES, int(self.store.open_length(pp.a, L).sizes["sequence"]))
                views = 1 if pp.sources[L][0] == "shared" else 2
                total += views * len(self.layers) * n * L * d * d * S_PER_UNIT
                total += (views - 1) * 2 * n * L * RERUN_S_PER_TOKEN
                probe_rows = n * (L if pooled else max(1, per_position))
                for r in (pp.a, pp.b):
                    if (r, L) not in fitted:  # a run's null probes serve all its pairs
                        fitted.add((r, L))
                        total += (len(self.layers) * probe_rows * width[r] * classes * self.options["shuffles"]
                                  * NULL_S_PER_UNIT)
        return total * OVERHEAD

    def compute(self) -> xr.Dataset:
        return _compute(self)


def _cells(store: Any, runs: Sequence[str]) -> dict[tuple[str, str, str], list[str]]:
    from analysis.intervals import factor_table

    table = factor_table(store, runs)
    out: dict[tuple[str, str, str], list[str]] = {}
    for run, row in table.sort_values("seed").iterrows():
        out.setdefault((str(row["task"]), str(row["arch"]), str(row["variant"])), []).append(str(run))
    return out


def _tokens(store: Any, run: str, L: int) -> np.ndarray:
    return np.asarray(store.open_length(run, L)["tokens"].values)


def _source(store: Any, a: str, b: str, L: int, inputs: str) -> tuple:
    """How runs ``a`` and ``b`` get states on the same sequences at length ``L`` (see
    :class:`PairPlan`), or a one-line error saying why they cannot and what to do."""
    from store.errors import InvalidArgumentError

    ta, tb = _tokens(store, a, L), _tokens(store, b, L)
    index = {row.tobytes(): i for i, row in enumerate(tb)}
    ia = [i for i, row in enumerate(ta) if row.tobytes() in index]
    ib = [index[ta[i].tobytes()] for i in ia]
    if inputs != "rerun" and len(ia) >= MIN_SHARED:
        return ("shared", np.asarray(ia[:MAP_SEQUENCES]), np.asarray(ib[:MAP_SEQUENCES]))
    missing = [r for r in (a, b) if not store.has_weights(r)]
    share = f"runs {a} and {b} share {len(ia)} evaluation sequences at length {L}"
    if inputs == "shared":
        raise InvalidArgumentError(f"{share}, and a map needs {MIN_SHARED}; leave --inputs at auto (or rerun) to "
                                   "run each model on the other's sequences")
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        fix = ("leave --inputs at auto to use them" if len(ia) >= MIN_SHARED else
               "capture the seeds on the same sequences, or train them with `layerstate train`")
        raise InvalidArgumentError(f"{share} (a map needs {MIN_SHARED}) and {', '.join(missing)} {verb} no stored "
                                   f"weights to re-run on the other's sequences: {fix}")
    return ("rerun",)


def plan_stability(
    store: Any,
    result: str | None = None,
    *,
    runs: Any = None,
    layers: Any = None,
    lengths: Any = None,
    seed: int = 0,
    inputs: str = "auto",
    shuffles: int = SHUFFLES,
) -> StabilityPlan:
    """Check a stability sweep over the probe result ``result`` (default: the one probe result
    of the selected runs' task) and decide each pair's inputs, computing nothing (arguments:
    :func:`probe_stability`)."""
    from store import MissingError, Store, schema
    from store.errors import InvalidArgumentError

    from . import plan as sweep_plan
    from .results import runs_by_task

    st = Store.open(store) if isinstance(store, str) else store
    if inputs not in INPUTS:
        raise InvalidArgumentError(f"inputs must be one of {', '.join(INPUTS)}, got {inputs!r}")
    if int(shuffles) < 1:
        raise InvalidArgumentError(f"shuffles must be at least 1 (the shuffled-label null needs a permutation), "
                                   f"got {shuffles}")
    chosen = sweep_plan.select_runs(st, runs)
    if result is None:
        tasks = list(runs_by_task(st, chosen))
        if len(tasks) != 1:
            raise InvalidArgumentError(f"the runs are of {len(tasks)} tasks ({', '.join(tasks)}); name the "
                                       "probe result (e.g. probes/<task>) or select one task's runs")
        result = schema.probe_name(tasks[0])
    result = schema.result_name(schema.PROBES, result)
    if result not in st.results():
        have = [n for n in st.results() if n.startswith(f"{schema.PROBES}/")]
        raise MissingError(f"no probe result {result} in {st.location} (have: {', '.join(have) or 'none'}); "
                           f"run `layerstate probe STORE` first, or name one of those")
    ds = st.read_result(result)
    if "weights" not in ds:
        raise MissingError(f"{result} stores no probe weights; probe again with `layerstate probe STORE`")
    in_result = [str(r) for r in ds.run.values]
    runs_used = [r for r in chosen if r in in_result]
    fit_lengths = [int(v) for v in ds.fit_length.values]
    lens = fit_lengths if lengths is None else [int(v) for v in np.atleast_1d(lengths)]
    bad = [L for L in lens if L not in fit_lengths]
    if bad:
        raise InvalidArgumentError(f"{result} fitted no probes at length {bad[0]}; its fit lengths: "
                                   f"{', '.join(map(str, fit_lengths))}")
    all_layers = [str(v) for v in ds.layer.values]
    lays = all_layers if layers is None else [str(v) for v in ([layers] if isinstance(layers, str) else layers)]
    bad_l = [x for x in lays if x not in all_layers]
    if bad_l:
        raise InvalidArgumentError(f"{result} has no layer {bad_l[0]}; its layers: {', '.join(all_layers)}")
    pairs = []
    for cell, members in _cells(st, runs_used).items():
        for a, b in itertools.combinations(members, 2):
            pp = PairPlan(a, b, cell)
            for L in lens:
                pp.sources[L] = _source(st, a, b, L, inputs)
            pairs.append(pp)
    if not pairs:
        raise InvalidArgumentError(f"no (task, arch, variant) of {result} has two seeds among the selected runs: "
                                   "stability compares seeds; train and probe at least two")
    options = {"seed": int(seed), "inputs": inputs, "shuffles": int(shuffles)}
    return StabilityPlan(st, result, ds, pairs, lens, lays, options, str(ds.attrs["target"]))


def _split(seed: int, a: str, b: str, L: int, n: int) -> np.ndarray:
    """A seeded half of ``n`` sequences (True: the map's fit half)."""
    rng = np.random.default_rng([int(seed), zlib.crc32(f"{a}|{b}".encode()), int(L), 57])
    out = np.zeros(n, dtype=bool)
    out[rng.permutation(n)[: n // 2]] = True
    return out


def _stored(store: Any, run: str, L: int, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """A run's stored hidden (sequence, position, layer, feature) and mask at ``rows``
    (default its first :data:`MAP_SEQUENCES` sequences)."""
    g = store.open_length(run, L)
    n = g.sizes["sequence"]
    idx = np.arange(min(n, MAP_SEQUENCES)) if rows is None else np.asarray(rows)
    hidden = np.asarray(g["hidden"].isel(sequence=idx).values, dtype=np.float32)
    mask = (np.asarray(g["mask"].isel(sequence=idx).values, dtype=bool) if "mask" in g
            else np.ones(hidden.shape[:2], dtype=bool))
    return hidden, mask


def _rerun(store: Any, run: str, tokens: np.ndarray, layers: list[str]) -> np.ndarray:
    """``run``'s model's hidden (sequence, position, layer, feature) on ``tokens``."""
    import torch

    from capture.rebuild import rebuild_model
    from store.errors import InvalidArgumentError

    model = rebuild_model(store, run)
    if list(model.layer_names) != layers:
        raise InvalidArgumentError(f"run {run}'s rebuilt model has layers {model.layer_names}, its store "
                                   f"{layers}; re-capture it with `layerstate capture`")
    out = []
    with torch.no_grad():
        for lo in range(0, tokens.shape[0], 128):
            _, hd = model.forward_with_hidden(torch.as_tensor(tokens[lo:lo + 128], dtype=torch.long))
            out.append(hd.float().numpy())
    return np.concatenate(out)


def _views(plan: StabilityPlan, pp: PairPlan, L: int) -> list[tuple[np.ndarray, ...]]:
    """``(hidden_a, hidden_b, mask, label)`` on the same sequences: one view from shared sequences, two
    from a re-run (a's sequences, then b's)."""
    st = plan.store
    src = pp.sources[L]
    if src[0] == "shared":
        ha, mask = _stored(st, pp.a, L, src[1])
        hb, _ = _stored(st, pp.b, L, src[2])
        return [(ha, hb, mask, _labels(plan, pp.a, L)[src[1]])]
    layer_names = [str(v) for v in st.open_length(pp.a, L)["layer"].values]
    out: list[tuple[np.ndarray, ...]] = []
    for own, other in ((pp.a, pp.b), (pp.b, pp.a)):
        h_own, mask = _stored(st, own, L, None)
        toks = _tokens(st, own, L)[: h_own.shape[0]]
        h_other = _rerun(st, other, toks, layer_names)
        lab = _labels(plan, own, L)[: h_own.shape[0]]
        out.append((h_own, h_other, mask, lab) if own == pp.a else (h_other, h_own, mask, lab))
    return out


def _labels(plan: StabilityPlan, run: str, L: int) -> np.ndarray:
    """The probed label of ``run``'s sequences (sequence, position), -1 where unlabelled."""
    from .plan import read_labels

    return np.asarray(read_labels(plan.store, run, L, plan.target)[0])


def _weights(ds: xr.Dataset, run: str, L: int, layer: str) -> xr.DataArray:
    d = int(ds["n_features"].sel(run=run))
    return ds["weights"].sel(run=run, fit_length=L, layer=layer).isel(feature=slice(0, d))


def _compute(plan: StabilityPlan) -> xr.Dataset:
    ds = plan.probes
    positions = [int(p) for p in ds.position.values] if "position" in ds["weights"].dims else []
    P, nL, nY, nQ = len(plan.pairs), len(plan.lengths), len(plan.layers), max(1, len(positions))
    ov, raw, null = (np.full((P, nL, nY, nQ), np.nan) for _ in range(3))
    shuffled = np.full((P, nL, nY, nQ, plan.options["shuffles"]), np.nan)
    r2 = np.full((P, nL, nY), np.nan)
    n_seq = np.zeros((P, nL), np.int64)
    source = np.full((P, nL), "", dtype=object)
    stored_layers = None
    nulls = _NullProbes(plan, positions)
    for p, pp in enumerate(plan.pairs):
        for j, L in enumerate(plan.lengths):
            views = _views(plan, pp, L)
            source[p, j] = pp.sources[L][0]
            n_seq[p, j] = sum(v[0].shape[0] for v in views)
            if stored_layers is None:
                stored_layers = [str(v) for v in plan.store.open_length(pp.a, L)["layer"].values]
            for k, layer in enumerate(plan.layers):
                li = stored_layers.index(layer)
                Wa, Wb = _weights(ds, pp.a, L, layer), _weights(ds, pp.b, L, layer)
                maps = []
                for ha, hb, mask, lab in views:
                    fit = _split(plan.options["seed"], pp.a, pp.b, L, ha.shape[0])
                    rows_f, rows_t = mask & fit[:, None], mask & ~fit[:, None]
                    maps.append(fit_alignment(ha[:, :, li][rows_f], hb[:, :, li][rows_f],
                                              ha[:, :, li][rows_t], hb[:, :, li][rows_t],
                                              (lab[rows_f], lab[rows_t])))
                r2[p, j, k] = float(np.mean([m.r2 for m in maps]))
                for q in range(nQ):
                    wa = Wa.isel(position=q).values if positions else Wa.values
                    wb = Wb.isel(position=q).values if positions else Wb.values
                    if not (np.isfinite(wa).any() and np.isfinite(wb).any()):
                        continue
                    vals = [aligned_overlap(wa, wb, m.R) for m in maps]
                    ov[p, j, k, q] = float(np.mean([v[0] for v in vals]))
                    raw[p, j, k, q], null[p, j, k, q] = vals[0][1], vals[0][2]
                    shuffled[p, j, k, q] = nulls.overlaps(pp, L, layer, li, q, views, maps)
    return _dataset(plan, positions, ov, raw, null, shuffled, r2, n_seq, source)


class _NullProbes:
    """The shuffled-label null: probes refitted, at the C their run's stored probe was fitted
    with, on the same run's states with the label permuted across sequences (at each position,
    among the sequences labelled there, as the probes' ``permute`` control does). Permutation
    ``s`` is drawn once per (cell, length), so both seeds of a pair -- every seed of the cell,
    when they hold their sequences in one order -- get the same permuted label: each shuffle is
    one random labelling, probed in every seed the way the real label was. A run's probes of all
    shuffles are fitted in one lockstep batch, once per rows, and kept for its other pairs."""

    def __init__(self, plan: StabilityPlan, positions: list[int]) -> None:
        self.plan, self.positions = plan, positions
        self.mode = "position" if positions else str(plan.probes.attrs.get("positions", "pooled"))
        self.cache: dict[tuple, np.ndarray] = {}

    def overlaps(self, pp: PairPlan, L: int, layer: str, li: int, q: int, views: list[tuple[np.ndarray, ...]],
                 maps: list[Alignment]) -> np.ndarray:
        """Per shuffle, the mean over the pair's maps of the overlap of its null probes (a's from its
        states in the first view, b's from its states in the last: the sequences each one's own
        probe was fitted on when re-running, the shared ones otherwise); NaN where none was fitted."""
        wa = self._probes(pp, pp.a, L, layer, q, views[0][0][:, :, li], views[0][2], views[0][3])
        wb = self._probes(pp, pp.b, L, layer, q, views[-1][1][:, :, li], views[-1][2], views[-1][3])
        out = np.full(self.plan.options["shuffles"], np.nan)
        if wa.size and wb.size:
            for s in range(out.size):
                out[s] = float(np.mean([aligned_overlap(wa[s], wb[s], m.R)[0] for m in maps]))
        return out

    def _rows(self, lab: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
        from .plan import last_positions

        if self.mode == "last":
            last = last_positions(lab)
            seq = np.flatnonzero(last >= 0)
            return seq, last[seq]
        if self.mode == "position":
            seq = np.flatnonzero(lab[:, self.positions[q]] >= 0)
            return seq, np.full(seq.size, self.positions[q])
        seq, pos = np.nonzero(lab >= 0)
        return seq, pos

    def _probes(self, pp: PairPlan, run: str, L: int, layer: str, q: int, hidden: np.ndarray, mask: np.ndarray,
                lab: np.ndarray) -> np.ndarray:
        """``run``'s null probes (shuffle, class, d) on ``hidden`` (sequence, position, d); empty
        when its stored probe has no C (not fitted) or the label a single class."""
        from .solvers import path_exact

        at = dict(run=run, fit_length=L, layer=layer, **({"position": self.positions[q]} if self.positions else {}))
        C = float(self.plan.probes["C"].sel(at)) if "C" in self.plan.probes else 1.0
        lab = np.where(mask & (lab >= 0), lab, -1)
        seq, pos = self._rows(lab, q)
        classes, y = np.unique(lab[seq, pos], return_inverse=True)
        X = np.asarray(hidden[seq, pos], dtype=np.float32)
        key = (run, L, layer, q, pp.cell, zlib.crc32(X.tobytes()), zlib.crc32(y.tobytes()))
        if key in self.cache:
            return self.cache[key]
        if not np.isfinite(C) or classes.size < 2:
            self.cache[key] = np.zeros((0, 0, X.shape[1]))
            return self.cache[key]
        rng = np.random.default_rng([int(self.plan.options["seed"]), zlib.crc32("|".join(pp.cell).encode()),
                                     int(L), 58])
        targets = np.empty((self.plan.options["shuffles"], y.size), dtype=np.int64)
        for s in range(targets.shape[0]):
            targets[s] = y
            for p in np.unique(pos):
                at_p = np.flatnonzero(pos == p)
                targets[s, at_p] = y[at_p][rng.permutation(at_p.size)]
        params = path_exact(X, targets, np.ones(targets.shape, dtype=bool), classes.size, [C])[0]
        self.cache[key] = params.original_space()[0].transpose(0, 2, 1)
        return self.cache[key]


def _dataset(plan: StabilityPlan, positions: list[int], ov, raw, null, shuffled, r2, n_seq, source) -> xr.Dataset:
    dims = ["pair", "length", "layer", *(["position"] if positions else [])]
    sq = (lambda a: a) if positions else (lambda a: a[..., 0])
    with np.errstate(invalid="ignore"), _quiet():
        prof, null_prof = np.nanmean(ov, axis=-1), np.nanmean(null, axis=-1)
        shuffled_prof = np.nanmean(shuffled, axis=-2)
    runs = list(dict.fromkeys(r for pp in plan.pairs for r in (pp.a, pp.b)))
    seed_ov, seed_ps = _per_seed(plan, runs, prof)
    data: dict[str, Any] = {
        "overlap": (dims, sq(ov), {"what": "mean squared cosine of the principal angles between seed a's "
                                           "probe subspace, mapped into b's states, and b's"}),
        "raw_overlap": (dims, sq(raw), {"what": "the same without the map (what raw weights would say)"}),
        "null_overlap": (dims, sq(null), {"what": "expected overlap of random subspaces: max(k_a, k_b) / d"}),
        "overlap_profile": (dims[:3], prof, {"what": "overlap averaged over the probe's positions"}),
        "null_profile": (dims[:3], null_prof),
        "shuffled_overlap": ([*dims, "shuffle"], shuffled if positions else shuffled[..., 0, :],
                             {"what": "per label permutation, the overlap of probes refitted on the permuted "
                                      "label (the same permutation for both seeds), mapped the same way"}),
        "shuffled_profile": (("pair", "length", "layer", "shuffle"), shuffled_prof,
                             {"what": "shuffled_overlap averaged over the probe's positions"}),
        "alignment_r2": (dims[:3], r2, {"what": "held-out share of b's centred variance the map predicts"}),
        "map_sequences": (("pair", "length"), n_seq),
        "inputs": (("pair", "length"), source.astype(str)),
        "seed_overlap": (("run", "length", "layer"), seed_ov, {"what": "each seed's mean overlap with the "
                                                                       "other seeds of its cell"}),
        "seed_pseudo": (("run", "length", "layer"), seed_ps, {"what": "each seed's jackknife pseudo-value of "
                                                                      "the pair mean (3 seeds or more)"}),
    }
    coords: dict[str, Any] = {
        "pair": np.arange(len(plan.pairs)), "pair_a": ("pair", [pp.a for pp in plan.pairs]),
        "pair_b": ("pair", [pp.b for pp in plan.pairs]), "run": runs, "length": plan.lengths,
        "cell_of_pair_task": ("pair", [pp.cell[0] for pp in plan.pairs]),
        "cell_of_pair_arch": ("pair", [pp.cell[1] for pp in plan.pairs]),
        "cell_of_pair_variant": ("pair", [pp.cell[2] for pp in plan.pairs]),
        "layer": plan.layers,
    }
    if positions:
        coords["position"] = positions
    attrs = {
        "probe_result": plan.result, "target": str(plan.probes.attrs.get("target", "")),
        "positions": str(plan.probes.attrs.get("positions", "")), "seed": plan.options["seed"],
        "inputs": plan.options["inputs"], "min_shared": MIN_SHARED, "map_sequences_max": MAP_SEQUENCES,
        "shuffles": plan.options["shuffles"],
        "shuffled_null": "probes refitted at their run's stored C on the label permuted across sequences at each "
                         "position (one permutation per cell, length and shuffle: the same for both seeds of a "
                         "pair), on the sequences the map uses, then mapped and compared like the probes",
        "alignment": "orthogonal Procrustes (with scale) of centred states on half of the sequences, every "
                     "labelled position; alignment_r2 on the other half",
        "interval": "jackknife t over seeds (pseudo-values of the mean over seed pairs), clipped to [0, 1]",
    }
    for k in ("task", "trained_target"):
        if k in plan.probes.attrs:
            attrs[k] = plan.probes.attrs[k]
    return xr.Dataset(data, coords=coords, attrs=attrs)


class _quiet:
    """Silence numpy's warning for the mean of all-NaN slices (a layer without probes)."""

    def __enter__(self) -> None:
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: Any) -> None:
        self._w.__exit__(*exc)


def _pair_matrix(plan: StabilityPlan, members: list[str], values: np.ndarray) -> np.ndarray:
    """The symmetric (seed, seed) matrix of one cell's pair ``values`` (NaN diagonal)."""
    n = len(members)
    M = np.full((n, n), np.nan)
    for p, pp in enumerate(plan.pairs):
        if pp.a in members and pp.b in members:
            i, j = members.index(pp.a), members.index(pp.b)
            M[i, j] = M[j, i] = values[p]
    return M


def _complete(M: np.ndarray) -> np.ndarray:
    """Indices of the seeds kept when those with a missing pair value are dropped (most missing first)."""
    keep = list(range(M.shape[0]))
    while len(keep) > 1:
        sub = M[np.ix_(keep, keep)]
        miss = (~np.isfinite(sub) & ~np.eye(len(keep), dtype=bool)).sum(1)
        if not miss.any():
            break
        keep.pop(int(np.argmax(miss)))
    return np.asarray(keep, dtype=np.int64)


def _per_seed(plan: StabilityPlan, runs: list[str], prof: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shape = (len(runs), prof.shape[1], prof.shape[2])
    seed_ov, seed_ps = np.full(shape, np.nan), np.full(shape, np.nan)
    for members in _cell_members(plan).values():
        for j in range(prof.shape[1]):
            for k in range(prof.shape[2]):
                M = _pair_matrix(plan, members, prof[:, j, k])
                keep = _complete(M)
                if keep.size < 2:
                    continue
                sub = M[np.ix_(keep, keep)]
                off = ~np.eye(keep.size, dtype=bool)
                m = np.where(off, sub, 0.0).sum(1) / (keep.size - 1)
                ps = jackknife_pseudo(sub)
                for i, s in enumerate(keep):
                    seed_ov[runs.index(members[s]), j, k] = m[i]
                    seed_ps[runs.index(members[s]), j, k] = ps[i]
    return seed_ov, seed_ps


def _cell_members(plan: StabilityPlan) -> dict[tuple[str, str, str], list[str]]:
    out: dict[tuple[str, str, str], list[str]] = {}
    for pp in plan.pairs:
        for r in (pp.a, pp.b):
            if r not in out.setdefault(pp.cell, []):
                out[pp.cell].append(r)
    return out


def interval_frame(ds: xr.Dataset, cells: Mapping[tuple[str, str, str], list[str]]) -> pd.DataFrame:
    """Per (task, arch, variant), length and layer: :func:`seed_interval` of the overlap
    profile (``metric`` stability) and the mean null level."""
    rows = []
    pair_a, pair_b = [str(v) for v in ds.pair_a.values], [str(v) for v in ds.pair_b.values]
    for (task, arch, variant), members in cells.items():
        for L in ds.length.values:
            for layer in ds.layer.values:
                vals = ds["overlap_profile"].sel(length=L, layer=layer).values
                nulls = ds["null_profile"].sel(length=L, layer=layer).values
                n = len(members)
                M = np.full((n, n), np.nan)
                inside = []
                for p, (a, b) in enumerate(zip(pair_a, pair_b, strict=True)):
                    if a in members and b in members:
                        i, j = members.index(a), members.index(b)
                        M[i, j] = M[j, i] = vals[p]
                        inside.append(p)
                keep = _complete(M)
                est, lo, hi, n_seeds, method = seed_interval(M[np.ix_(keep, keep)])
                if not np.isfinite(est):
                    continue
                rows.append({"task": task, "arch": arch, "variant": variant, "length": int(L),
                             "layer": str(layer), "estimate": est, "lower": lo, "upper": hi,
                             "n_seeds": n_seeds, "method": method,
                             "null": float(np.nanmean(nulls[inside])) if inside else float("nan")})
    return pd.DataFrame(rows, columns=["task", "arch", "variant", "length", "layer", "estimate", "lower",
                                       "upper", "n_seeds", "method", "null"])


def shuffled_frame(ds: xr.Dataset, cells: Mapping[tuple[str, str, str], list[str]],
                   level: float = 0.95) -> pd.DataFrame:
    """Per (task, arch, variant), length and layer: the shuffled-label null as a band over label
    permutations -- each permutation's mean over the cell's seed pairs, their mean (``estimate``)
    and central ``level`` (``lower``, ``upper``). The probed label, at a layer that does not
    carry it, is one random labelling too: its overlap falls where one permutation's does, and
    this band, not the permutations' mean, is what it has to clear."""
    rows = []
    pair_a, pair_b = [str(v) for v in ds.pair_a.values], [str(v) for v in ds.pair_b.values]
    for (task, arch, variant), members in cells.items():
        inside = [p for p, (a, b) in enumerate(zip(pair_a, pair_b, strict=True)) if a in members and b in members]
        for L in ds.length.values:
            for layer in ds.layer.values:
                vals = ds["shuffled_profile"].sel(length=L, layer=layer).values[inside]  # (pair, shuffle)
                ok = np.isfinite(vals).all(0)
                if not inside or not ok.any():
                    continue
                means = vals[:, ok].mean(0)
                lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
                rows.append({"task": task, "arch": arch, "variant": variant, "length": int(L), "layer": str(layer),
                             "estimate": float(means.mean()), "lower": float(lo), "upper": float(hi),
                             "n_seeds": len(members),
                             "method": f"central {level:.0%} of {int(ok.sum())} label permutations"})
    return pd.DataFrame(rows, columns=["task", "arch", "variant", "length", "layer", "estimate", "lower", "upper",
                                       "n_seeds", "method"])


def add_stability_intervals(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``stability_estimate/_lower/_upper/_n_seeds/_method``, ``null_estimate`` and
    (with a shuffled-label null) ``shuffled_estimate/_lower/_upper/_n_seeds/_method`` over
    (cell, length, layer): :func:`interval_frame` stored the way the probes' are."""
    from analysis.intervals import CI_LEVEL, frame_variables, with_cells

    cells: dict[tuple[str, str, str], list[str]] = {}
    for a, b, t, ar, v in zip(ds.pair_a.values, ds.pair_b.values, ds.cell_of_pair_task.values,
                              ds.cell_of_pair_arch.values, ds.cell_of_pair_variant.values, strict=True):
        members = cells.setdefault((str(t), str(ar), str(v)), [])
        for r in (str(a), str(b)):
            if r not in members:
                members.append(r)
    frame = interval_frame(ds, cells)
    order = sorted(cells)
    index = {c: i for i, c in enumerate(order)}
    new = frame_variables(ds, "stability", frame.drop(columns="null"), index,
                          {"what": "mean overlap over seed pairs; jackknife t over seeds"})
    null = frame.assign(estimate=frame["null"], lower=frame["null"], upper=frame["null"], method="k/d")
    new.update(frame_variables(ds, "null", null.drop(columns="null"), index,
                               {"what": "the random-subspace null, max(k_a, k_b) / d"}))
    metrics = ["stability", "null"]
    if "shuffled_profile" in ds:
        new.update(frame_variables(ds, "shuffled", shuffled_frame(ds, cells), index,
                                   {"what": "the shuffled-label null: per label permutation the mean overlap over "
                                            "seed pairs; its mean and the central 95% of the permutations"}))
        metrics.append("shuffled")
    out = with_cells(ds.assign(new), order)
    out.attrs.update(interval_metrics=metrics, ci_level=CI_LEVEL)
    return out


def agreement_frame(ds: xr.Dataset) -> pd.DataFrame | None:
    """The stored numbers of a saved stability result, one row per (task, arch, variant),
    length and layer: the overlap's interval (``estimate``, ``lower``, ``upper``, ``n_seeds``),
    the random-subspace null (``null``), the shuffled-label null's interval (``shuffled``,
    ``shuffled_lower``, ``shuffled_upper``; NaN in a result stored before it was kept) and
    ``agree``: the overlap's lower bound above both nulls' estimates (False without an interval
    or without the shuffled-label null). Reads; computes no statistic. None without stored
    intervals."""
    from analysis.intervals import stored_intervals

    frame = stored_intervals(ds, "stability")
    if frame is None:
        return None
    keys = ["task", "arch", "variant", "length", "layer"]
    null = stored_intervals(ds, "null")
    frame = frame.merge(null[[*keys, "estimate"]].rename(columns={"estimate": "null"}), on=keys, how="left") \
        if null is not None else frame.assign(null=np.nan)
    shuffled = stored_intervals(ds, "shuffled")
    if shuffled is not None:
        frame = frame.merge(shuffled[[*keys, "estimate", "lower", "upper"]].rename(
            columns={"estimate": "shuffled", "lower": "shuffled_lower", "upper": "shuffled_upper"}), on=keys, how="left")
    else:
        frame = frame.assign(shuffled=np.nan, shuffled_lower=np.nan, shuffled_upper=np.nan)
    lower = frame["lower"].astype(float)
    frame["agree"] = (lower > frame["null"].astype(float)) & (lower > frame["shuffled_upper"].astype(float))
    order = {str(v): i for i, v in enumerate(ds.layer.values)}
    frame["layer_pos"] = frame["layer"].astype(str).map(order)
    return frame


def result_name(ds: xr.Dataset) -> str:
    """``stability/<name>`` for the probe result ``probes/<name>`` it read."""
    from store import schema

    return schema.result_name(schema.STABILITY, str(ds.attrs["probe_result"]).removeprefix(f"{schema.PROBES}/"))


def save_stability(store: Any, ds: xr.Dataset, name: str | None = None) -> str:
    """Write a stability Dataset with its intervals to ``results/<name>`` (default
    :func:`result_name`); returns the name."""
    name = name or result_name(ds)
    store.write_result(name, add_stability_intervals(ds))
    return name


def probe_stability(
    store: Any,
    result: str | None = None,
    *,
    save: bool = False,
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
    runs: Any = None,
    layers: Any = None,
    lengths: Any = None,
    seed: int = 0,
    inputs: str = "auto",
    shuffles: int = SHUFFLES,
) -> xr.Dataset:
    """How alike the seeds' probe subspaces are at each layer, after aligning their states
    (see the module).

    Parameters
    ----------
    store : Store or str
        The activation store (a path is opened for analysis, writable when ``save``).
    result : str, optional
        The probe result whose stored full-data probes are compared (``probes/<task>`` or
        ``<task>``); default the one of the selected runs' task.
    runs, layers, lengths, seed, inputs, shuffles
        What :func:`plan_stability` sweeps: ``runs``, ``layers``, ``lengths`` (the result's fit
        lengths by default), ``seed`` (the sequences' split between the map and its check),
        ``inputs`` (``"auto"``: sequences both runs hold when there are :data:`MIN_SHARED`,
        else each run's model re-run on the other's sequences; ``"shared"``; ``"rerun"``),
        ``shuffles`` (label permutations of the shuffled-label null, :data:`SHUFFLES`).
    save, name, attrs : store it (default name :func:`result_name`), with these attributes.

    Returns
    -------
    xarray.Dataset
        Per seed pair (``pair`` with ``pair_a``, ``pair_b``), length, layer [and position]:
        ``overlap``, ``raw_overlap``, ``null_overlap`` and per shuffle ``shuffled_overlap``;
        per pair, length and layer ``overlap_profile``, ``null_profile``, ``alignment_r2``
        (and ``shuffled_profile`` per shuffle); per run ``seed_overlap`` and ``seed_pseudo``
        (what claims test); saved, the seed-level intervals and the null's band
        (:func:`add_stability_intervals`).
    """
    from store import open_analysis

    if isinstance(store, str):
        store = open_analysis(store, write=save)
    plan = plan_stability(store, result, runs=runs, layers=layers, lengths=lengths, seed=seed, inputs=inputs,
                          shuffles=shuffles)
    ds = plan.compute()
    ds.attrs.update(attrs or {})
    if save:
        save_stability(store, ds, name)
    return ds
