"""The results of analyses added from outside the packages (:func:`analysis.registry.register_analysis`).

One part per stored result of an added analysis: every per-run number it holds as the mean over
each cell's seeds with a seed-level t interval (95%; one seed: its value, no interval), per
cell (task, arch, variant) and the number's other coordinates
(:func:`analysis.intervals.per_run_intervals`), the same numbers ``layerstate show`` prints.
The section is left off the page when the store holds no such result.
"""

from __future__ import annotations

import pandas as pd

from analysis import registry
from analysis.intervals import per_run_intervals
from reports.model import Section, Table
from reports.numbers import fmt_ci, read_result
from reports.snapshot import Snapshot

TITLE = "Other analyses"


def added_results(snap: Snapshot) -> list[str]:
    """The stored results of the added analyses, in the registry's order."""
    kinds = [a.name for a in registry.added()]
    names = snap.results()
    return [n for k in kinds for n in names if n.partition("/")[0] == k]


def added(snap: Snapshot) -> Section | None:
    """The section, or None when no added analysis has a stored result."""
    names = added_results(snap)
    if not names:
        return None
    sec = Section("added", TITLE, intro=(
        "Analyses registered from outside layerstate. Each number: the mean over a cell's seeds "
        "[95% seed-level t interval]; a cell with one seed shows its value and no interval."))
    for name in names:
        entry = registry.analysis(name.partition("/")[0])
        part = Section(name.replace("/", "_"), f"{name}: {entry.what if entry else ''}")
        frame = per_run_intervals(snap.store, read_result(snap.store, name))
        if frame.empty:
            part.notes.append(f"results/{name} holds no per-run numbers (no variable along run).")
        else:
            part.tables.append(_table(name, frame))
        sec.parts.append(part)
    return sec


def _table(name: str, frame: pd.DataFrame) -> Table:
    keys = [c for c in frame.columns if c not in ("estimate", "lower", "upper", "n_seeds")]
    shown = frame[keys].copy()
    shown["mean [95% CI]"] = [
        fmt_ci(e, lo, hi, why_none="one seed") for e, lo, hi in zip(frame.estimate, frame.lower, frame.upper, strict=True)]
    shown["seeds"] = frame["n_seeds"]
    return Table(name.replace("/", "_"), f"results/{name}: per cell, mean over seeds with its interval",
                 frame, display=shown)
