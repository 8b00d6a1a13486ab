"""The behaviour section: each cell's accuracy per length with its interval, and how training stopped.

Each function reads a :class:`~reports.snapshot.Snapshot` and returns a
:class:`~reports.model.Section`; a section whose results are absent says which command
produces them instead of failing. Intervals go through :func:`reports.intervals.apply_rules`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import registry
from analysis.behaviour import behaviour_result, stored_failed_runs
from reports import figures as F
from reports.intervals import RANGES, apply_rules, texts
from reports.model import COMMANDS, Figure, Section, Table, missing_section
from reports.numbers import is_number, read_result
from reports.snapshot import Snapshot
from store import schema

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
    failed = failed_lines(snap)
    if failed:
        sec.notes.append("Runs at chance (the lower end of their accuracy's 95% interval over resampled "
                         "sequences at or below chance, the majority class's share): " + "; ".join(failed)
                         + ". The claims keep them (leaving them out would bias the cells towards the seeds that "
                         "learned); a share claim says how many seeds of a cell learn.")
    baselines = sorted({"/".join(str(a.get(k)) for k in ("task", "arch", "variant")) for a in
                        (snap.store.run_attrs(r) for r in snap.runs) if a.get("untrained")})
    if baselines:
        sec.notes.append(f"Untrained baselines ({', '.join(baselines)}): the models as initialised, never "
                         "trained; their accuracy is chance by construction and shown for reference only, "
                         "not as a model's behaviour (their use is the probe profile beside the trained one).")
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


def failed_lines(snap: Snapshot) -> list[str]:
    """The runs of the stored behaviour results that did not learn, in words
    (:func:`analysis.behaviour.failed_runs`); untrained baselines are not named (chance is what
    they are for)."""
    return stored_failed_runs(snap.store)


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
        curve = [p for p in m.get("curve", []) if is_number(p.get("valid_accuracy"))]
        if a.get("status") != "trained" or not curve or not is_number(cfg.get("steps")):
            continue
        budget, steps = int(cfg["steps"]), int(m.get("steps", curve[-1]["step"]))
        final = float(curve[-1]["valid_accuracy"])
        target = cfg.get("target_accuracy")
        if target is not None and is_number(target) and final >= float(target):
            stop = "target"
        elif steps < budget:
            stop = "patience"
        else:
            stop = "budget"
        half = [p for p in curve if p["step"] <= budget / 2]
        gain = final - float(half[-1]["valid_accuracy"]) if half else np.nan
        rows.append({"task": a.get("task"), "arch": a.get("arch"), "variant": a.get("variant"),
                     "budget": budget, "steps": steps, "stop": stop, "gain_second_half": gain,
                     "rising": stop == "budget" and is_number(gain) and gain >= RISING_GAIN})
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
        names = ", ".join(f"results/{registry.behaviour_name(t)}" for t in stale)
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
    name = registry.behaviour_name(task)
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
