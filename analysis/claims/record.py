"""What a stored verdict was decided on, recorded with it, and whether the store still holds it.

A claims table (``results/claims``) or a design's stages (``results/sequential``) is stored with
a **decision record** (the attribute :data:`DECISION_RECORD`, plain JSON): for each stored
result the decision read, the digest of its data and the runs it held; the claims decided
together (the family) and their level. Anything that shows a stored verdict (the report,
``combine``) first asks :func:`record_problem`: a result read then that has since been computed
again (other runs, other settings) or forgotten makes the verdicts out of date, said in words,
and they are not shown as verdicts. The runs trained since in the claims' cells are the other
half of the check (:func:`analysis.claims.stored.stale_table`).

An older table without a record is taken as it is (nothing to compare)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from store import Store
from store.contents.results import DIGEST_ATTR, describe_settings

#: The attribute of a stored claims or sequential table that holds its decision record.
DECISION_RECORD = "decision_record"


def decision_record(store: Store, read: Iterable[str], *, family: Sequence[str], alpha: float,
                    correction: str) -> dict:
    """The record of a decision that read the stored results ``read`` (names) of ``store``:
    per result its data's digest, when it was made and the number of runs it holds; the claim
    ids decided together (``family``) and their level (``alpha``, ``correction``)."""
    results: dict[str, dict] = {}
    stored = set(store.results())
    for name in read:
        if name not in stored:
            continue  # looked for and not there: the decision did without it
        attrs = store.result_attrs(name)
        runs = store.result_runs(name)
        results[name] = {"digest": str(attrs.get(DIGEST_ATTR, "")), "created": str(attrs.get("created", "")),
                         "runs": -1 if runs is None else len(runs)}
    return {"results": results, "family": list(family), "alpha": float(alpha), "correction": str(correction)}


def record_problem(store: Store, attrs: dict) -> str | None:
    """Why a stored table whose attributes are ``attrs`` was decided on results the store no
    longer holds, in words (each result that changed named, with what it is now); None when
    every result it read is as it was, or it has no record."""
    record = attrs.get(DECISION_RECORD)
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
        return None
    stored = set(store.results())
    changed: list[str] = []
    for name, then in sorted(record["results"].items()):
        if name not in stored:
            changed.append(f"{name}, which they read, is no longer stored")
            continue
        now = store.result_attrs(name)
        same = (then.get("digest") == now.get(DIGEST_ATTR) if then.get("digest") and now.get(DIGEST_ATTR)
                else then.get("created") == str(now.get("created", "")))
        if not same:
            runs = store.result_runs(name)
            held = ("" if runs is None or len(runs) == then.get("runs")
                    else f"; it holds {len(runs)} runs, they read {then.get('runs')}")
            changed.append(f"{name} was computed again after they were decided ({describe_settings(now)}{held})")
    return "; ".join(changed) or None
