"""What a report is made of: sections holding notes, tables and figures.

Sections are built from the store by their modules (:mod:`reports.behaviour`, :mod:`reports.readout`, ...) and written by
:mod:`reports.build`; nothing here reads a store or draws.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

#: How to produce each kind of result, named on the page where it is missing.
COMMANDS = {
    "train": "layerstate train EXPERIMENT.toml --store STORE",
    "capture": "layerstate capture EXPERIMENT.toml --store STORE",
    "probe": "layerstate probe STORE",
    "ablate": "layerstate ablate STORE",
    "patch": "layerstate patch STORE",
    "interchange": "layerstate patch STORE --interchange",
    "stats": "layerstate stats STORE --claims EXPERIMENT.toml",
    "behaviour": "layerstate behaviour STORE",
    "run-design": "layerstate run EXPERIMENT.toml --out DIR --design DESIGN.toml",
}
ALL_STAGES = "layerstate run EXPERIMENT.toml --out DIR"


@dataclass
class Table:
    """A table: ``data`` (raw numbers, written to ``tables/<name>.csv``) and ``display``
    (what the page shows: numbers with intervals as text; default ``data``)."""

    name: str
    caption: str
    data: pd.DataFrame
    display: pd.DataFrame | None = None
    #: Gives each row of the page an anchor, ``<anchor>-<its first cell>``, for :attr:`link`.
    anchor: str | None = None
    #: Makes each row's first cell a link to the row of the same first cell in the table whose
    #: :attr:`anchor` is this prefix (one table holds a claim's statement and reason; another
    #: holds its tests and points to it).
    link: str | None = None

    def shown(self) -> pd.DataFrame:
        return self.data if self.display is None else self.display


def row_anchor(prefix: str, key: object) -> str:
    """The page anchor of the row whose first cell is ``key`` in a table anchored by ``prefix``."""
    return f"{prefix}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", str(key)).strip("-") or "row")


@dataclass
class Figure:
    """A matplotlib figure to save as ``figures/<name>.png`` and ``.svg``; ``files`` is set
    when it is saved (relative paths and the base64 PNG embedded in the page)."""

    name: str
    caption: str
    figure: Any
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Section:
    """One part of the report. ``missing`` replaces the content with a note naming the
    command that produces it; ``error`` says the section failed to build, and why;
    ``appendix`` sections come after the numbered ones, lettered A, B, …"""

    key: str
    title: str
    intro: str = ""
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    parts: list[Section] = field(default_factory=list)
    blocks: list[tuple[str, str]] = field(default_factory=list)  # (caption, preformatted text)
    missing: str | None = None
    command: str | None = None
    error: str | None = None
    appendix: bool = False
    #: Its notes after its subsections (the summary: the verdicts first, the caveats after them).
    notes_last: bool = False

    def walk(self):
        yield self
        for p in self.parts:
            yield from p.walk()

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if self.missing and not self.tables and not self.figures and all(
            p.status == "missing" for p in self.parts
        ):
            return "missing"
        return "ok"


def take_table(sec: Section, name: str) -> Table | None:
    """Remove the table called ``name`` from ``sec`` and return it (None if it has none)."""
    for i, t in enumerate(sec.tables):
        if t.name == name:
            return sec.tables.pop(i)
    return None


def take_figure(sec: Section, name: str) -> Figure | None:
    """Remove the figure called ``name`` from ``sec`` and return it (None if it has none)."""
    for i, f in enumerate(sec.figures):
        if f.name == name:
            return sec.figures.pop(i)
    return None


def find_table(sec: Section | None, name: str) -> Table | None:
    """The table called ``name`` in ``sec`` or its parts (None if there is none)."""
    if sec is None:
        return None
    for s in sec.walk():
        for t in s.tables:
            if t.name == name:
                return t
    return None


def missing_section(key: str, title: str, what: str, stage: str, intro: str = "") -> Section:
    """A section whose results are absent: says what is missing and the command to run."""
    return Section(key, title, intro=intro, missing=what, command=COMMANDS[stage])
