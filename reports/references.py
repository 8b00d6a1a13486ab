"""Paper comparison: values a paper reported, each beside ours with our interval.

An experiment declares them as ``[[reference]]`` tables (the experiment dict the report is
given, or the store's ``experiment`` attribute, holds them under ``reference``)::

    [[reference]]
    source = "Jiang 2026, Table 3"   # who reported it (required)
    metric = "claim"                 # claim | accuracy | probe_accuracy (required)
    claim = "conv1d-s3"              # metric = "claim": our number is this claim's estimate
                                     # (a profile_match claim has one row per arch: add arch = ...)
    value = -12.64                   # the reported value (required)
    unit = "pp"                      # fraction (default) | pp | percent: pp and percent are / 100
    note = "pretrained Mamba-130M"   # optional, shown beside the comparison

    [[reference]]
    source = "Jiang 2026, Fig. 2"
    metric = "accuracy"              # the model's own accuracy (the behaviour table)
    task = "parity"
    arch = "lstm"
    variant = "default"              # optional, default "default"
    length = 120                     # optional when the cell has one length
    value = 1.0

    [[reference]]
    source = "Jiang 2026, Fig. 3"
    metric = "probe_accuracy"        # probe accuracy at one layer (the probe-profile table)
    task = "dyck"
    arch = "transformer"
    layer = "L1"
    length = 40                      # optional: the probes' fit length
    target = "depth"                 # optional: the probed label, where a task has several
    value = 0.95

A claim's estimate is on the claim's own scale: ``treatment - reference`` for difference and
equivalence claims (Conv1D removal in Mamba: ``no_conv - default``, so the paper's -12.64 pp
on S3 is ``value = -12.64, unit = "pp"``), the mean probe accuracy for ``readable_by``. The
comparison says whether the paper's value lies inside our 95% interval; with too few seeds for
an interval (:mod:`reports.intervals`) it says that it cannot tell.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.claims.kinds import trait
from reports import intervals

METRICS = ("claim", "accuracy", "probe_accuracy")
#: Divide a value written in this unit by the factor to get a fraction.
UNITS = {"fraction": 1.0, "pp": 100.0, "percent": 100.0, "%": 100.0}
CONDITIONS = ("claim", "task", "arch", "variant", "length", "layer", "target")
COLUMNS = ["source", "metric", "condition", "value", "unit", "paper", "kind", "estimate", "lower", "upper",
           "n_seeds", "interval_note", "seed_a", "seed_b", "inside", "verdict", "note"]


def declared(experiment: dict | None) -> list[Any]:
    """The experiment's ``reference`` tables (also accepted: ``references``)."""
    if not isinstance(experiment, dict):
        return []
    refs = experiment.get("reference", experiment.get("references")) or []
    return list(refs) if isinstance(refs, list | tuple) else [refs]


