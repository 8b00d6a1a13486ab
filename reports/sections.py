"""The behaviour and claims sections, and the appendix (experiment and provenance).

Each function reads a :class:`~reports.snapshot.Snapshot` and returns a
:class:`~reports.model.Section`; a section whose results are absent says which command
produces them instead of failing. Intervals go through :func:`reports.intervals.apply_rules`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

from analysis.claims.stored import stale_table
from analysis.claims.verdicts import power_words, seeds_note
from reports import figures as F
from reports.intervals import RANGES, apply_rules, interval_text, texts
from reports.model import COMMANDS, Figure, Section, Table, missing_section
from reports.numbers import fmt, fmt_p, read_result
from reports.snapshot import Snapshot
from store import schema, validate

MAX_LISTED = 20


# ---------------------------------------------------------------------- appendix: provenance
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
            "train_seconds": m.get("train_seconds"), "status": a.get("status", "not trained"),
            "weights": snap.store.has_weights(rid),
            "lengths_complete": " ".join(map(str, snap.complete.get(rid, []))),
            "lengths_incomplete": " ".join(map(str, snap.incomplete.get(rid, []))),
            "config_hash": a.get("config_hash"),
        })
    data = pd.DataFrame(rows, columns=["run", "task", "arch", "variant", "seed", "parameters", "steps",
                                       "train_seconds", "status", "weights", "lengths_complete",
                                       "lengths_incomplete", "config_hash"])
    shown = data.drop(columns=["config_hash"]).copy()
    shown["parameters"] = [f"{int(p):,}" if _num(p) else "–" for p in data["parameters"]]
    shown["steps"] = [str(int(s)) if _num(s) else "–" for s in data["steps"]]
    shown["train_seconds"] = [f"{float(s):.1f}" if _num(s) else "–" for s in data["train_seconds"]]
    return Table("runs", "Runs: one trained model each (task x architecture x variant x seed).", data, shown)


def _num(x: Any) -> bool:
    try:
        return x is not None and np.isfinite(float(x))
    except (TypeError, ValueError):
        return False


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


# ---------------------------------------------------------------------- behaviour
BEHAVIOUR_INTRO = (
    "How often each model's own readout is right on labelled target positions, per task, "
    "architecture and sequence length (trained at one length; longer ones are out of distribution). "
    "Accuracy is counted per sequence from the stored logits and stored with its intervals "
    "(results/behaviour/<task>); intervals are seed-level t intervals across seeds (sequences nested "
    "in seeds, never positions resampled)."
)


def behaviour(snap: Snapshot) -> Section:
    """Accuracy per task x arch x variant x length with intervals, a figure and a table."""
    lengths = sorted({L for ls in snap.with_logits.values() for L in ls})
    if not lengths:
        return no_logits(snap)
    frame, notes = accuracy_frame(snap, lengths)
    sec = Section("behaviour", "Behaviour", intro=BEHAVIOUR_INTRO, notes=notes)
    shown = frame.copy()
    shown["accuracy"] = texts(frame)
    pivot = shown.pivot_table(index=["task", "arch", "variant"], columns="length", values="accuracy",
                              aggfunc="first").reset_index()
    pivot.columns = [c if isinstance(c, str) else f"L = {c}" for c in pivot.columns]
    seeds = frame.groupby(["task", "arch", "variant"])["n_seeds"].max().reset_index()
    pivot = pivot.merge(seeds, on=["task", "arch", "variant"]).rename(columns={"n_seeds": "seeds"})
    sec.figures.append(Figure("behaviour_accuracy", "Accuracy against sequence length (bands: 95% intervals).",
                              F.accuracy_vs_length(frame)))
    sec.tables.append(Table("behaviour_accuracy", "Accuracy [95% interval] per length.", frame, pivot))
    training = training_frame(snap)
    if len(training):
        sec.tables.append(Table(
            "behaviour_training", "Training: how each cell's seeds stopped, and whether they were still "
            "learning at the end of the budget.", training, _training_display(training)))
        rising = training[training["still_rising"] > 0]
        if len(rising):
            cells = ", ".join(f"{r.task}/{r.arch}" + ("" if r.variant == "default" else f"/{r.variant}")
                              + f" ({r.still_rising} of {r.seeds})" for r in rising.itertuples())
            sec.notes.append(
                f"Still learning when the budget ran out (whole budget used and held-out accuracy up "
                f"{RISING_GAIN * 100:.0f} pp or more over its second half): {cells}. These models are "
                "under-trained for their architecture; their accuracy is a lower bound on what it can reach "
                "at this size.")
    return sec


#: Said where imported runs hold no logits: what brings them (an import has no experiment to capture from).
IMPORT_LOGITS = (
    "Import the runs again with the model's output logits beside the activations (a `logits` array "
    "in the files, or the model's logits with a TransformerLens or nnsight import; docs/guide/importers.md): "
    "behaviour is the accuracy of the model's own readout, which needs them"
)


def no_logits(snap: Snapshot) -> Section:
    """The behaviour section of a store whose runs hold no logits: what to run depends on how the
    runs came in. Captured from an experiment, ``layerstate capture`` stores them; imported (``layerstate
    import``, no experiment) they come with the import, and a capture command would not apply."""
    imported = [r for r in snap.runs if imported_run(snap, r)]
    what = "No run has complete captured activations with logits."
    if snap.runs and len(imported) == len(snap.runs):
        return Section("behaviour", "Behaviour", intro=BEHAVIOUR_INTRO,
                       missing=f"No run has logits: the runs were imported without them. {IMPORT_LOGITS}.")
    sec = missing_section("behaviour", "Behaviour", what, "capture", BEHAVIOUR_INTRO)
    if imported:
        sec.missing = (f"{what} For the runs trained from an experiment, `{COMMANDS['capture']}` captures them; "
                       f"{len(imported)} imported run{'s' if len(imported) > 1 else ''} ({', '.join(imported[:3])}"
                       f"{' ...' if len(imported) > 3 else ''}): {IMPORT_LOGITS[0].lower()}{IMPORT_LOGITS[1:]}.")
        sec.command = None
    return sec


def imported_run(snap: Snapshot, rid: str) -> bool:
    """Whether run ``rid`` came into the store by ``layerstate import`` (its activation groups
    record ``stream = "import"``) rather than a capture of a model trained from an experiment."""
    streams = set()
    for name, grp in snap.store.run_group(rid).groups():
        parsed = schema.parse_length_group(name)
        if parsed is not None and parsed[0] == schema.LEN:
            streams.add(str(grp.attrs.get("stream", "")))
    return bool(streams) and streams <= {"import"}


#: Held-out accuracy gained over the second half of a run's budget that counts as still rising.
RISING_GAIN = 0.01


def training_frame(snap: Snapshot) -> pd.DataFrame:
    """One row per trained (task, arch, variant): seeds, the step budget, the steps each seed
    used, how many stopped at the target accuracy, on patience or at the end of the budget,
    and how many of those that used the whole budget were still rising (held-out accuracy at
    the end minus at the budget's midpoint >= :data:`RISING_GAIN`)."""
    rows = []
    for rid in snap.runs:
        a = snap.store.run_attrs(rid)
        m, cfg = a.get("metrics") or {}, a.get("train_config") or {}
        curve = [p for p in m.get("curve", []) if _num(p.get("valid_accuracy"))]
        if a.get("status") != "trained" or not curve or not _num(cfg.get("steps")):
            continue
        budget, steps = int(cfg["steps"]), int(m.get("steps", curve[-1]["step"]))
        final = float(curve[-1]["valid_accuracy"])
        target = cfg.get("target_accuracy")
        if target is not None and _num(target) and final >= float(target):
            stop = "target"
        elif steps < budget:
            stop = "patience"
        else:
            stop = "budget"
        half = [p for p in curve if p["step"] <= budget / 2]
        gain = final - float(half[-1]["valid_accuracy"]) if half else np.nan
        rows.append({"task": a.get("task"), "arch": a.get("arch"), "variant": a.get("variant"),
                     "budget": budget, "steps": steps, "stop": stop, "gain_second_half": gain,
                     "rising": stop == "budget" and _num(gain) and gain >= RISING_GAIN})
    cols = ["task", "arch", "variant", "seeds", "budget", "steps_min", "steps_max", "target", "patience",
            "budget_used", "still_rising", "gain_second_half_max"]
    if not rows:
        return pd.DataFrame(columns=cols)
    runs = pd.DataFrame(rows)
    out = runs.groupby(["task", "arch", "variant"], sort=True).agg(
        seeds=("steps", "size"), budget=("budget", "max"), steps_min=("steps", "min"),
        steps_max=("steps", "max"), target=("stop", lambda s: int((s == "target").sum())),
        patience=("stop", lambda s: int((s == "patience").sum())),
        budget_used=("stop", lambda s: int((s == "budget").sum())),
        still_rising=("rising", "sum"), gain_second_half_max=("gain_second_half", "max"),
    ).reset_index()
    out["still_rising"] = out["still_rising"].astype(int)
    return out[cols]


def _training_display(frame: pd.DataFrame) -> pd.DataFrame:
    shown = pd.DataFrame({
        "task": frame["task"], "arch": frame["arch"], "variant": frame["variant"], "seeds": frame["seeds"],
        "budget": frame["budget"],
        "steps used": [f"{a}" if a == b else f"{a}–{b}" for a, b in zip(frame["steps_min"], frame["steps_max"],
                                                                      strict=True)],
        "stopped (target / patience / budget)": [
            f"{t} / {p} / {b}" for t, p, b in zip(frame["target"], frame["patience"], frame["budget_used"],
                                                  strict=True)],
        "still rising": [f"{r} of {n}" if b else "–" for r, b, n in zip(
            frame["still_rising"], frame["budget_used"], frame["seeds"], strict=True)],
    })
    return shown


def accuracy_frame(snap: Snapshot, lengths: list[int]) -> tuple[pd.DataFrame, list[str]]:
    """One row per (task, arch, variant, length): estimate, lower, upper, n_seeds, method,
    read from the stored behaviour results (``results/behaviour/<task>``).

    A task whose stored result does not cover exactly the runs and lengths the snapshot
    holds complete with logits (none stored, or stored before a run or length was added) is
    measured here by the same function the pipeline stores it with
    (:func:`analysis.behaviour.behaviour_result`), and a note names the command that stores
    it. Either way each (task, arch, variant) at each length has its own interval over its
    own seeds, so a run still being captured or a missing seed elsewhere never changes a cell.
    """
    from analysis.behaviour import behaviour_result

    at = {L: [r for r in snap.runs if L in snap.with_logits[r]] for L in lengths}
    task_of = {r: str(snap.store.run_attrs(r).get("task")) for r in snap.runs}
    parts, stale = [], []
    for task in sorted({task_of[r] for rs in at.values() for r in rs}):
        mine = {L: [r for r in rs if task_of[r] == task] for L, rs in at.items()}
        stored = _stored_behaviour(snap, task, {L: rs for L, rs in mine.items() if rs})
        if stored is None:
            stale.append(task)
        else:
            parts.append(_behaviour_rows(stored))
    notes = []
    if stale:
        here = {L: [r for r in rs if task_of[r] in stale] for L, rs in at.items()}
        parts.append(_behaviour_rows(behaviour_result(snap.store, at={L: rs for L, rs in here.items() if rs})))
        names = ", ".join(f"results/{schema.behaviour_name(t)}" for t in stale)
        notes.append(f"Behaviour of {', '.join(stale)} is not stored for the runs and lengths captured now "
                     f"({names}): measured here from the logits; `{COMMANDS['behaviour']}` stores it.")
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[np.isfinite(frame["estimate"])].reset_index(drop=True)
    cols = ["task", "arch", "variant", "length", "estimate", "lower", "upper", "n_seeds", "method", "ci_level", "note",
            "seed_a", "seed_b"]
    frame = frame[cols].sort_values(["task", "arch", "variant", "length"]).reset_index(drop=True)
    frame = apply_rules(frame, *RANGES["accuracy"], t_based=frame["method"] == "seed-level t", clipped_before="note")
    if (frame["n_seeds"] < 2).any():
        notes.append("Cells with one seed: the interval covers sequence sampling only, not training "
                     "variability (train more seeds).")
    return frame, notes


def _stored_behaviour(snap: Snapshot, task: str, at: dict[int, list[str]]):
    """``results/behaviour/<task>`` when it measured exactly the runs and lengths of ``at``
    with each run's declared target, else None."""
    name = schema.behaviour_name(task)
    if name not in snap.results() or "target" in snap.store.result_attrs(name):
        return None
    ds = read_result(snap.store, name)
    held = ds.labelled.notnull().any("sequence")
    have = {int(L): sorted(str(r) for r in ds.run.values[held.sel(length=L).values]) for L in ds.length.values}
    return ds if {L: rs for L, rs in have.items() if rs} == {L: sorted(rs) for L, rs in at.items()} else None


def _behaviour_rows(ds) -> pd.DataFrame:
    """A behaviour result's intervals as rows: task, arch, variant, length, estimate, lower,
    upper, n_seeds, method, ci_level, note (cells without runs at a length left out)."""
    frame = ds[["estimate", "lower", "upper", "n_seeds", "method", "note"]].to_dataframe().reset_index()
    frame = frame.rename(columns={"cell_task": "task", "cell_arch": "arch", "cell_variant": "variant"})
    frame = frame[frame["n_seeds"] > 0].copy()
    frame["ci_level"] = float(ds.attrs["ci_level"])
    frame["length"] = frame["length"].astype(np.int64)
    frame["n_seeds"] = frame["n_seeds"].astype(np.int64)
    # a 2-seed cell shows its two seeds' values: read them, not recovered from a clipped interval
    acc = ds["accuracy"].to_dataframe().reset_index()
    pairs = {}
    for key, grp in acc.dropna(subset=["accuracy"]).groupby(["task", "arch", "variant", "length"]):
        if len(grp) == 2:
            pairs[tuple(str(k) for k in key[:3]) + (int(key[3]),)] = sorted(grp["accuracy"].astype(float))
    two = [pairs.get((str(r.task), str(r.arch), str(r.variant), int(r.length)), [np.nan, np.nan])
           for r in frame.itertuples()]
    frame["seed_a"] = [p[0] for p in two]
    frame["seed_b"] = [p[1] for p in two]
    return frame.drop(columns=["cell"])


# ---------------------------------------------------------------------- claims
CLAIMS_TITLE = "Claims: tests and power"
CLAIMS_INTRO = (
    "Hypotheses declared before looking, each with its estimate, 95% interval, test, p-value, "
    "p-value corrected across all claims (Holm), power and a verdict with its reason. A claim with a "
    "margin ends in one of four outcomes: supported (different from zero and beyond the margin), "
    "negligible (different from zero but inside the margin: real, too small to matter), equivalent "
    "(inside the margin and not different from zero), or inconclusive (neither shown; its power and "
    "minimum detectable effect say how far the data were from deciding); contradicted means the "
    "interval lies on the wrong side and a test of that side passes, Holm-corrected across the "
    "claims like support. A non-significant difference is never read as 'no effect'. "
    "Accuracy claims are fitted by one claim model: the paired t on per-seed differences (the default, "
    "best calibrated), a binomial GEE with seeds as clusters, or a linear mixed model (mixedlm: REML, with "
    "intercepts for seed, trained model and sequence), which also runs beside the default as a cross-check. "
    "Both the GEE and the mixed model test with a cluster-robust (CR2) standard error, seeds as clusters, "
    "and Bell-McCaffrey degrees of freedom (when every seed is scored on as many sequences, the mixed "
    "model's test is exactly the paired t); a GLMM gives estimates "
    "and variance components only, never a verdict. A bound or readable_by claim is decided by the exact "
    "sign test on the share of seeds beyond its threshold (its estimate is the median seed), which holds "
    "at the accuracy ceiling and with a failing seed; it needs at least 5 seeds, more at a Holm step below "
    "alpha, and says so when it has fewer (docs/ceiling.md)."
)
#: Said under the claims table when it shows variance components.
SD_NOTE = (
    "SD seed, SD model and SD sequence (accuracy claims, from the mixed model, accuracy scale) split "
    "the spread between seeds, between a seed's trained models and between evaluation sequences: "
    "when the seed and model SDs are large beside SD sequence / sqrt(sequences), more seeds narrow "
    "the interval and more sequences barely do."
)
#: Marks a cross-check whose verdict differs from the claim's (the page colours the cell).
DISAGREES = "⚠ disagrees"
#: The columns of :func:`claims_display` the Summary's claims table shows; the claims section
#: leaves them out (each is shown once on the page).
SHOWN_IN_SUMMARY = ("statement", "reason", "estimate [95% CI]")
#: The anchor of a claim's row in the Summary's claims table (the claims section links to it).
CLAIM_ANCHOR = "claim"


def claims(snap: Snapshot, experiment: dict | None = None) -> Section:
    """The claims table and forest plot from ``results/claims``; ``experiment`` (its
    ``claims`` tables) says which metric each claim reads, hence its interval's range."""
    if "claims" not in snap.results():
        return missing_section("claims", CLAIMS_TITLE, "No evaluated claims in this store.", "stats", CLAIMS_INTRO)
    ds = read_result(snap.store, "claims")
    stale = stale_table(snap.store, ds)
    if stale is not None:  # verdicts from fewer seeds than the store holds are not shown as verdicts
        return missing_section("claims", CLAIMS_TITLE, f"The stored verdicts are out of date: {stale}. Decide "
                               "them again on every seed the store holds.", "stats", CLAIMS_INTRO)
    frame = claims_frame(ds, claim_metrics(experiment, ds))
    sec = Section("claims", CLAIMS_TITLE, intro=CLAIMS_INTRO)
    alpha = ds.attrs.get("alpha", 0.05)
    sec.notes.append(f"alpha = {alpha}; correction: {ds.attrs.get('correction', 'holm')}. "
                     "Profile-match estimates are differences of profile-shape distances; their "
                     "evidence is the permutation p, not an interval.")
    shown = claims_display(frame)
    if any(c.startswith("SD ") for c in shown.columns):
        sec.notes.append(SD_NOTE)
    if "cross-check verdict" in shown.columns:
        n = int(frame["disagreement"].sum()) if "disagreement" in frame else 0
        sec.notes.append("Cross-check: a second claim model fitted to the same data, its interval under the "
                         "same rules; " + (f"{n} claim(s) where its verdict differs are marked '{DISAGREES}'."
                                           if n else "its verdict agrees with every claim's."))
    # each claim's statement, estimate and reason are the Summary's claims table (section 1), shown once:
    # this one holds the tests behind them, its claims linked to their rows there
    tests = shown.drop(columns=[c for c in SHOWN_IN_SUMMARY if c in shown.columns])
    sec.tables.append(Table("claims", "The tests behind each claim's verdict: claim model, test, p-values, power, "
                            "the cross-check and variance components (each claim's statement, estimate with its "
                            "95% interval and reason are in the Summary, section 1; every column in the CSV).",
                            frame, tests, link=CLAIM_ANCHOR))
    sec.figures.append(Figure("claims_forest", "Claim estimates with 95% intervals, coloured by verdict.",
                              F.forest(frame)))
    return sec


def _text(frame: pd.DataFrame, col: str) -> pd.Series:
    """A text column, '' where absent (stores written before the column existed)."""
    if col not in frame:
        return pd.Series([""] * len(frame), index=frame.index, dtype=str)
    return frame[col].fillna("").astype(str).replace("nan", "")


def _floats(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[col], errors="coerce").astype(float)


def _power_text(kind: str, power: float, at: float, margin: float, stage: float = 0.0, model: str = "") -> str:
    words = power_words(kind, power, at, margin, sequential=bool(np.isfinite(stage) and stage > 0),
                        share=model == "sign_test")
    return words.removeprefix("power: ").removeprefix("power ")


def claims_display(frame: pd.DataFrame) -> pd.DataFrame:
    """The claims table as the page shows it: verdict and reason, the test, power at its effect,
    the cross-check, and (when any claim has them) variance components, dropped data and the
    GLMM's text."""
    shown = pd.DataFrame({
        "claim": frame["claim"],
        "statement": frame["statement"],
        "verdict": frame["verdict"],
        "reason": reason_texts(frame),
        "estimate [95% CI]": claim_texts(frame),
        "model": _text(frame, "model"),
        "test": frame["test"],
        "p": [fmt_p(p) for p in frame["p"]],
        "p (Holm)": [fmt_p(p) for p in frame["p_adjusted"]],
        "power at effect": [_power_text(k, p, a, m, st, md) for k, p, a, m, st, md in zip(
            frame["kind"], frame["power"], _floats(frame, "power_at"), _floats(frame, "margin"),
            _floats(frame, "sequential_stage").fillna(0.0), _text(frame, "model"), strict=True)],
        "MDE": [fmt(m, 3) for m in frame["mde"]],
        "seeds": [str(int(n)) if np.isfinite(n) else "–" for n in frame["n_seeds"]],
    }, index=frame.index)
    if (_text(frame, "model") == "").all():
        shown = shown.drop(columns=["model"])
    cross = _text(frame, "crosscheck_model")
    if (cross != "").any():
        verdicts = _text(frame, "crosscheck_verdict")
        disagree = frame["disagreement"].astype(bool) if "disagreement" in frame else pd.Series(False, index=frame.index)
        shown["cross-check"] = cross.replace("", "–")
        shown["cross-check [95% CI]"] = claim_texts(frame, prefix="crosscheck_")
        shown["cross-check p"] = [fmt_p(p) for p in _floats(frame, "crosscheck_p")]
        shown["cross-check verdict"] = [f"{DISAGREES}: {v}" if d else (v or "–")
                                        for v, d in zip(verdicts, disagree, strict=True)]
    for col, head in (("sd_seed", "SD seed"), ("sd_model", "SD model"), ("sd_sequence", "SD sequence")):
        values = _floats(frame, col)
        if np.isfinite(values).any():
            shown[head] = [fmt(v, 3) for v in values]
    for col, head in (("dropped", "dropped"), ("variance", "variance")):
        values = _text(frame, col)
        if (values != "").any():
            shown[head] = values.replace("", "–")
    return shown.reset_index(drop=True)


def claim_metrics(experiment: dict | None, stored=None) -> dict[str, str]:
    """Claim id -> the metric it reads: from the stored claims result's ``metric`` variable
    (``stored``, written since the claims record it), else from the experiment's ``claims``
    tables (the default, ``accuracy``, where a table does not say). Without either, a report
    built by ``layerstate report STORE`` could not bound an accuracy claim's interval."""
    out = {}
    for c in (experiment or {}).get("claims") or []:
        if isinstance(c, dict) and c.get("id"):
            out[str(c["id"])] = str(c.get("metric") or "accuracy")
    if stored is not None and "metric" in stored:
        out.update(zip(map(str, stored["claim"].values), map(str, stored["metric"].values), strict=True))
    return out


def claim_range(kind: str, metric: str | None) -> tuple[float, float]:
    """What a claim's estimate can take: differences of accuracies [-1, 1], probe accuracy
    [0, 1], profile-shape distance [0, 1]; a bound claim's estimate is the metric itself
    (accuracies [0, 1], ablation drops and refitted accuracies above chance [-1, 1], patching
    recovery unbounded); restoration and drop differences, and comparisons whose metric is
    not known (no experiment given), are not bounded."""
    if kind == "readable_by":
        return RANGES["probe_accuracy"]
    if kind == "profile_match":
        return RANGES["shape_distance"]
    if kind == "bound":
        if metric in ("accuracy", "probe_accuracy"):
            return RANGES["accuracy"]
        if metric in ("ablation_drop", "refit_accuracy"):
            return RANGES["drop"]
        return RANGES["recovery"]
    if metric in ("accuracy", "probe_accuracy", "refit_accuracy"):
        return RANGES["accuracy_difference"]
    return RANGES["restoration_difference"]


def claims_frame(ds, metrics: dict[str, str] | None = None) -> pd.DataFrame:
    """The claims Dataset (dim ``claim``) as one row per claim, plus the reference value,
    with the interval rules applied (:mod:`reports.intervals`).

    ``metrics`` maps claim ids to the metric each reads (:func:`claim_metrics`); a
    ``metric`` variable in the Dataset is used where present.
    """
    frame = ds.to_dataframe().reset_index()
    for col in ("statement", "kind", "test", "verdict", "claim", "reason", "outcome", "model",
                "crosscheck_model", "crosscheck_verdict", "dropped", "variance"):
        if col in frame:
            frame[col] = frame[col].astype(str)
    ref = np.where(frame["kind"].isin(["difference", "equivalence"]), 0.0, np.nan)
    if "reference_mean" in frame:
        # readable_by and bound claims are judged against their threshold
        ref = np.where(frame["kind"].isin(["readable_by", "bound"]), frame["reference_mean"], ref)
    frame["reference"] = ref
    metrics = metrics or {}
    if "metric" in frame:
        known = frame["metric"].astype(str)
    else:
        known = pd.Series([metrics.get(c.split("[", 1)[0]) for c in frame["claim"]], index=frame.index)
    ranges = [claim_range(k, m) for k, m in zip(frame["kind"], known, strict=True)]
    low, high = [r[0] for r in ranges], [r[1] for r in ranges]
    # a claim's interval is the one its test used: shown from 2 seeds, as the CLI shows it
    frame = apply_rules(frame, low, high, t_based=((frame["kind"] != "profile_match") & (frame.get("model", "") != "sign_test")).to_numpy(), min_seeds=2)
    for other in ("crosscheck",):  # a second model's interval of the same estimate: the same rules
        if {f"{other}_estimate", f"{other}_lower", f"{other}_upper"} <= set(frame.columns):
            frame = apply_rules(frame, low, high, value=f"{other}_estimate", lower=f"{other}_lower",
                                  upper=f"{other}_upper", note=f"{other}_interval_note",
                                  seed_values=None, min_seeds=2)
    first = ["claim", "statement", "kind", "verdict", "outcome", "reason", "estimate", "lower", "upper",
             "interval_note", "model", "test", "p", "p_adjusted", "power", "power_at", "mde", "n_seeds", "margin",
             "crosscheck_model", "crosscheck_estimate", "crosscheck_lower", "crosscheck_upper",
             "crosscheck_interval_note", "crosscheck_p", "crosscheck_verdict", "disagreement",
             "sd_seed", "sd_model", "sd_sequence", "variance", "dropped"]
    return frame[[c for c in first if c in frame] + [c for c in frame if c not in first]]


def reason_texts(frame: pd.DataFrame) -> list[str]:
    """Each claim's ``reason``, with the interval it quotes shown as the table shows it: an
    interval the rules of :mod:`reports.intervals` hide (too few seeds, spans the whole range)
    or clip is not quoted raw in the sentence beside it; '–' where there is no reason."""
    out = []
    for r, text, shown in zip(frame.itertuples(index=False), _text(frame, "reason"), claim_texts(frame), strict=True):
        note = str(getattr(r, "interval_note", "") or "")
        if note and " [" in shown:
            bracket = shown[shown.index(" [") + 1:].replace("\\", "\\\\")
            text = _RAW_INTERVAL.sub(f"95% interval {bracket}", text)
        out.append(text or "–")
    return out


_RAW_INTERVAL = re.compile(r"95% interval \[[^\]]*\]")


def claim_texts(frame: pd.DataFrame, prefix: str = "") -> list[str]:
    """Estimate and interval of each claim (signed for differences); ``prefix="crosscheck_"``
    gives the cross-check's (its interval went through the same rules, :func:`claims_frame`;
    without the two seeds' values, which only a paired t interval gives back)."""
    out = []
    for _, r in frame.iterrows():
        if prefix:
            est, lo, hi = (float(r.get(f"{prefix}{k}", np.nan)) for k in ("estimate", "lower", "upper"))
            note, seeds = str(r.get(f"{prefix}interval_note", "") or ""), None
            why = "no interval" if str(r.get(f"{prefix}model", "")) != "glmm" else "GLMM: estimate only"
        else:
            est, lo, hi = float(r.estimate), float(r.lower), float(r.upper)
            note, seeds = str(r.interval_note), (r.seed_a, r.seed_b)
            why = "permutation test: no interval" if r.kind == "profile_match" else "no interval"
        text = interval_text(est, lo, hi, note, seeds, signed=r.kind in ("difference", "equivalence"),
                               why_none=why)
        if not prefix and np.isfinite(lo) and np.isfinite(hi) and str(r.get("model", "")) != "sign_test":
            text += seeds_note(float(r.get("n_seeds", np.nan)))  # a t interval from 2 seeds: how wide
        out.append(text)
    return out

