"""The tables the intervention sections share: per-run metric frames with their seed-level
intervals, pivots by layer, the sites each result patched, and which results were computed by
which command (:data:`KINDS`)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import xarray as xr

from analysis.intervals import factor_table, stored_intervals
from analysis.interventions.intervals import metric_intervals
from reports import figures as F
from reports import intervals
from reports.model import COMMANDS, Table

KINDS = {
    "ablation": ("Ablation and residual decodability", "ablate"),
    "patching": ("Activation patching", "patch"),
    "interchange": ("Interchange interventions", "interchange"),
}


def slug(name: str) -> str:
    return name.replace("/", "_").replace(":", "-")


def layer_positions(frame: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    frame["layer"] = frame["layer"].astype(str)
    frame["layer_pos"] = [order.index(v) for v in frame["layer"]]
    return frame


def ci_text(frame: pd.DataFrame, signed: bool = False) -> list[str]:
    return intervals.texts(frame, signed=signed)


def range_rules(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The interval rules of :mod:`reports.intervals` for ``metric``'s range."""
    return intervals.apply_rules(frame, *intervals.RANGES[metric], t_based=(frame["method"] == "seed-level t").to_numpy())


def metric_frames(ds: xr.Dataset, kind: str, store, metrics: list[str], computed: list[str] | None = None,
                  ) -> dict[str, pd.DataFrame]:
    """The intervals of ``metrics`` (names of :data:`analysis.interventions.intervals.METRICS`)
    as rows: the stored ones (:func:`analysis.intervals.stored_intervals`), the others
    computed here from the per-sequence counts, their names appended to ``computed``. A metric
    whose variables ``ds`` lacks is absent."""
    out: dict[str, pd.DataFrame] = {}
    missing = []
    for metric in metrics:
        got = stored_intervals(ds, metric)
        if got is None:
            missing.append(metric)
        else:
            out[metric] = got
    if missing:
        here = metric_intervals(ds, kind, store, only=missing)
        out.update(here)
        if computed is not None:
            computed.extend(m for m in here if m not in computed)
    return {m: out[m] for m in metrics if m in out}


def computed_note(name: str, computed: list[str]) -> str | None:
    """The note of a part whose intervals were not stored with its result (None if all were)."""
    if not computed:
        return None
    stage = KINDS[name.split("/", 1)[0]][1]
    return (f"The intervals of {', '.join(computed)} are not stored in results/{name} (stored before results "
            f"kept their intervals): computed here from its per-sequence counts; `{COMMANDS[stage]}` stores them.")


def seeds_caption(frame: pd.DataFrame) -> str:
    two = "seed_a" in frame and bool(np.isfinite(frame["seed_a"].astype(float)).any())
    return "; vertical line: the two seeds' values where 2 seeds are too few for an interval" if two else ""


def by_layer(frame: pd.DataFrame, index: list[str], column: str, order: list, signed: bool = False) -> pd.DataFrame:
    shown = frame.assign(text=ci_text(frame, signed))
    pivot = shown.pivot_table(index=index, columns=column, values="text", aggfunc="first")
    pivot = pivot[[c for c in order if c in pivot.columns]].reset_index()
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.fillna("–")


def collect_sites(ds: xr.Dataset, store, coord: str, result: str, into: dict[str, dict[str, list[str]]]) -> None:
    """Record which site ``result`` edits, per architecture, into ``into[arch][result]``.

    Sites are described per (run, layer[, site]) by :func:`analysis.interventions._common.site_description`
    ("block output of layer L1 at every position; changes what the layers above L1 see …"):
    the layer's name is replaced by ``<layer>`` so one architecture's sites read as one line.
    """
    if coord not in ds.coords:
        return
    table = factor_table(store, [str(r) for r in ds["run"].values])
    layers = sorted({str(v) for v in ds["layer"].values}, key=len, reverse=True) if "layer" in ds.coords else []
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, layers)) + r")\b") if layers else None
    for arch, grp in table.groupby("arch"):
        texts = into.setdefault(str(arch), {}).setdefault(result, [])
        for v in np.ravel(ds[coord].sel(run=list(grp.index)).values):
            text = str(v)
            if text.startswith("embedding output"):
                continue  # the embedding (layer embed) is the same for every architecture
            if pattern is not None:
                text = pattern.sub("<layer>", text)
            if text not in texts:
                texts.append(text)


def _merge_positions(heads: list[str]) -> str:
    """``block output of layer <layer> at position 'key'`` and ``… at position 'value'`` as
    ``block output of layer <layer> at positions 'key', 'value'``."""
    groups: dict[str, list[str]] = {}
    for head in heads:
        prefix, sep, where = head.rpartition(" at position ")
        key = prefix if sep else head
        groups.setdefault(key, [])
        if sep:
            groups[key].append(where)
    out = []
    for key, places in groups.items():
        if len(places) > 1:
            out.append(f"{key} at positions {', '.join(places)}")
        elif places:
            out.append(f"{key} at position {places[0]}")
        else:
            out.append(key)
    return "; ".join(out)


def sites_table(sites: dict[str, dict[str, list[str]]]) -> Table | None:
    """One row per architecture: what each intervention result edited (said once for the
    whole section), and the caveat of recurrent models (their own state is not edited)."""
    if not sites:
        return None
    results = list(dict.fromkeys(r for per in sites.values() for r in per))
    rows = []
    for arch in F.arch_order(sites):
        row: dict[str, str] = {"arch": arch}
        caveats: list[str] = []
        for res in results:
            heads = []
            for text in sites[arch].get(res, []):
                head, _, tail = text.partition("; ")
                heads.append(head)
                for c in tail.split("; ") if tail else []:
                    if c not in caveats:
                        caveats.append(c)
            row[res] = _merge_positions(list(dict.fromkeys(heads))) or "–"
        row["not edited"] = "; ".join(caveats) or "nothing else (the block output is the whole state passed on)"
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["arch", *results, "not edited"])
    return Table("intervention_sites", "What each intervention edits, per architecture (<layer>: the layer "
                 "intervened on; the embedding layer edits the embedding output). Recurrent models pass "
                 "their own state along positions inside a layer, which these edits leave as it was.", frame)


# ---------------------------------------------------------------------- ablation
