"""Whether the seeds a claim compares were measured on sequences of their own.

Every interval and test of a claim treats seeds as the replicates and a seed's sequences as
sampled within it (docs/science.md, "Statistics the papers did not do"): layerstate's capture
draws each seed's sequences from its own stream, so two seeds share none, while two models of
one seed (another architecture or variant) see the same ones and are compared paired by seed.
A store written by another tool may hold every seed measured on one fixed evaluation set. Then
the seeds share their sequences' sampling error, the spread between seeds leaves it out, and the
interval is one over seeds *on these sequences*, not over sequences too: a crossed seeds x
sequences design, which needs both resampled (Sellam et al.'s multi-bootstrap, or a two-way
cluster variance) and which layerstate does not model yet. :func:`crossed_caveat` finds that case
from the stored tokens and says so in the claim's reason; nothing is changed in its numbers.
"""

from __future__ import annotations

import hashlib
from functools import partial

import numpy as np

from analysis.claims.cells import cell_of
from analysis.claims.metrics import ClaimInputs
from analysis.claims.spec import Claim

#: How :func:`crossed_caveat`'s words begin (the last part of a reason that has them).
CROSSED = "; caveat: seeds of "


def crossed_said(reason: str) -> str:
    """The :func:`crossed_caveat` a claim's reason ends with, or ``""``: what a design's verdict,
    which rewrites the reason, carries over from the fixed look on the same seeds."""
    at = reason.find(CROSSED)
    return reason[at:] if at >= 0 and "captured on the same" in reason[at:] else ""


def _digest(tokens: np.ndarray) -> str:
    a = np.ascontiguousarray(tokens)
    return hashlib.sha256(repr((a.shape, a.dtype.str)).encode() + a.tobytes()).hexdigest()


def _tokens_digest(inputs: ClaimInputs, rid: str, length: int) -> tuple[str, int] | None:
    """The digest of a run's stored tokens at ``length`` and its number of sequences; None where
    it stores none."""
    try:
        tokens = np.asarray(inputs.store.open_length(rid, length)["tokens"].values)
    except KeyError:
        return None
    return _digest(tokens), int(tokens.shape[0])


def crossed_caveat(inputs: ClaimInputs, claim: Claim) -> str:
    """``""``, or the caveat (starting ``"; caveat: "``) for a claim some of whose cells hold two
    seeds captured on the same sequences at its length (their stored tokens equal)."""
    length = claim.length
    if length is None:
        return ""

    def find() -> str:
        store = inputs.store
        seen: dict[tuple[tuple[str, ...], str], set[int]] = {}
        n_seq: dict[tuple[str, ...], int] = {}
        for rid in store.run_ids():
            attrs = store.run_attrs(rid)
            if not claim.selects(attrs) or length not in store.lengths(rid):
                continue
            got = inputs.once(("tokens-digest", rid, length), partial(_tokens_digest, inputs, rid, length))
            if got is None:  # a store without tokens: nothing to compare
                continue
            cell = tuple(cell_of(attrs))
            seen.setdefault((cell, got[0]), set()).add(int(attrs.get("seed", -1)))
            n_seq[cell] = got[1]
        shared = sorted({cell for (cell, _), seeds in seen.items() if len(seeds) > 1})
        if not shared:
            return ""
        cells = ", ".join("/".join(c) for c in shared)
        return (f"{CROSSED}{cells} were captured on the same {n_seq[shared[0]]} sequences (one "
                "evaluation set): the interval and tests are over seeds on these sequences, not over "
                "sequences too (a crossed seeds x sequences design, not modelled here)")

    return inputs.once(("crossed", length, claim.id, tuple(claim.tasks())), find)
