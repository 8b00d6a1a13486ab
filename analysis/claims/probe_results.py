"""Which stored probe result a claim reads: every probe result of the store stacked along
``result`` (:func:`stack_probe_results`), and for a claim's tasks the one that holds its runs, the
one it names, or a refusal naming the candidates (:func:`probe_choice`, :func:`choose_probes`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from analysis import registry
from analysis.claims.spec import (
    AmbiguousResultError,
    Claim,
    ClaimError,
    StaleResultError,
)
from store import MissingError, Store, schema
from store.contents.results import describe_settings
from store.errors import did_you_mean
from store.inspect import seed_range


def claim_runs(store: Store, claim: Claim, kind: str = "len", task: str | None = None) -> list[str]:
    """The runs a claim's metric is computed from: the store's runs in the claim's cells
    (:meth:`Claim.selects`; of ``task`` only, if given) captured at its length (``kind``
    ``"cfclean"``: its counterfactual pairs, which patching reads)."""
    out = []
    for r in store.run_ids():
        attrs = store.run_attrs(r)
        if not claim.selects(attrs) or (task is not None and str(attrs.get("task")) != task):
            continue
        if claim.length is None or claim.length in store.lengths(r, kind):
            out.append(r)
    return out


def seeds_words(store: Store, runs: list[str]) -> str:
    """``runs`` as their cells and seeds: ``"dyck/gru seeds 3-4, dyck/lstm seed 3"``."""
    by: dict[str, list[int]] = {}
    for r in runs:
        a = store.run_attrs(r)
        variant = str(a.get("variant", "default"))
        cell = f"{a.get('task')}/{a.get('arch')}" + (f"/{variant}" if variant != "default" else "")
        by.setdefault(cell, []).append(int(a.get("seed", 0)))
    return ", ".join(f"{cell} {seed_range(sorted(seeds))}" for cell, seeds in sorted(by.items()))


def require_runs(store: Store, claim: Claim, name: str, held: set[str], fix: str, *, kind: str = "len",
                 task: str | None = None) -> None:
    """Refuse to decide ``claim`` on the stored result ``name`` when it lacks runs of the claim's
    cells that the store holds (:class:`StaleResultError`, naming them and ``fix``): a result
    computed before more seeds were trained would decide on fewer seeds than the store says."""
    missing = [r for r in claim_runs(store, claim, kind, task) if r not in held]
    if missing:
        raise StaleResultError(
            f"claim {claim.id!r} reads {name}, which lacks {len(missing)} run{'s' if len(missing) > 1 else ''} "
            f"the store holds in its cells ({seeds_words(store, missing)}): it was computed before they were "
            f"trained; {fix}")


def stack_probe_results(store: Store) -> xr.Dataset | None:
    """Every stored probe result's ``profile`` side by side along ``result`` (None if none),
    with ``held (result, run)`` (the result holds the run) and ``settings (result)`` (what it
    was made with, :func:`store.contents.results.describe_settings`): a claim chooses one of them
    (:func:`choose_probes`), never a mix."""
    names = [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == registry.PROBES]
    if not names:
        return None
    parts = []
    for n in names:
        ds = store.read_result(n)
        part = ds[["profile"]].assign(held=("run", np.ones(ds.sizes["run"], bool)))
        parts.append(part.expand_dims(result=[n]).assign_coords(
            settings=("result", [describe_settings(ds.attrs)])))
    out = xr.concat(parts, dim="result", join="outer", data_vars="all", coords="minimal", compat="override",
                    fill_value={"held": False})
    out["held"] = out["held"].fillna(False).astype(bool)
    return out


#: Said when a claim names a probe result the store does not hold.
ELSEWHERE = " (probes written with --results DIR are read only when this command is given the same --results DIR)"


def short_name(name: str) -> str:
    """``probes/dyck-2`` -> ``dyck-2``: how a claim's ``result`` names a stored result."""
    parsed = schema.parse_result_name(name)
    return parsed[1] if parsed else name


def result_choice(name: str) -> str:
    """``result = "dyck"`` or ``"probes/dyck"`` -> ``"probes/dyck"``."""
    return name if schema.parse_result_name(name) else f"{registry.PROBES}/{name}"


