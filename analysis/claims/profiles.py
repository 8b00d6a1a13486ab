"""The per-seed layer profiles a profile claim reads, kept beside a store's verdicts so that a
claim comparing tasks run in different parts can be decided from the parts' records alone.

A ``profile_match`` claim compares one architecture's probe-accuracy profile across three tasks
(Jiang's finding 4: S3's profile matches Parity's, not Dyck's). A grid run in parts (``layerstate
run --task``) holds each task in its own store, so no part can evaluate it; the parts' stores
read as one view can (:func:`~analysis.claims.combine.combine_parts` with ``view``), but only
while every store still exists, and a store of activations is tens of gigabytes. The test needs
far less: each task's accuracy per seed and layer. So whenever claims are evaluated
(:func:`~analysis.claims.stored.evaluate_stored_claims`), the store keeps, for every declared
profile claim (the part's own and those it counts as absent), the per-seed profiles of the tasks
it holds: the result ``claim_profiles`` (one row per claim row, task, seed and layer), written by
a report as ``tables/claim_profiles.csv``. :func:`profiles_rows` decides a profile claim from the
parts' tables with :func:`~analysis.claims.evaluate.profile_row`, the test a store holding every
task runs, on the same numbers: the same row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from analysis.claims.evaluate import CELL_RUNS, profile_row, store_levels
from analysis.claims.metrics import probe_seed_profile, resolve_length
from analysis.claims.probe_results import probe_choice
from analysis.claims.spec import Claim, ClaimError, NotEvaluable, claim_archs, claim_rows
from store.errors import MissingError

#: The stored result (and the report's table, ``tables/claim_profiles.csv``).
CLAIM_PROFILES = "claim_profiles"
#: Its columns: the claim row (``id[arch]``), the cell, the probe result read and the profile.
COLUMNS = ("claim", "task", "arch", "variant", "length", "result", "seed", "layer", "layer_pos", "accuracy")


def profile_claims(claims: Sequence[Claim]) -> list[Claim]:
    return [c for c in claims if c.per_arch]


def claim_tasks(claim: Claim) -> list[str]:
    """A profile claim's three tasks, in its order (task, matches, differs_from)."""
    return [str(t) for t in dict.fromkeys((claim.task, claim.matches, claim.differs_from)) if t is not None]


def claim_profiles(store, claims: Sequence[Claim], probes: xr.Dataset | None) -> pd.DataFrame:
    """Per-seed probe profiles of every profile claim in ``claims`` for the tasks ``store``
    holds: one row per (claim row, task, seed, layer), columns :data:`COLUMNS`.

    A task the store holds whose profile cannot be read for a claim (no probe result for it, the
    architecture absent) gives no rows; a combination then says which task it lacks.
    """
    held = set(store_levels(store).get("task", []))
    rows: list[dict] = []
    if probes is None:
        return pd.DataFrame(columns=list(COLUMNS))
    for declared in profile_claims(claims):
        tasks = [t for t in claim_tasks(declared) if t in held]
        if not tasks:
            continue
        try:
            claim = resolve_length(store, declared, probes)
        except ClaimError:
            continue  # no one length: the part's own evaluation says why, when the claim is its own
        for rid, arch in zip(claim_rows(declared), claim_archs(declared), strict=True):
            for task in tasks:
                try:
                    prof = probe_seed_profile(store, probes, claim, task, arch).transpose("seed", "layer")
                    source = (probe_choice(store, probes, claim, [task])[task] if "result" in probes.dims else "")
                except (ClaimError, MissingError):
                    continue
                for i, seed in enumerate(prof["seed"].values):
                    for j, layer in enumerate(prof["layer"].values):
                        rows.append({"claim": rid, "task": task, "arch": arch, "variant": claim.variant,
                                     "length": int(claim.length or 0), "result": source, "seed": int(seed),
                                     "layer": str(layer), "layer_pos": j,
                                     "accuracy": float(prof.values[i, j])})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def profiles_dataset(frame: pd.DataFrame, cell_runs: dict[str, list[str]]) -> xr.Dataset:
    """:func:`claim_profiles`' table as the stored result (dim ``row``); ``cell_runs``
    records the runs of the cells it read, as the claims table does."""
    data = {}
    for col in COLUMNS:
        values = frame[col].to_numpy() if col in frame else np.array([])
        kind = float if col == "accuracy" else (int if col in ("length", "seed", "layer_pos") else str)
        data[col] = ("row", np.asarray(values, dtype=kind))
    return xr.Dataset(data, attrs={CELL_RUNS: cell_runs, "about": (
        "per-seed probe accuracy across layers of each declared profile claim's tasks held here, so that a "
        "claim comparing tasks of several parts is decided from the parts' records (layerstate combine)")})


def profiles_frame(part: xr.Dataset | pd.DataFrame, name: str = "part") -> pd.DataFrame:
    """A part's kept profiles (the stored result or a report's CSV) as :data:`COLUMNS`."""
    frame = part.to_dataframe().reset_index(drop=True) if isinstance(part, xr.Dataset) else part.copy()
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise ClaimError(f"part {name}'s claim profiles lack {', '.join(missing)}; give a part's store, its "
                         "report folder or the report's tables/claim_profiles.csv")
    frame = frame[list(COLUMNS)].copy()
    for col in ("length", "seed", "layer_pos"):
        frame[col] = pd.to_numeric(frame[col]).astype(int)
    frame["accuracy"] = pd.to_numeric(frame["accuracy"], errors="coerce").astype(float)
    for col in ("claim", "task", "arch", "variant", "result", "layer"):
        frame[col] = frame[col].fillna("").astype(str)
    return frame


