"""Result text: every line the command line and ``layerstate run`` print about a result.

Lengths are written ``len40`` and layers ``L4`` (``embed``, ``L0``, ``L1``, ...), so the two
never read alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

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


def _get(r: xr.Dataset, name: str, default: Any = "") -> Any:
    """A claim row's field, or ``default`` for results stored before the field existed."""
    return r[name].values.item() if name in r else default


def claim_summaries(res: xr.Dataset) -> Iterator[str]:
    """One short line per evaluated claim: the verdict and why (its outcome against the margin,
    interval and corrected p), and a flag when the cross-check model reaches another verdict."""
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        cid, verdict = str(r.claim.values), str(r.verdict.values)
        if verdict == "not evaluable":
            yield f"claim {cid}: {r.test.values}"
            continue
        flag = (f"; cross-check {_get(r, 'crosscheck_model')} says {_get(r, 'crosscheck_verdict')}"
                if _get(r, "disagreement", False) else "")
        reason = _get(r, "reason")
        if reason:  # the outcome and why: its interval and corrected p are in it
            yield f"claim {cid}: {verdict} — {reason}{flag}"
            continue
        yield (f"claim {cid}: {verdict} (estimate {float(r.estimate):+.3f} [{float(r.lower):+.3f}, "
               f"{float(r.upper):+.3f}], corrected p={float(r.p_adjusted):.3g}{flag})")


def claim_lines(res: xr.Dataset) -> Iterator[str]:
    """One full line per evaluated claim: verdict and why (the outcome against its margin),
    estimate, interval, p and Holm-corrected p, power, the model, the cross-check model's
    estimate, interval, p and verdict (flagged when it differs), and what was dropped."""
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        cid, verdict = str(r.claim.values), str(r.verdict.values)
        if verdict == "not evaluable":
            yield f"{cid}: {r.test.values}"
            continue
        reason = _get(r, "reason")
        line = f"{cid}: {verdict}" + (f" — {reason}" if reason else "")
        line += (f" | estimate {float(r.estimate):+.3f} [{float(r.lower):+.3f}, {float(r.upper):+.3f}]  "
                 f"p={float(r.p):.3g} (Holm {float(r.p_adjusted):.3g})  power={float(r.power):.2f}  "
                 f"— {r.test.values}")
        cross = _get(r, "crosscheck_model")
        if cross:
            x_lo, x_hi = float(_get(r, "crosscheck_lower", np.nan)), float(_get(r, "crosscheck_upper", np.nan))
            iv = f" [{x_lo:+.3f}, {x_hi:+.3f}]" if np.isfinite(x_lo) else ""
            x_p = float(_get(r, "crosscheck_p", np.nan))
            line += f" | cross-check {cross}: {float(_get(r, 'crosscheck_estimate', np.nan)):+.3f}{iv}"
            line += f" p={x_p:.3g}" if np.isfinite(x_p) else ""
            x_v = _get(r, "crosscheck_verdict")
            if x_v:
                line += " → " + (f"{x_v} (DISAGREES)" if _get(r, "disagreement", False) else f"{x_v} (agrees)")
        sds = [float(_get(r, k, np.nan)) for k in ("sd_seed", "sd_model", "sd_sequence")]
        if np.isfinite(sds).all():
            line += f" | SD seed {sds[0]:.3f}, model {sds[1]:.3f}, sequence {sds[2]:.3f}"
        for extra in ("variance", "dropped"):
            if _get(r, extra):
                line += f" | {_get(r, extra)}"
        yield line


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
