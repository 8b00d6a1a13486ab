"""A checked sweep (:class:`StabilityPlan`, its pairs :class:`PairPlan`) and its computation:
each pair's states on the same sequences, the aligned overlaps, the shuffled-label null and the
per-seed values claims test."""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from analysis.probes.plan import last_positions, read_labels
from analysis.probes.solvers import path_exact
from capture.rebuild import rebuild_model
from store.errors import InvalidArgumentError

from .maths import (
    MAP_SEQUENCES,
    MIN_SHARED,
    NULL_S_PER_UNIT,
    OVERHEAD,
    RERUN_S_PER_TOKEN,
    S_PER_UNIT,
    Alignment,
    aligned_overlap,
    complete_seeds,
    fit_alignment,
    jackknife_pseudo,
)


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


def stored_tokens(store: Any, run: str, L: int) -> np.ndarray:
    return np.asarray(store.open_length(run, L)["tokens"].values)


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
        toks = stored_tokens(st, own, L)[: h_own.shape[0]]
        h_other = _rerun(st, other, toks, layer_names)
        lab = _labels(plan, own, L)[: h_own.shape[0]]
        out.append((h_own, h_other, mask, lab) if own == pp.a else (h_other, h_own, mask, lab))
    return out


def _labels(plan: StabilityPlan, run: str, L: int) -> np.ndarray:
    """The probed label of ``run``'s sequences (sequence, position), -1 where unlabelled."""
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


def _per_seed(plan: StabilityPlan, runs: list[str], prof: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shape = (len(runs), prof.shape[1], prof.shape[2])
    seed_ov, seed_ps = np.full(shape, np.nan), np.full(shape, np.nan)
    for members in _cell_members(plan).values():
        for j in range(prof.shape[1]):
            for k in range(prof.shape[2]):
                M = _pair_matrix(plan, members, prof[:, j, k])
                keep = complete_seeds(M)
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
