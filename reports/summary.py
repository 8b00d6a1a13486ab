"""Section 1, the findings: claims' verdicts, the paper comparison, behaviour and probe profiles.

Built last, from the other sections: it takes the behaviour table and the probe-profile grid
out of their sections (each is shown once, here, and its section points to it) and condenses
the claims table to verdict, estimate, interval and the verdict's reason. How intervals are
shown is said here once (:data:`reports.intervals.RULES_NOTE`).
"""

from __future__ import annotations

import pandas as pd

from reports import references
from reports.claims import CLAIM_ANCHOR, claim_texts, reason_texts
from reports.intervals import MIN_SEEDS, RULES_NOTE
from reports.model import COMMANDS, Figure, Section, Table, find_table, take_figure, take_table
from reports.snapshot import Snapshot

TITLE = "Summary"
INTRO = (
    "The findings first: each declared claim's verdict with its estimate, 95% interval and reason, published "
    "values beside ours where the experiment declares them, how accurate each model is, and where "
    "in the network each task's state becomes linearly readable. The sections after this one give "
    "the tests, the evidence and the interventions; the appendix says what was run and where."
)


def summary(snap: Snapshot, built: dict[str, Section], experiment: dict | None = None) -> Section:
    """The summary section; moves the behaviour table and probe grid out of ``built``.

    Parts, in order: the claims (verdict, estimate, interval, reason), published values beside ours
    (when the experiment declares ``[[reference]]`` tables), the behaviour table and the
    probe-profile grid.
    """
    sec = Section("summary", TITLE, intro=INTRO, notes_last=True)
    seeds = _seed_counts(snap)
    if seeds:
        lo, hi = min(seeds), max(seeds)
        sec.notes.append(f"Seeds per model (task x architecture x variant): {lo}" + (f" to {hi}" if hi > lo else "")
                         + "." + (f" With fewer than {MIN_SEEDS} seeds no interval across seeds is shown: "
                                  "train more seeds (the experiment's grid.seeds) for intervals."
                                  if lo < MIN_SEEDS else ""))
    sec.notes.append(RULES_NOTE)

    claims_sec = built.get("claims")
    claims_table = find_table(claims_sec, "claims")
    part = Section("summary-claims", "Claims")
    if claims_table is not None:
        part.tables.append(_claims_table(claims_table.data))
    elif claims_sec is not None and claims_sec.error:
        part.error = f"the claims section failed: {claims_sec.error}"
    else:
        part.missing = "No evaluated claims in this store (declare [[claims]] in the experiment)."
        part.command = COMMANDS["stats"]
    sec.parts.append(part)

    refs = references.declared(experiment)
    if refs:
        behaviour_t = find_table(built.get("behaviour"), "behaviour_accuracy")
        probe_t = find_table(built.get("probes"), "probe_profiles")
        frame = references.comparison(
            refs,
            claims=None if claims_table is None else claims_table.data,
            behaviour=None if behaviour_t is None else behaviour_t.data,
            probes=None if probe_t is None else probe_t.data,
        )
        part = Section("summary-references", "Published values beside ours")
        part.tables.append(Table(
            "paper_comparison", "Values a paper reported (the experiment's [[reference]] tables) beside ours: "
            "our estimate with its 95% interval, in the paper's unit, and whether the paper's value lies "
            "inside our interval.", frame, references.display(frame)))
        sec.parts.append(part)

    sec.parts.append(_moved_part(
        built.get("behaviour"), Section("summary-behaviour", "Behaviour"), "behaviour_accuracy",
        "The table of accuracies per length is in the Summary (section 1).", "behaviour",
        "No behaviour table."))
    sec.parts.append(_moved_part(
        built.get("probes"), Section("summary-probes", "Probe profiles"), "probe_profiles",
        "The probe-profile grid (tasks x architectures) is in the Summary (section 1).",
        "probe-profile", "No probe-profile grid.", figure=True))
    return sec


def _moved_part(source: Section | None, part: Section, name: str, note: str, section: str,
                missing: str, *, figure: bool = False) -> Section:
    """``part`` of the Summary holding the table (``figure``: the figure) ``name``, moved out of
    the section ``source``, which then says so in ``note``; else why it is not there."""
    if source is not None:
        moved: Table | Figure | None = take_figure(source, name) if figure else take_table(source, name)
        if isinstance(moved, Table):
            part.tables.append(moved)
        elif moved is not None:
            part.figures.append(moved)
        if moved is not None:
            source.notes.insert(0, note)
            return part
        if source.error:
            part.error = f"the {section} section failed: {source.error}"
            return part
    part.missing = source.missing if source is not None and source.missing else missing
    part.command = source.command if source is not None else None
    return part


def _claims_table(frame: pd.DataFrame) -> Table:
    """Compact: each claim's verdict, estimate [interval] and the reason for its verdict (the
    tests, power, cross-check and variance components are in the claims section)."""
    shown = pd.DataFrame({
        "claim": frame["claim"],
        "statement": frame["statement"],
        "verdict": frame["verdict"],
        "estimate [95% CI]": claim_texts(frame),
        "reason": reason_texts(frame),
    })
    data = frame[[c for c in ("claim", "statement", "kind", "verdict", "outcome", "reason", "estimate", "lower",
                              "upper", "interval_note", "seed_a", "seed_b", "n_seeds", "p_adjusted") if c in frame]]
    return Table("summary_claims", "Claims: verdict, estimate with 95% interval, and why (tests, power, the "
                 "cross-check and variance components in section 2).", data, shown, anchor=CLAIM_ANCHOR)


def _seed_counts(snap: Snapshot) -> list[int]:
    """Number of runs (seeds) per task x architecture x variant among the runs with data."""
    counts: dict[tuple, int] = {}
    for rid in snap.runs:
        if not snap.complete.get(rid):
            continue
        a = snap.store.run_attrs(rid)
        key = (a.get("task"), a.get("arch"), a.get("variant"))
        counts[key] = counts.get(key, 0) + 1
    return list(counts.values())