def comparison(
    refs: list[Any],
    *,
    claims: pd.DataFrame | None = None,
    behaviour: pd.DataFrame | None = None,
    probes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per reference: the paper's value, ours with its interval, and whether the
    paper's value lies inside our interval (``inside``: True, False or NaN = cannot tell).

    ``claims``, ``behaviour`` and ``probes`` are the report's frames after the interval rules
    (:func:`reports.claims.claims_frame`, :func:`reports.behaviour.accuracy_frame`,
    :func:`reports.readout.profile_frame`).
    """
    rows = []
    for i, ref in enumerate(refs, 1):
        row: dict[str, Any] = {c: np.nan for c in COLUMNS}
        row.update(source="", metric="", condition="", unit="fraction", kind="", note="", interval_note="")
        try:
            row.update(_compare(ref, claims, behaviour, probes))
        except ValueError as exc:
            if isinstance(ref, dict):
                row.update(source=str(ref.get("source", "")), metric=str(ref.get("metric", "")),
                           condition=_condition(ref))
            else:
                row["source"] = f"reference #{i}"
            row["verdict"] = f"not compared: {exc}"
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _condition(ref: dict) -> str:
    """The conditions a reference names, in words (a claim: its id, and arch where given)."""
    keys = ("claim", "arch") if ref.get("claim") else CONDITIONS
    return ", ".join(f"{k} {ref[k]}" for k in keys if ref.get(k) not in (None, ""))


def _compare(ref: Any, claims, behaviour, probes) -> dict[str, Any]:
    if not isinstance(ref, dict):
        raise ValueError("a [[reference]] entry must be a table")
    metric = ref.get("metric") or ("claim" if ref.get("claim") else None)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)} (got {metric!r})")
    if not ref.get("source"):
        raise ValueError("source is required (who reported the value)")
    unit = str(ref.get("unit") or "fraction")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)} (got {unit!r})")
    try:
        value = float(ref["value"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"value must be a number (got {ref.get('value')!r})") from None
    paper = value / UNITS[unit]
    out: dict[str, Any] = {"source": str(ref["source"]), "metric": metric, "condition": _condition(ref),
                           "value": value, "unit": unit, "paper": paper, "note": str(ref.get("note", "") or "")}
    ours = {"claim": _claim_row, "accuracy": _behaviour_row, "probe_accuracy": _probe_row}[metric](
        ref, {"claim": claims, "accuracy": behaviour, "probe_accuracy": probes}[metric])
    out.update(ours)
    out["inside"], out["verdict"] = _verdict(paper, ours)
    return out


def _one(frame: pd.DataFrame, what: str) -> pd.Series:
    if len(frame) == 0:
        raise ValueError(f"no {what} in this report")
    if len(frame) > 1:
        raise ValueError(f"{len(frame)} rows match {what}; name more conditions")
    return frame.iloc[0]


def _ours(row: pd.Series, extra: dict | None = None) -> dict[str, Any]:
    out = {k: row.get(k, np.nan) for k in ("estimate", "lower", "upper", "n_seeds", "seed_a", "seed_b")}
    out["interval_note"] = str(row.get("interval_note", "") or "")
    out.update(extra or {})
    return out


def _claim_row(ref: dict, claims: pd.DataFrame | None) -> dict[str, Any]:
    cid = str(ref.get("claim") or "")
    if not cid:
        raise ValueError("metric = 'claim' needs claim = '<id>'")
    if claims is None:
        raise ValueError("no evaluated claims in this store")
    rows = claims[claims["claim"] == cid]
    if not len(rows):
        per_arch = claims[claims["claim"].str.startswith(cid + "[")]
        if ref.get("arch"):
            per_arch = per_arch[per_arch["claim"] == f"{cid}[{ref['arch']}]"]
        if len(per_arch) > 1:
            raise ValueError(f"claim {cid!r} has one row per architecture; add arch = ...")
        rows = per_arch
    row = _one(rows, f"claim {cid!r}")
    return _ours(row, {"kind": row.get("kind")})


def _behaviour_row(ref: dict, frame: pd.DataFrame | None) -> dict[str, Any]:
    if frame is None:
        raise ValueError("no behaviour results (captured logits) in this store")
    sub = _select(frame, ref, ("task", "arch"))
    return _ours(_one(sub, f"accuracy for {_condition(ref)}"))


def _probe_row(ref: dict, frame: pd.DataFrame | None) -> dict[str, Any]:
    if frame is None:
        raise ValueError("no probe results in this store")
    if not ref.get("layer"):
        raise ValueError("metric = 'probe_accuracy' needs layer = '<layer>'")
    sub = frame
    if ref.get("target"):
        sub = sub[sub["target"].astype(str) == str(ref["target"])]
    # a task probed for several targets is named "task (target)" on the page
    task = str(ref.get("task", ""))
    sub = sub[(sub["task"].astype(str) == task) | sub["task"].astype(str).str.startswith(f"{task} (")]
    sub = _select(sub.assign(task=task), ref, ("arch",), layer=True)
    if "length" not in ref and "fit_length" in sub and len(sub):
        sub = sub[sub["length"] == sub["fit_length"]]
    return _ours(_one(sub, f"probe accuracy for {_condition(ref)}"))


def _select(frame: pd.DataFrame, ref: dict, required: tuple[str, ...], *, layer: bool = False) -> pd.DataFrame:
    for key in required:
        if not ref.get(key):
            raise ValueError(f"metric = {ref.get('metric')!r} needs {key} = ...")
    sub = frame
    for key in ("task", "arch"):
        if ref.get(key):
            sub = sub[sub[key].astype(str) == str(ref[key])]
    sub = sub[sub["variant"].astype(str) == str(ref.get("variant") or "default")]
    if layer:
        sub = sub[sub["layer"].astype(str) == str(ref["layer"])]
    if ref.get("length") is not None:
        sub = sub[sub["length"].astype(int) == int(ref["length"])]
    elif len(sub) > 1 and not layer:
        lengths = ", ".join(str(int(L)) for L in sorted(sub["length"].unique()))
        raise ValueError(f"the cell has lengths {lengths}; add length = ...")
    return sub


def _verdict(paper: float, ours: dict[str, Any]) -> tuple[float, str]:
    """(inside: 1.0, 0.0 or NaN), and the words for the table."""
    note = ours.get("interval_note", "")
    est, lo, hi = (float(ours.get(k, np.nan)) for k in ("estimate", "lower", "upper"))
    if not np.isfinite(est):
        return np.nan, "not compared: no estimate of ours"
    if note == intervals.TOO_FEW:
        return np.nan, "cannot tell: too few seeds for an interval"
    if note == intervals.TOO_WIDE:
        return np.nan, "cannot tell: our interval spans the whole range"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return np.nan, "cannot tell: no interval"
    one_seed = " (one seed: the interval covers sequence sampling only)" if ours.get("n_seeds") == 1 else ""
    if lo <= paper <= hi:
        return 1.0, "yes: inside our interval" + one_seed
    side = "below" if paper < lo else "above"
    return 0.0, f"no: {side} our interval" + one_seed


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison as the page shows it: both values in the paper's unit."""
    rows = []
    for _, r in frame.iterrows():
        scale = UNITS.get(str(r["unit"]), 1.0)
        unit = "" if r["unit"] == "fraction" else (" pp" if r["unit"] == "pp" else "%")
        digits = 3 if scale == 1.0 else 2
        signed = trait(str(r.get("kind", "")), "compares") or (
            np.isfinite(float(r["value"])) and float(r["value"]) < 0)
        paper = "–" if not np.isfinite(float(r["value"])) else (
            f"{float(r['value']):+.{digits}f}{unit}" if signed else f"{float(r['value']):.{digits}f}{unit}")
        ours = intervals.interval_text(
            float(r["estimate"]) * scale, float(r["lower"]) * scale, float(r["upper"]) * scale,
            str(r["interval_note"]), (float(r["seed_a"]) * scale, float(r["seed_b"]) * scale),
            digits=digits, signed=signed)
        rows.append({
            "source": r["source"],
            "what": str(r["condition"]) if r["metric"] == "claim" else
                    (f"{r['metric']}: {r['condition']}" if r["condition"] else str(r["metric"])),
            "paper": paper,
            "ours [95% CI]": ours if ours == "–" else ours + unit,
            "seeds": "–" if not np.isfinite(float(r["n_seeds"])) else str(int(r["n_seeds"])),
            "paper's value in our interval?": r["verdict"],
            "note": r["note"],
        })
    return pd.DataFrame(rows)
