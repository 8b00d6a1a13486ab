"""Result text: every line the command line and ``layerstate run`` print about a result.

Lengths are written ``len40`` and layers ``L4`` (``embed``, ``L0``, ``L1``, ...), so the two
never read alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import xarray as xr


def training_line(res: Any, i: int, n: int) -> str:
    """``[i/n] run: 120 steps, 31s; accuracy len40=0.998 len80=0.951`` for a
    :class:`capture.train.TrainResult`."""
    accs = " ".join(f"len{k}={v:.3f}" for k, v in sorted(res.accuracy.items()))
    state = "already trained" if res.skipped else f"{res.steps} steps, {res.seconds:.0f}s"
    return f"[{i}/{n}] {res.run_id}: {state}; accuracy {accs}"


def capture_line(results: Sequence[Any], into: str | None = None) -> str:
    """One line for a list of :class:`capture.record.CaptureResult`; with ``into`` (a store
    path) it also says how many blocks were already there."""
    written = sum(r.blocks_written for r in results)
    if into is None:
        return f"captured {len(results)} groups ({written} blocks written)"
    already = sum(r.blocks_total for r in results) - written
    return f"captured {len(results)} groups into {into} ({written} blocks written, {already} already there)"


def stored(name: str) -> str:
    return f"stored results/{name}"


def probe_lines(ds: xr.Dataset) -> Iterator[str]:
    """Each run's layer profile per length, and its best layer.

    ``L=12`` here is still the length (tests/analysis/test_probes_captured.py asserts this
    spelling); it should become ``len12`` like the others when that test changes.
    """
    for r in ds.run.values:
        for L in ds.length.values:
            p = ds.profile.sel(run=r, length=L)
            line = " ".join(f"{lay}={v:.3f}" for lay, v in zip(ds.layer.values, p.values, strict=True))
            yield f"{r} L={L}: {line}  best {ds.best_layer.sel(run=r, length=L).item()}"


def probe_summary(name: str, ds: xr.Dataset, seconds: float) -> str:
    """``probes/parity: 4 runs in 12s; best layer run:L3, ...`` (at the first length)."""
    best = ", ".join(f"{r}:{b}" for r, b in zip(ds.run.values, ds.best_layer.isel(length=0).values,
                                                strict=True))
    return f"{name}: {ds.sizes['run']} runs in {seconds:.0f}s; best layer {best}"


def ablation_lines(ds: xr.Dataset) -> Iterator[str]:
    """The accuracy drop per layer, per run and setting (at the first length)."""
    for r in ds.run.values:
        for setting in ds.setting.values:
            vals = ds.accuracy_drop.sel(run=r, setting=setting).isel(length=0).values
            line = " ".join(f"{lay}={v:+.3f}" for lay, v in zip(ds.layer.values, vals, strict=True))
            yield f"{r} [{setting}] accuracy drop: {line}"


def patching_lines(ds: xr.Dataset) -> Iterator[str]:
    """Each run's most restoring (layer, position)."""
    for r in ds.run.values:
        rec = ds.recovery.sel(run=r)
        best = rec.where(rec == rec.max()).argmax(...)
        lay, pos = ds.layer.values[int(best["layer"])], ds.position.values[int(best["position"])]
        yield f"{r}: max recovery {float(rec.max()):.3f} at layer {lay}, position {pos}"


def interchange_lines(ds: xr.Dataset) -> Iterator[str]:
    """Each run's mechanism label."""
    for r in ds.run.values:
        yield f"{r}: mechanism {ds.mechanism.sel(run=r).item()}"


def claim_summaries(res: xr.Dataset) -> Iterator[str]:
    """One short line per evaluated claim: verdict, estimate, interval, corrected p."""
    for cid, verdict, est, lo, hi, p, test in zip(res.claim.values, res.verdict.values, res.estimate.values,
                                                  res.lower.values, res.upper.values, res.p_adjusted.values,
                                                  res.test.values, strict=True):
        if verdict == "not evaluable":
            yield f"claim {cid}: {test}"
        else:
            yield f"claim {cid}: {verdict} (estimate {est:+.3f} [{lo:+.3f}, {hi:+.3f}], corrected p={p:.3g})"


def claim_lines(res: xr.Dataset) -> Iterator[str]:
    """One full line per evaluated claim: verdict, estimate, interval, p and Holm-corrected
    p, power, and the test used."""
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        if str(r.verdict.values) == "not evaluable":
            yield f"{str(r.claim.values)}: {str(r.test.values)}"
            continue
        yield (f"{str(r.claim.values)}: {str(r.verdict.values)}  estimate {float(r.estimate):+.3f} "
               f"[{float(r.lower):+.3f}, {float(r.upper):+.3f}]  p={float(r.p):.3g} "
               f"(Holm {float(r.p_adjusted):.3g})  power={float(r.power):.2f}  — {str(r.test.values)}")


def validation_notes(rep: Any) -> Iterator[str]:
    """Warnings and problems of a :class:`store.Report` (for stderr)."""
    for w in rep.warnings:
        yield f"warning: {w}"
    if not rep.ok:
        for p in rep.problems:
            yield f"problem: {p}"


def validation_verdict(rep: Any, where: str) -> str:
    """``ok: ...`` or the one-line failure (the command exits 2 on that)."""
    if rep.ok:
        return f"ok: {where} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified)"
    return f"{where} failed validation ({len(rep.problems)} problem(s), first: {rep.problems[0]})"


def packed(where: str, path: Any) -> str:
    return f"packed {where} -> {path} ({path.stat().st_size / 2**20:.1f} MB)"


def unpacked(archive: str, path: Any) -> str:
    return f"unpacked {archive} -> {path}"


def report_line(path: Any) -> str:
    return f"report: {path}"
