"""Every analysis layerstate knows: the name its results are stored under, what it needs and
how a claim reads it.

A result is stored as ``results/<analysis>/<name>`` (``probes/dyck``, ``ablation/parity``); the
store checks only the form of such a name (:func:`store.schema.result_name`), so which
analyses exist is said here, once. The built-in analyses are listed below; another is added
by one module that calls :func:`register_analysis` with how to compute it
(docs/guide/extending.md): ``layerstate run`` then schedules it per task when the
experiment's ``[analysis] extra`` names it or a claim reads one of its metrics, and claims read
its per-seed values like any metric's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The built-in analyses, by the name of their results.
PROBES = "probes"
ABLATION = "ablation"
PATCHING = "patching"
INTERCHANGE = "interchange"
#: The model's own readout accuracy, one result per task: ``behaviour/<task>``.
BEHAVIOUR = "behaviour"
#: Online codelengths of a label (MDL probes), named like probe results: ``mdl/<task>``.
MDL = "mdl"
#: How alike the seeds' probe directions are per layer: ``stability/<probe result's name>``.
STABILITY = "stability"
#: In a probe result's name, between the task and a target other than the task's own:
#: ``probes/dyck`` (the target Dyck runs were trained on), ``probes/dyck.depth``.
TARGET_SEP = "."

#: ``(store, task, runs, params) -> Dataset``: an added analysis of one task's runs, with its
#: parameters (a dict of its ``params`` model's fields); stored by the caller.
Compute = Callable[[Any, str, Sequence[str], Mapping[str, Any]], Any]
#: ``result -> lines``: what ``layerstate show`` prints of one stored result.
Summary = Callable[[Any], Iterable[str]]
#: ``(result, claim)`` -> per-run values of a metric: an added analysis's stored result (a
#: Dataset holding some of the claim's runs) read into a DataArray along ``run`` (and ``layer``
#: for a layered metric; ``length``, where it has one, is selected at the claim's length).
SeedValues = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Metric:
    """A per-seed number claims read from an analysis's results (``metric = "<name>"``)."""

    name: str
    analysis: str
    #: The range it can take (an interval end the seeds cannot bound is the range's end).
    range: tuple[float, float] | None = None
    #: For an added analysis: its result read into per-run values (the built-ins' readers live
    #: in :mod:`analysis.claims.metrics`).
    values: SeedValues | None = None
    #: Read at one layer (a claim names ``layer = ...``).
    layered: bool = False


@dataclass(frozen=True)
class Analysis:
    """One analysis: its results' name and what computing it needs."""

    name: str
    what: str
    #: Rebuilds the models (runs on ``--device``); untrained baselines are left out.
    models: bool = False
    #: For an added analysis: how to compute it, and the model of its parameters (the
    #: experiment's ``[analysis.<name>]`` table, recorded with the result).
    compute: Compute | None = None
    params: Any = None
    metrics: tuple[Metric, ...] = field(default=())
    #: For an added analysis: its own summary of a stored result; without one, ``layerstate
    #: show`` and the report give every per-run number as a seed-level interval per cell
    #: (:func:`analysis.intervals.per_run_intervals`). The built-ins' are in
    #: :mod:`layerstate.present.analyses`.
    summary: Summary | None = None


_ANALYSES: dict[str, Analysis] = {}


def register_analysis(entry: Analysis) -> Analysis:
    """Add ``entry``; a name already taken by another analysis, or a metric another analysis
    gives, is refused (one line naming it)."""
    known = _ANALYSES.get(entry.name)
    if known is not None and known != entry:
        raise ValueError(f"analysis {entry.name!r} is already registered; choose another name")
    taken = {m.name: a.name for a in _ANALYSES.values() if a.name != entry.name for m in a.metrics}
    for m in entry.metrics:
        if m.name in taken or m.name == "accuracy":
            raise ValueError(f"metric {m.name!r} is already given by analysis {taken.get(m.name, BEHAVIOUR)!r}; "
                             "choose another name")
        if m.analysis != entry.name:
            raise ValueError(f"metric {m.name!r} names analysis {m.analysis!r}, not {entry.name!r}")
    _ANALYSES[entry.name] = entry
    return entry


def analyses() -> tuple[Analysis, ...]:
    """Every registered analysis, built-ins first."""
    return tuple(_ANALYSES.values())


def analysis(name: str) -> Analysis | None:
    """The analysis ``name`` (None where none is registered)."""
    return _ANALYSES.get(name)


def metrics() -> dict[str, Metric]:
    """Every metric claims can read from results, by name."""
    return {m.name: m for a in _ANALYSES.values() for m in a.metrics}


def added() -> tuple[Analysis, ...]:
    """The analyses registered from outside (those with a ``compute``)."""
    return tuple(a for a in _ANALYSES.values() if a.compute is not None)


def probe_name(task: str, target: str | None = None, trained: str | None = None) -> str:
    """The default name of a probe result of one task's runs: ``probes/<task>`` when it probes
    the target the runs were trained on (``target`` None or equal to ``trained``), else
    ``probes/<task>.<target>``, so the name says what it holds."""
    if target is None or target == trained:
        return f"{PROBES}/{task}"
    return f"{PROBES}/{task}{TARGET_SEP}{target}"


def behaviour_name(task: str) -> str:
    """The name of the behaviour result of one task's runs: ``behaviour/<task>``."""
    return f"{BEHAVIOUR}/{task}"


def parse_behaviour_name(full: str) -> str | None:
    """``"behaviour/parity"`` -> ``"parity"``; not a behaviour result -> ``None``."""
    kind, sep, name = full.partition("/")
    return name if sep and kind == BEHAVIOUR and name else None


for _entry in (
    Analysis(BEHAVIOUR, "the models' own readout accuracy per length"),
    Analysis(PROBES, "linear probes per layer (and position), with a control task",
             metrics=(Metric("probe_accuracy", PROBES, (0.0, 1.0), layered=True),)),
    Analysis(MDL, "online codelengths of a label per layer (MDL probes)",
             metrics=(Metric("mdl_compression", MDL, layered=True),)),
    Analysis(STABILITY, "how alike the seeds' probe subspaces are per layer",
             metrics=(Metric("probe_stability", STABILITY, (0.0, 1.0), layered=True),)),
    Analysis(ABLATION, "directions and subspaces projected out per layer, the layers above re-run",
             models=True, metrics=(Metric("ablation_drop", ABLATION, (-1.0, 1.0), layered=True),
                                   Metric("refit_accuracy", ABLATION, layered=True))),
    Analysis(PATCHING, "activation patching on counterfactual twins", models=True,
             metrics=(Metric("patch_recovery", PATCHING, layered=True),)),
    Analysis(INTERCHANGE, "interchange interventions at named sites", models=True,
             metrics=(Metric("restoration", INTERCHANGE),)),
):
    register_analysis(_entry)
