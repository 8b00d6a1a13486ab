"""Which probe result the claims read where a task has several (``--result`` on `layerstate
stats` and `layerstate plan`): a flag for the claims that name none, and one error for every
claim a task's choice affects.

A claim names its result with ``result = "dyck-2"``; without one it reads the one stored probe
result that holds every run it reads (:func:`analysis.claims.metrics.probe_choice`). Where
several do, ``--result dyck=dyck-2`` (or ``--result dyck-2``: every task that result holds)
chooses for all the claims of that task that name none; a claim that names one keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

import xarray as xr

from analysis import registry
from analysis.claims.probe_results import probe_choice, result_choice, short_name
from analysis.claims.spec import AmbiguousResultError, Claim, ClaimError
from store import schema
from store.errors import LayerstateError, did_you_mean


def with_results(store, claims: Sequence[Claim], given: Sequence[str]) -> list[Claim]:
    """``claims``, each probe-reading claim without its own ``result`` given the one ``given``
    names for its task (every task it reads, one result holding them all; a claim reading
    several tasks, a table of the tasks named, each task's name). ``given``: items
    ``TASK=NAME`` or ``NAME`` (for every task whose runs that result holds); NAME as a claim's
    ``result`` takes it (``dyck-2`` or ``probes/dyck-2``). A name that is not a stored probe
    result, a task it holds no runs of, or two results for one task: one line naming the fix."""
    if not given:
        return list(claims)
    names = [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == registry.PROBES]
    chosen: dict[str, str] = {}
    for item in given:
        task, _, name = item.rpartition("=")
        full = result_choice(name)
        if full not in names:
            raise ClaimError(f"--result {item}: no probe result {full}; stored: {', '.join(names) or 'none'}"
                             f"{did_you_mean(name, map(short_name, names))}")
        held = _tasks_of(store, store.read_result(full))
        if task and task not in held:
            raise ClaimError(f"--result {item}: {full} holds no runs of task {task!r} (it holds "
                             f"{', '.join(sorted(held)) or 'none'}); give --result TASK=NAME with one of them")
        for t in [task] if task else sorted(held):
            if chosen.get(t, full) != full:
                raise ClaimError(f"--result names two probe results for task {t!r} ({chosen[t]}, {full}); "
                                 "give one per task, as --result TASK=NAME")
            chosen[t] = full
    out = []
    for c in claims:
        mine = {t: chosen[t] for t in c.tasks() if t in chosen}
        if c.reads() == registry.PROBES and c.result is None and mine:
            if len(mine) == len(c.tasks()) and len(set(mine.values())) == 1:
                c = c.model_copy(update={"result": short_name(next(iter(mine.values())))})
            else:  # a claim reading several tasks: the choice for each task named, the others' own
                c = c.model_copy(update={"result": {t: short_name(n) for t, n in mine.items()}})
        out.append(c)
    return out


def check_choices(store, claims: Sequence[Claim], probes: xr.Dataset | None) -> None:
    """Raise one :class:`AmbiguousResultError` for the first task whose probe results leave
    claims undecided between them, naming every claim it affects and the flag that chooses for
    them all; nothing when every claim's result is clear (its other errors are its evaluation's
    to say)."""
    if probes is None or "result" not in probes.dims:
        return
    affected: dict[str, list[str]] = {}
    first: dict[str, AmbiguousResultError] = {}
    for c in claims:
        if c.reads() != registry.PROBES or isinstance(c.result, str):
            continue
        for task in c.tasks():
            if isinstance(c.result, dict) and task in c.result:
                continue
            try:
                probe_choice(store, probes, c, [task])
            except AmbiguousResultError as exc:
                affected.setdefault(exc.task, []).append(c.id)
                first.setdefault(exc.task, exc)
            except LayerstateError:
                continue  # any other fault of the claim: said, with its fix, when it is evaluated
    if not first:
        return
    task, found = next(iter(first.items()))
    ids = affected[task]
    raise AmbiguousResultError(
        f"{found.count} probe results hold every run of task {task!r} that {'claim' if len(ids) == 1 else 'claims'} "
        f"{', '.join(ids)} read{'s' if len(ids) == 1 else ''}: {found.listed}; say which with "
        f"result = \"{found.suggested}\" in each claim, or `--result {task}={found.suggested}` for them all",
        task=task, count=found.count, listed=found.listed, suggested=found.suggested)


def _tasks_of(store, ds: xr.Dataset) -> set[str]:
    runs = {str(r) for r in ds["run"].values} if "run" in ds.dims else set()
    return {str(store.run_attrs(r).get("task")) for r in runs & set(store.run_ids())}
