"""Render sections with the Jinja2 templates in ``reports/templates`` (HTML autoescaped)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from reports.intervals import CLIPPED
from reports.model import ALL_STAGES, Section, row_anchor
from reports.snapshot import Snapshot

TEMPLATES = Path(__file__).parent / "templates"
#: The paper-comparison column whose cells are coloured (yes / no / cannot tell).
COMPARISON_COLUMN = "paper's value in our interval?"


def _environment():
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        # HTML is escaped (store attrs and claim statements are user text); Markdown is not
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def _cell(x: object) -> str:
    if x is None:
        return "–"
    if isinstance(x, float | np.floating):
        return "–" if not np.isfinite(x) else f"{x:.4g}"
    return str(x)


def _numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def table_view(table) -> dict:
    """Columns, rows of text, and per cell a CSS class: ``num`` (right-aligned numbers) or
    ``v-<verdict>`` (claims' verdicts, coloured)."""
    shown = table.shown()
    columns = [str(c) for c in shown.columns]
    numeric = [_numeric(shown[c]) or _looks_numeric(shown[c]) for c in shown.columns]
    rows = [[_cell(v) for v in row] for row in shown.itertuples(index=False)]

    def css(col: int, text: str) -> str:
        if columns[col] in ("verdict", "decision"):  # a sequential design's decisions too
            return f"v-{text.replace(' ', '-')}"
        if columns[col] == COMPARISON_COLUMN:
            return "cmp-" + ("yes" if text.startswith("yes") else "no" if text.startswith("no:") else "unknown")
        return "num" if numeric[col] else ""

    return {
        "name": table.name,
        "caption": table.caption + _clipped_note(table.data),
        "csv": f"tables/{table.name}.csv",
        "columns": columns,
        "numeric": numeric,
        "rows": rows,
        "cells": [[(text, css(i, text), *_split(text, numeric[i])) for i, text in enumerate(row)] for row in rows],
        "anchors": [row_anchor(table.anchor, row[0]) for row in rows] if table.anchor and columns else [],
        "links": [row_anchor(table.link, row[0]) for row in rows] if table.link and columns else [],
    }


def _clipped_note(data: pd.DataFrame) -> str:
    """Said on a table whose intervals were clipped to their metric's range."""
    notes = [c for c in data.columns if str(c).endswith("interval_note")]
    if any((data[c].astype(str) == CLIPPED).any() for c in notes):
        return " Intervals that reached past what the metric can take are clipped to its range."
    return ""


def _split(text: str, numeric: bool) -> tuple[str, str, str]:
    """A number, its bracket and any words after it (``0.93``, ``[0.90, 0.96]``, ``(from 2
    seeds: ...)``): on the page the bracket may go to a second line and the words wrap below
    it, so tables of intervals stay within the page's width."""
    head, sep, tail = text.partition(" [")
    if not (numeric and sep):
        return text, "", ""
    bracket, close, note = tail.partition("]")
    return head, "[" + bracket + close, note.strip()


def _looks_numeric(col: pd.Series) -> bool:
    """Text columns of numbers with intervals ("0.93 [0.90, 0.96]") are right-aligned too."""
    vals = [str(v) for v in col.head(20) if str(v)]
    return bool(vals) and all(v[:1].isdigit() or v[:1] in "+-–" for v in vals)


def section_view(sec: Section, number: str) -> dict:
    return {
        "key": sec.key,
        "number": number,
        "title": sec.title,
        "intro": sec.intro,
        "notes": sec.notes,
        "missing": sec.missing,
        "command": sec.command,
        "error": sec.error,
        "status": sec.status,
        "appendix": sec.appendix,
        "notes_last": sec.notes_last,
        "blocks": [{"caption": c, "text": t} for c, t in sec.blocks],
        "figures": [{"caption": f.caption, **f.files} for f in sec.figures],
        "tables": [table_view(t) for t in sec.tables],
        "parts": [section_view(p, f"{number}.{i}") for i, p in enumerate(sec.parts, 1)],
    }


def _context(snap: Snapshot, built: list[Section], meta: dict) -> dict:
    return {
        "title": snap.info.get("title") or "layerstate report",
        "meta": meta,
        "info": snap.info,
        "all_stages": ALL_STAGES,
        "sections": [section_view(s, n) for s, n in zip(built, numbers(built), strict=True)],
    }


def numbers(built: list[Section]) -> list[str]:
    """Section numbers: 1, 2, … for the report, A, B, … for the appendices."""
    out, n, a = [], 0, 0
    for s in built:
        if s.appendix:
            out.append(chr(ord("A") + a))
            a += 1
        else:
            n += 1
            out.append(str(n))
    return out


def render_html(snap: Snapshot, built: list[Section], meta: dict) -> str:
    return _environment().get_template("report.html.j2").render(**_context(snap, built, meta))


def render_markdown(snap: Snapshot, built: list[Section], meta: dict) -> str:
    env = _environment()
    env.filters["md"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
    return env.get_template("report.md.j2").render(**_context(snap, built, meta))
