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

The page opens with the findings and ends with what was run::

    1. Summary              claims' verdicts, paper comparison, behaviour table, probe-profile grid
    2. Claims: tests and power   with, as its parts, the sequential design (when the store holds
                                 one) and what deciding each claim would cost in seeds
    3. Behaviour            accuracy against length
    4. Probe profiles       per-layer tables, selectivity, where the state becomes readable
    5. Interventions        ablation, patching, interchange; which site each architecture edits
    6. Other analyses       the analyses added from outside (only when the store holds a result
                            of one): every per-run number with its seed interval
    A. Appendix             experiment configuration, provenance, runs, store check
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from reports import added, behaviour, claims, interventions, provenance, readout, seeds
from reports import summary as summary_section
from reports.figures import save
from reports.model import Section
from reports.render import render_html, render_markdown
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
    results: Sequence[str] = (),
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
        The experiment configuration as run (``Experiment.model_dump(mode="json")`` or the
        parsed TOML): shown in the appendix; its ``claims`` say which metric each claim reads
        and its ``reference`` tables are compared with our numbers
        (:mod:`reports.references`). Without it, the store's ``experiment`` attribute is used
        where there is one.
    check_chunks : bool
        Verify every chunk's checksum for the store check (``layerstate validate``); turn off
        for very large stores.
    results : sequence of str
        Probe results to show (``probes/dyck-2``, or ``dyck-2``), one per task at most: a task
        with several stored probe results shows the one named here, else the one named
        ``probes/<task>``, else the newest; the section says which and lists the others.

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
    if experiment is None and isinstance(snap.store.attrs.get("experiment"), dict):
        experiment = snap.store.attrs["experiment"]
    built = collect_sections(snap, experiment, check_chunks=check_chunks, results=results)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's folder is private (0700); a report is not
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


#: Order of the page: findings first, provenance last (the appendix).
ORDER = ["summary", "claims", "behaviour", "probes", "interventions", "added", "provenance"]


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def collect_sections(snap: Snapshot, experiment: dict | None = None, *, check_chunks: bool = True,
                     results: Sequence[str] = ()) -> list[Section]:
    """Build every section (in :data:`ORDER`); one that fails shows its error instead of
    stopping the report. The summary is built last, from the others."""
    builders: list[tuple[str, str, Callable[[], Section]]] = [
        ("claims", claims.CLAIMS_TITLE, lambda: claims.claims(snap, experiment)),
        ("behaviour", "Behaviour", lambda: behaviour.behaviour(snap)),
        ("probes", "Probe profiles", lambda: readout.probes(snap, results) if results else readout.probes(snap)),
        ("interventions", "Interventions", lambda: interventions.interventions(snap)),
        ("provenance", provenance.PROVENANCE_TITLE,
         lambda: provenance.provenance(snap, experiment, check_chunks=check_chunks)),
    ]
    built = {key: _guarded(key, title, build) for key, title, build in builders}
    # the analyses added from outside: a section only when one has a stored result
    if added.added_results(snap):
        built["added"] = _guarded("added", added.TITLE, lambda: added.added(snap) or Section("added", added.TITLE))
    # the sequential design and the seed plan, when there are any: parts of the claims section
    built["claims"].parts.extend(_guarded_parts(lambda: seeds.parts(snap, experiment)))
    built["provenance"].appendix = True
    built["summary"] = _guarded("summary", summary_section.TITLE,
                                lambda: summary_section.summary(snap, built, experiment))
    return [built[key] for key in ORDER if key in built]


def _guarded_parts(build: Callable[[], list[Section]]) -> list[Section]:
    try:
        return build()
    except Exception as exc:  # parts that cannot even be listed leave the section as it is
        warnings.warn(f"report parts of the claims section failed: {type(exc).__name__}: {exc}", stacklevel=3)
        return [Section("claims-seeds", "Seeds of the claims", error=f"{type(exc).__name__}: {exc}".splitlines()[0])]


def _guarded(key: str, title: str, build: Callable[[], Section]) -> Section:
    try:
        return build()
    except Exception as exc:  # one broken result must not hide the others
        warnings.warn(f"report section {title!r} failed: {type(exc).__name__}: {exc}", stacklevel=3)
        return Section(key, title, error=f"{type(exc).__name__}: {exc}".splitlines()[0])


# ---------------------------------------------------------------------- writing
def _write(folder: Path, snap: Snapshot, built: list[Section]) -> None:
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
        "key": sec.key, "title": sec.title, "appendix": sec.appendix, "status": sec.status, "missing": sec.missing,
        "command": sec.command, "error": sec.error, "notes": sec.notes,
        "tables": [f"tables/{t.name}.csv" for t in sec.tables],
        "figures": [f.files["png"] for f in sec.figures],
        "parts": [_save(p, figdir, tabdir) for p in sec.parts],
    }


def _csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False)  # full precision: the CSV is the machine-readable record
