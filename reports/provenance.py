"""The appendix: the experiment, the runs, their configurations and the store's validation.

Each function reads a :class:`~reports.snapshot.Snapshot` and returns a
:class:`~reports.model.Section`; a section whose results are absent says which command
produces them instead of failing. Intervals go through :func:`reports.intervals.apply_rules`.
"""

from __future__ import annotations

import json

import pandas as pd

from reports.model import Section, Table
from reports.numbers import is_number
from reports.snapshot import Snapshot
from store import validate

MAX_LISTED = 20

PROVENANCE_TITLE = "Appendix: experiment and provenance"


def provenance(snap: Snapshot, experiment: dict | None = None, *, check_chunks: bool = True) -> Section:
    """Store attributes, the runs, their configs and the store's checksum check (the appendix)."""
    st, info = snap.store, snap.info
    attrs = st.attrs
    prov = attrs.get("provenance") or {}
    sec = Section("provenance", PROVENANCE_TITLE, appendix=True)
    exp_info = (experiment or {}).get("experiment", experiment or {})
    if isinstance(exp_info, dict) and exp_info.get("description"):
        sec.intro = str(exp_info["description"])
    rows = [
        ("store", info["location"]),
        ("title", attrs.get("title") or exp_info.get("title", "") if isinstance(exp_info, dict) else ""),
        ("schema", attrs.get("schema")),
        ("created", attrs.get("created")),
        ("layerstate version", attrs.get("tool_version")),
        ("git commit", prov.get("git_commit") or "not a git checkout"),
        ("python", prov.get("python")),
        ("host", prov.get("host")),
        ("platform", prov.get("platform")),
        ("store size (bytes)", info.get("size_bytes")),
    ]
    if isinstance(exp_info, dict) and exp_info.get("name"):
        rows.insert(2, ("experiment", exp_info["name"]))
    packages = sorted((prov.get("packages") or {}).items())
    data = pd.DataFrame(rows + [(f"package {k}", v) for k, v in packages], columns=["field", "value"]).astype(str)
    shown = pd.DataFrame(rows + [("packages", ", ".join(f"{k} {v}" for k, v in packages) or "–")],
                         columns=["field", "value"]).astype(str)
    sec.tables.append(Table("provenance", "What wrote this store.", data, shown))
    sec.tables.append(_runs_table(snap))
    sec.tables.append(_configs_table(snap))
    sec.tables.append(_validation_table(snap, sec, check_chunks))
    if experiment:
        sec.blocks.append(("Experiment configuration as run", json.dumps(experiment, indent=2, sort_keys=True, default=str)))
    sec.notes.extend(snap.notes)
    return sec


def _runs_table(snap: Snapshot) -> Table:
    rows = []
    for rid in snap.runs:
        a = snap.store.run_attrs(rid)
        m = a.get("metrics") or {}
        rows.append({
            "run": rid, "task": a.get("task"), "arch": a.get("arch"), "variant": a.get("variant"),
            "seed": a.get("seed"), "parameters": a.get("n_parameters"), "steps": m.get("steps"),
            "train_seconds": m.get("train_seconds"), "capture_seconds": a.get("capture_seconds"),
            "status": a.get("status", "not trained"),
            "weights": snap.store.has_weights(rid),
            "lengths_complete": " ".join(map(str, snap.complete.get(rid, []))),
            "lengths_incomplete": " ".join(map(str, snap.incomplete.get(rid, []))),
            "config_hash": a.get("config_hash"),
        })
    data = pd.DataFrame(rows, columns=["run", "task", "arch", "variant", "seed", "parameters", "steps",
                                       "train_seconds", "capture_seconds", "status", "weights", "lengths_complete",
                                       "lengths_incomplete", "config_hash"])
    shown = data.drop(columns=["config_hash"]).copy()
    shown["parameters"] = [f"{int(p):,}" if is_number(p) else "–" for p in data["parameters"]]
    shown["steps"] = [str(int(s)) if is_number(s) else "–" for s in data["steps"]]
    for col in ("train_seconds", "capture_seconds"):
        shown[col] = [f"{float(s):.1f}" if is_number(s) else "–" for s in data[col]]
    return Table("runs", "Runs: one trained model each (task x architecture x variant x seed).", data, shown)


def _configs_table(snap: Snapshot) -> Table:
    """Distinct configs (model per arch/variant, task per task, training), with their runs."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for rid in snap.runs:
        a = snap.store.run_attrs(rid)
        for kind, key, cfg in (
            ("model", f"{a.get('arch')}/{a.get('variant')}", a.get("model_config")),
            ("task", str(a.get("task")), a.get("task_config")),
            ("train", str(a.get("task")), a.get("train_config")),
        ):
            if cfg:
                text = json.dumps(cfg, sort_keys=True, default=str)
                seen.setdefault((kind, key, text), []).append(rid)
    rows = [{"kind": k, "for": key, "config": text, "runs": len(rids)} for (k, key, text), rids in seen.items()]
    data = pd.DataFrame(rows, columns=["kind", "for", "config", "runs"])
    return Table("configs", "Configurations (each distinct one once; 'runs' counts the runs using it).", data)


def _validation_table(snap: Snapshot, sec: Section, check_chunks: bool) -> Table:
    rep = validate(snap.store, check_chunks=check_chunks)
    data = pd.DataFrame([{
        "ok": rep.ok, "problems": len(rep.problems), "warnings": len(rep.warnings),
        "arrays_checked": rep.n_arrays, "chunks_verified": rep.n_chunks,
        "checksums_checked": check_chunks,
    }])
    verdict = "passed" if rep.ok else f"FAILED with {len(rep.problems)} problem(s)"
    sec.notes.append(
        f"Store check (`layerstate validate`): {verdict}; {rep.n_chunks} chunks of {rep.n_arrays} arrays "
        f"decoded and their crc32c checksums verified" if check_chunks else
        f"Store check (`layerstate validate`): {verdict}; chunk checksums were not verified for this report"
    )
    for p in rep.problems[:MAX_LISTED]:
        sec.notes.append(f"problem: {p}")
    for w in rep.warnings[:MAX_LISTED]:
        sec.notes.append(f"warning: {w}")
    if len(rep.problems) + len(rep.warnings) > 2 * MAX_LISTED:
        sec.notes.append("… more in `layerstate validate STORE`")
    return Table("validation", "Schema, completion records and checksums of every chunk.", data)
