"""Staleness: whether a stored result still answers the experiment, or is computed again.

`layerstate run` skips every result it already stored, but only if that result was
computed from the experiment's present runs and parameters. Each result it stores records
what it came from in its ``pipeline_request`` attribute (:func:`result_request`): the
analysis parameters, and each run's config hash and creation time (a run trained again is a
different run). :func:`stored_answers` compares that record with the request of today's
experiment; a grid given more seeds, a run trained again or changed analysis settings make
the stored result out of date, said in one line, and the caller computes it again (a result
is derived data, recomputable from the store).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

#: The attribute in which `layerstate run` records what a result was computed from.
REQUEST_ATTR = "pipeline_request"

Say = Callable[[str], None]


def result_request(store, runs: Sequence[str], params: dict) -> dict:
    """What a pipeline result is computed from: its parameters and each run's identity (its
    config hash and when it was created, so a run trained again is a different run), as
    plain JSON (the form it takes in the stored attributes)."""
    ident = {}
    for r in runs:
        a = store.run_attrs(r)
        ident[r] = {"config_hash": a.get("config_hash"), "created": a.get("created")}
    return json.loads(json.dumps({"runs": ident, "params": params}))


def stored_answers(store, name: str, request: dict, say: Say, then: str = "computing it again") -> bool:
    """Whether the stored result ``name`` was computed from ``request`` (then it is reused).

    A result stored from other runs (an experiment given more seeds, a run trained again) or
    with other parameters is stale: this says why in one line and returns False, and the
    caller computes it again (``then`` says how)."""
    if name not in store.results():
        return False
    stored = store.result_attrs(name).get(REQUEST_ATTR)
    why = staleness(stored, request)
    if why is None:
        say(f"{name}: already stored")
        return True
    say(f"{name}: the stored result is out of date ({why}); {then}")
    return False


def staleness(stored: dict | None, request: dict) -> str | None:
    """Why a result stored with the request ``stored`` does not answer ``request`` (one
    clause per difference: runs missing, runs dropped, runs trained again, parameters), or
    None when it does."""
    if not isinstance(stored, dict):
        return "it has no record of the runs and parameters it came from"
    old, new = stored.get("runs", {}), request["runs"]
    parts = []
    added, dropped = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    again = sorted(r for r in set(new) & set(old) if old[r] != new[r])
    for what, ids in (("it lacks {n} of the experiment's runs", added),
                      ("it covers {n} {runs} the experiment no longer has", dropped),
                      ("{n} {runs} trained again since it was computed", again)):
        if ids:
            shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
            runs = "run" if len(ids) == 1 else "runs"
            parts.append(what.format(n=len(ids), runs=runs) + f": {shown}")
    changed = sorted(k for k in set(stored.get("params", {})) | set(request["params"])
                     if stored.get("params", {}).get(k) != request["params"].get(k))
    if changed:
        parts.append("its parameters differ: " + ", ".join(
            f"{k} {stored.get('params', {}).get(k)!r} -> {request['params'].get(k)!r}"
            for k in changed))
    return "; ".join(parts) if parts else None


def added_runs(stored: dict | None, request: dict) -> list[str]:
    """The runs ``request`` adds to a stored result that otherwise answers it (the same
    parameters, each of its runs unchanged and still asked for); [] when it does not."""
    if not isinstance(stored, dict):
        return []
    old, new = stored.get("runs", {}), request["runs"]
    if stored.get("params", {}) != request["params"] or any(r not in new or new[r] != old[r] for r in old):
        return []
    return sorted(set(new) - set(old))