def probe_choice(store: Store, probes: xr.Dataset, claim: Claim, tasks: list[str]) -> dict[str, str]:
    """The name of the one probe result a claim reads for each of ``tasks``.

    ``result`` in the claim chooses by name (a table of task = name: for the tasks it names);
    without it the one stored result that holds every
    run of the claim's cells in the task (:func:`claim_runs`) is read. A result that lacks some
    of them was computed before they were trained and never decides (:class:`StaleResultError`
    when no result holds them all); several that hold them all: a :class:`ClaimError` lists them
    with what differs (settings, seeds).
    """
    names = [str(n) for n in probes.result.values]
    settings = dict(zip(names, map(str, probes.settings.values), strict=True))
    task_of = {str(r): str(store.run_attrs(str(r)).get("task")) for r in probes.run.values}
    out = {}
    for task in tasks:
        runs_of = [r for r in map(str, probes.run.values) if task_of[r] == task]
        held = {n: {r for r in runs_of if bool(probes.held.sel(result=n, run=r))} for n in names}
        holding = [n for n in names if held[n]]
        wanted = set(claim_runs(store, claim, task=task))
        complete = [n for n in holding if wanted <= held[n]]
        fix = (f"run `layerstate probe STORE --task {task}` (or `layerstate run` on the experiment) "
               "to probe every run")
        given = claim.result.get(task) if isinstance(claim.result, dict) else claim.result
        if given is not None:
            chosen = result_choice(given)
            if chosen not in names:
                raise ClaimError(f"claim {claim.id!r}: result = {given!r} is not a stored probe result; "
                                 f"stored: {', '.join(map(short_name, names))}"
                                 f"{ELSEWHERE}{did_you_mean(given, map(short_name, names))}")
            if chosen not in holding:
                raise ClaimError(f"claim {claim.id!r}: {chosen} holds no runs of task {task!r}; results that do: "
                                 f"{', '.join(holding) or 'none'}")
            if chosen not in complete:
                up = f"; {', '.join(complete)} hold{'s' if len(complete) == 1 else ''} them all" if complete else ""
                require_runs(store, claim, chosen, held[chosen], fix + up, task=task)
        elif len(complete) == 1:
            chosen = complete[0]
        elif not holding:
            raise MissingError(f"claim {claim.id!r}: no probe result holds runs of task {task!r}; run "
                               f"`layerstate probe STORE --task {task}`")
        elif not complete:
            chosen = max(holding, key=lambda n: len(held[n]))
            require_runs(store, claim, chosen, held[chosen], fix, task=task)
        else:
            listed = "; ".join(f"{n} ({settings[n]}; {seeds_words(store, sorted(held[n]))})" for n in complete)
            raise AmbiguousResultError(
                f"claim {claim.id!r}: {len(complete)} probe results hold every run of task {task!r}: {listed}; say "
                f"which with result = \"{short_name(complete[-1])}\" in the claim, or `--result "
                f"{task}={short_name(complete[-1])}` on the command line", task=task, count=len(complete), listed=listed,
                suggested=short_name(complete[-1]))
        out[task] = chosen
    return out


def choose_probes(store: Store, probes: xr.Dataset, claim: Claim, tasks: list[str]) -> xr.Dataset:
    """The one probe result a claim reads for each of ``tasks`` (:func:`probe_choice`),
    restricted to its runs (a Dataset of one result passes through)."""
    if "result" not in probes.dims:
        return probes
    task_of = {str(r): str(store.run_attrs(str(r)).get("task")) for r in probes.run.values}
    parts = []
    for task, chosen in probe_choice(store, probes, claim, tasks).items():
        runs_of = [r for r in map(str, probes.run.values) if task_of[r] == task]
        one = probes.sel(result=chosen, drop=True)
        keep = [r for r in runs_of if bool(one.held.sel(run=r))]
        parts.append(one.sel(run=keep).drop_vars(["held", "settings"], errors="ignore"))
    return (xr.concat(parts, dim="run", join="outer", data_vars="all", coords="minimal", compat="override")
            if len(parts) > 1 else parts[0])


# ---------------------------------------------------------------------- per-kind evaluation
