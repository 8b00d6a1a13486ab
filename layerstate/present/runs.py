"""What the command line prints about training, capture, a store's check, packing and the report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from analysis.behaviour import stored_failed_runs
from store.integrity.assess import damage_lines, fix


def training_line(res: Any, i: int, n: int) -> str:
    """``[i/n] run: 120 steps, 31s; accuracy len40=0.998 len80=0.951`` for a
    :class:`capture.train.TrainResult`."""
    accs = " ".join(f"len{k}={v:.3f}" for k, v in sorted(res.accuracy.items()))
    state = "already trained" if res.skipped else f"{res.steps} steps, {res.seconds:.0f}s"
    if getattr(res, "resumed_at", ()):
        state += f" (resumed from step {', '.join(map(str, res.resumed_at))})"
    return f"[{i}/{n}] {res.run_id}: {state}; accuracy {accs}"


def capture_line(results: Sequence[Any], into: str | None = None) -> str:
    """One line for a list of :class:`capture.record.CaptureResult`; with ``into`` (a store
    path) it also says how many blocks were already there."""
    written = sum(r.blocks_written for r in results)
    if into is None:
        return f"captured {len(results)} groups ({written} blocks written)"
    already = sum(r.blocks_total for r in results) - written
    return f"captured {len(results)} groups into {into} ({written} blocks written, {already} already there)"


def failed_run_lines(store: Any) -> list[str]:
    """The runs the store's behaviour results say did not learn (:func:`analysis.behaviour.failed_runs`),
    one line each: what `inspect` shows."""
    return stored_failed_runs(store)


def validation_notes(rep: Any) -> Iterator[str]:
    """Warnings and problems of a :class:`store.Report` (for stderr), then, where chunks are
    damaged, what is lost and what can still be analysed (:func:`store.integrity.assess.damage_lines`)."""
    for w in rep.warnings:
        yield f"warning: {w}"
    if not rep.ok:
        for p in rep.problems:
            yield f"problem: {p}"
        yield from damage_lines(rep, rep.location)


def validation_verdict(rep: Any, where: str) -> str:
    """``ok: ...`` or the one-line failure with its fix (the command exits 2 on that)."""
    if rep.ok:
        return f"ok: {where} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified)"
    step = fix(rep, where)
    return (f"{where} failed validation ({len(rep.problems)} problem(s), first: {rep.problems[0]})"
            + (f"; {step}" if step else ""))


def graded_verdict(rep: Any, where: str) -> str:
    """``ok: ...`` with the number of warnings listed above it (a SHOULD not met), or the
    one-line failure as :func:`validation_verdict` words it."""
    if not rep.ok:
        return validation_verdict(rep, where)
    n = len(rep.warnings)
    graded = f"; {n} warning(s)" if n else ""
    return f"ok: {where} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified{graded})"


def packed(where: str, path: Any) -> str:
    return f"packed {where} -> {path} ({path.stat().st_size / 2**20:.1f} MB)"


def unpacked(archive: str, path: Any) -> str:
    return f"unpacked {archive} -> {path}"


def report_line(path: Any) -> str:
    return f"report: {path}"
