"""``build_report``: a store's results as one self-contained HTML page, Markdown and files.

Output folder::

    index.html        the page: CSS inline, figures embedded as base64 PNG, no script, no network
    report.md         the same content in Markdown (figures linked from figures/)
    report.json       what was built: sections, their status, notes, files (also the marker
                      that lets ``force=True`` replace this folder)
    figures/*.png, figures/*.svg
    tables/*.csv      every number shown on the page, machine-readable

The folder is written beside its final place and moved there at the end, so an interrupted
build never leaves half a report under the final name.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from reports import interventions, readout, sections
from reports.figures import save
from reports.model import Section
from reports.snapshot import Snapshot, take_snapshot
from store import Store

MARKER = "report.json"


def build_report(
    store: Store,
    out_dir: str | Path,
    *,
    force: bool = False,
    experiment: dict | None = None,
    check_chunks: bool = True,
) -> Path:
    """Write the report of ``store`` into ``out_dir``.

    Parameters
    ----------
    store : Store
        The store to report on. If it is being written, the report uses the snapshot of its
        last finished write and skips incomplete lengths, saying so on the page.
    out_dir : str or Path
        A folder that must not exist yet (or pass ``force``).
    force : bool
        Replace ``out_dir`` if it holds an earlier report (or is empty). A folder that is not
        a layerstate report is never replaced.
    experiment : dict, optional
        The experiment configuration as run (e.g. the parsed TOML); shown in section 1.
    check_chunks : bool
        Verify every chunk's checksum for the store check (``layerstate validate``); turn off
        for very large stores.

    Returns
    -------
    Path
        ``out_dir / "index.html"``.

    Raises
    ------
    FileExistsError
        ``out_dir`` exists and ``force`` is False, or it exists and is not a report.
    """
    out_dir = Path(out_dir)
    _check_target(out_dir, force)
    snap = take_snapshot(store)
    built = collect_sections(snap, experiment, check_chunks=check_chunks)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write(tmp, snap, built)
        if out_dir.exists():
            _check_target(out_dir, force)
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir / "index.html"


def _check_target(out_dir: Path, force: bool) -> None:
    if not out_dir.exists():
        return
    if not force:
        raise FileExistsError(
            f"report folder {out_dir} exists; choose another directory or pass --force to replace it"
        )
    if not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MARKER).is_file()):
        raise FileExistsError(
            f"{out_dir} exists and is not a layerstate report (no {MARKER}); refusing to replace it "
            "even with --force: choose another directory or remove it yourself"
        )


def collect_sections(snap: Snapshot, experiment: dict | None = None, *, check_chunks: bool = True) -> list[Section]:
    """Build the five sections; one that fails shows its error instead of stopping the report."""
    builders: list[tuple[str, str, Callable[[], Section]]] = [
        ("provenance", "Experiment and provenance",
         lambda: sections.provenance(snap, experiment, check_chunks=check_chunks)),
        ("behaviour", "Behaviour", lambda: sections.behaviour(snap)),
        ("probes", "Probe profiles", lambda: readout.probes(snap)),
        ("interventions", "Interventions", lambda: interventions.interventions(snap)),
        ("claims", "Claims", lambda: sections.claims(snap)),
    ]
    out = []
    for key, title, build in builders:
        try:
            out.append(build())
        except Exception as exc:  # one broken result must not hide the others
            warnings.warn(f"report section {title!r} failed: {type(exc).__name__}: {exc}", stacklevel=2)
            out.append(Section(key, title, error=f"{type(exc).__name__}: {exc}".splitlines()[0]))
    return out


# ---------------------------------------------------------------------- writing
def _write(folder: Path, snap: Snapshot, built: list[Section]) -> None:
    from reports.render import render_html, render_markdown

    figdir, tabdir = folder / "figures", folder / "tables"
    tabdir.mkdir(parents=True, exist_ok=True)
    figdir.mkdir(parents=True, exist_ok=True)
    manifest = [_save(sec, figdir, tabdir) for sec in built]
    meta = {
        "generator": "layerstate reports",
        "built": datetime.now(UTC).isoformat(timespec="seconds"),
        "store": snap.info["location"],
        "title": snap.info.get("title"),
        "sections": manifest,
    }
    (folder / "index.html").write_text(render_html(snap, built, meta), encoding="utf-8")
    (folder / "report.md").write_text(render_markdown(snap, built, meta), encoding="utf-8")
    (folder / MARKER).write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")


def _save(sec: Section, figdir: Path, tabdir: Path) -> dict:
    """Write a section's figures and tables; its entry in ``report.json`` (parts nested)."""
    for fig in sec.figures:
        fig.files = save(fig.figure, figdir, fig.name)
        fig.figure = None  # drop the matplotlib object once written
    for tab in sec.tables:
        _csv(tab.data, tabdir / f"{tab.name}.csv")
    return {
        "key": sec.key, "title": sec.title, "status": sec.status, "missing": sec.missing,
        "command": sec.command, "error": sec.error, "notes": sec.notes,
        "tables": [f"tables/{t.name}.csv" for t in sec.tables],
        "figures": [f.files["png"] for f in sec.figures],
        "parts": [_save(p, figdir, tabdir) for p in sec.parts],
    }


def _csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False)  # full precision: the CSV is the machine-readable record