def _profile(rows: pd.DataFrame) -> xr.DataArray:
    """One task's (seed, layer) profile from its table rows, layers in their stored order."""
    layers = rows.drop_duplicates("layer").sort_values("layer_pos")["layer"].tolist()
    seeds = sorted(rows["seed"].unique().tolist())
    grid = rows.pivot(index="seed", columns="layer", values="accuracy").reindex(index=seeds, columns=layers)
    return xr.DataArray(grid.to_numpy(dtype=float), dims=("seed", "layer"),
                        coords={"seed": np.asarray(seeds, dtype=int), "layer": layers})


def profiles_rows(claims: Sequence[Claim], todo: Sequence[str],
                  parts: Sequence[tuple[str, pd.DataFrame]]) -> dict[str, tuple[str, dict]]:
    """The claim rows of ``todo`` (ids ``claim[arch]``) decidable from the parts' kept profiles:
    row id -> (where the profiles came from, the test row of
    :func:`~analysis.claims.evaluate.profile_row`). A row whose tasks are not all kept by some
    part is left out (it stays not evaluable, saying which task is missing: :func:`missing_words`).
    A row the kept tables cannot answer is not evaluable, saying why: two parts keep one of its
    tasks, the parts read its tasks at different lengths, or at another length or variant than
    the claim now declares (the tables answer another question).
    """
    by_row: dict[str, dict[str, list[tuple[str, pd.DataFrame]]]] = {}
    for name, frame in parts:
        for (rid, task), rows in frame.groupby(["claim", "task"], sort=False):
            by_row.setdefault(str(rid), {}).setdefault(str(task), []).append((name, rows))
    out: dict[str, tuple[str, dict]] = {}
    for claim in profile_claims(claims):
        for rid, arch in zip(claim_rows(claim), claim_archs(claim), strict=True):
            have = by_row.get(rid, {})
            tasks = claim_tasks(claim)
            if rid not in todo or not all(t in have for t in tasks):
                continue
            names = " + ".join(dict.fromkeys(n for t in tasks for n, _ in have[t]))
            why = _unanswerable(claim, {t: have[t] for t in tasks})
            if why:
                out[rid] = (names, {"test": f"not evaluable: {why}", "not_evaluable": True})
                continue
            kept = {t: have[t][0][1] for t in tasks}
            length = int(kept[tasks[0]]["length"].iloc[0])
            resolved = claim if claim.length is not None else claim.model_copy(update={"length": length})
            try:
                row = profile_row(resolved, {t: _profile(kept[t]) for t in tasks}, arch)
            except NotEvaluable as exc:
                row = {"test": f"not evaluable: {exc}", "not_evaluable": True}
            row["result"] = ", ".join(sorted({r for t in tasks for r in kept[t]["result"] if r}))
            out[rid] = (names, row)
    return out


def row_profiles(claim: Claim, rid: str, parts: Sequence[tuple[str, pd.DataFrame]]) -> dict[str, xr.DataArray]:
    """The per-seed (seed, layer) profiles of each task of the profile claim row ``rid`` that the
    parts kept (as :func:`profiles_rows` decides it from them); empty where a task is not kept."""
    have: dict[str, pd.DataFrame] = {}
    for _, frame in parts:
        for (row, task), rows in frame.groupby(["claim", "task"], sort=False):
            if str(row) == rid:
                have.setdefault(str(task), rows)
    return {t: _profile(have[t]) for t in claim_tasks(claim) if t in have}


def _unanswerable(claim: Claim, have: dict[str, list[tuple[str, pd.DataFrame]]]) -> str:
    """Why the kept tables of a profile claim row's tasks cannot decide it ('' when they can)."""
    for task, kept in have.items():
        if len(kept) > 1:
            return (f"parts {' and '.join(n for n, _ in kept)} both keep task {task!r}'s profiles; give each "
                    "part once, each task in one part")
    lengths = {t: sorted({int(v) for v in kept[0][1]["length"]}) for t, kept in have.items()}
    if len({tuple(v) for v in lengths.values()}) > 1 or any(len(v) != 1 for v in lengths.values()):
        return ("the parts read its tasks at different lengths (" + ", ".join(f"{t} {v}" for t, v in lengths.items())
                + "); add length = N to the claim and evaluate the parts again")
    length = next(iter(lengths.values()))[0]
    if claim.length is not None and claim.length != length:
        return (f"the parts kept its profiles at length {length}, and the claim now reads length {claim.length}; "
                "evaluate the parts again with this file")
    variants = {str(v) for kept in have.values() for v in kept[0][1]["variant"]}
    if variants != {claim.variant}:
        return (f"the parts kept its profiles of variant {', '.join(sorted(variants))}, and the claim now reads "
                f"{claim.variant!r}; evaluate the parts again with this file")
    return ""


def missing_words(claim: Claim, rid: str, parts: Sequence[tuple[str, pd.DataFrame]]) -> str:
    """Which of a profile claim row's tasks no part kept a profile of ('' when all are kept)."""
    kept = {str(t) for _, f in parts for t in f.loc[f["claim"] == rid, "task"]}
    lacking = [t for t in claim_tasks(claim) if t not in kept]
    return ", ".join(lacking)
