"""Checking a stability sweep and deciding each pair's inputs (:func:`plan_stability`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from analysis import registry
from analysis.intervals import factor_table
from analysis.probes import plan as sweep_plan
from analysis.probes.results import runs_by_task
from store import MissingError, Store, schema
from store.errors import InvalidArgumentError

from .compute import PairPlan, StabilityPlan, stored_tokens
from .maths import INPUTS, MAP_SEQUENCES, MIN_SHARED, SHUFFLES


def _cells(store: Any, runs: Sequence[str]) -> dict[tuple[str, str, str], list[str]]:
    table = factor_table(store, runs)
    out: dict[tuple[str, str, str], list[str]] = {}
    for run, row in table.sort_values("seed").iterrows():
        out.setdefault((str(row["task"]), str(row["arch"]), str(row["variant"])), []).append(str(run))
    return out


def _source(store: Any, a: str, b: str, L: int, inputs: str) -> tuple:
    """How runs ``a`` and ``b`` get states on the same sequences at length ``L`` (see
    :class:`PairPlan`), or a one-line error saying why they cannot and what to do."""
    ta, tb = stored_tokens(store, a, L), stored_tokens(store, b, L)
    index = {row.tobytes(): i for i, row in enumerate(tb)}
    ia = [i for i, row in enumerate(ta) if row.tobytes() in index]
    ib = [index[ta[i].tobytes()] for i in ia]
    if inputs != "rerun" and len(ia) >= MIN_SHARED:
        return ("shared", np.asarray(ia[:MAP_SEQUENCES]), np.asarray(ib[:MAP_SEQUENCES]))
    missing = [r for r in (a, b) if not store.has_weights(r)]
    share = f"runs {a} and {b} share {len(ia)} evaluation sequences at length {L}"
    if inputs == "shared":
        raise InvalidArgumentError(f"{share}, and a map needs {MIN_SHARED}; leave --inputs at auto (or rerun) to "
                                   "run each model on the other's sequences")
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        fix = ("leave --inputs at auto to use them" if len(ia) >= MIN_SHARED else
               "capture the seeds on the same sequences, or train them with `layerstate train`")
        raise InvalidArgumentError(f"{share} (a map needs {MIN_SHARED}) and {', '.join(missing)} {verb} no stored "
                                   f"weights to re-run on the other's sequences: {fix}")
    return ("rerun",)


def plan_stability(
    store: Any,
    result: str | None = None,
    *,
    runs: Any = None,
    layers: Any = None,
    lengths: Any = None,
    seed: int = 0,
    inputs: str = "auto",
    shuffles: int = SHUFFLES,
) -> StabilityPlan:
    """Check a stability sweep over the probe result ``result`` (default: the one probe result
    of the selected runs' task) and decide each pair's inputs, computing nothing (arguments:
    :func:`probe_stability`)."""
    st = Store.open(store) if isinstance(store, str) else store
    if inputs not in INPUTS:
        raise InvalidArgumentError(f"inputs must be one of {', '.join(INPUTS)}, got {inputs!r}")
    if int(shuffles) < 1:
        raise InvalidArgumentError(f"shuffles must be at least 1 (the shuffled-label null needs a permutation), "
                                   f"got {shuffles}")
    chosen = sweep_plan.select_runs(st, runs)
    if result is None:
        tasks = list(runs_by_task(st, chosen))
        if len(tasks) != 1:
            raise InvalidArgumentError(f"the runs are of {len(tasks)} tasks ({', '.join(tasks)}); name the "
                                       "probe result (e.g. probes/<task>) or select one task's runs")
        result = registry.probe_name(tasks[0])
    result = schema.result_name(registry.PROBES, result)
    if result not in st.results():
        have = [n for n in st.results() if n.startswith(f"{registry.PROBES}/")]
        raise MissingError(f"no probe result {result} in {st.location} (have: {', '.join(have) or 'none'}); "
                           f"run `layerstate probe STORE` first, or name one of those")
    ds = st.read_result(result)
    if "weights" not in ds:
        raise MissingError(f"{result} stores no probe weights; probe again with `layerstate probe STORE`")
    in_result = [str(r) for r in ds.run.values]
    runs_used = [r for r in chosen if r in in_result]
    fit_lengths = [int(v) for v in ds.fit_length.values]
    lens = fit_lengths if lengths is None else [int(v) for v in np.atleast_1d(lengths)]
    bad = [L for L in lens if L not in fit_lengths]
    if bad:
        raise InvalidArgumentError(f"{result} fitted no probes at length {bad[0]}; its fit lengths: "
                                   f"{', '.join(map(str, fit_lengths))}")
    all_layers = [str(v) for v in ds.layer.values]
    lays = all_layers if layers is None else [str(v) for v in ([layers] if isinstance(layers, str) else layers)]
    bad_l = [x for x in lays if x not in all_layers]
    if bad_l:
        raise InvalidArgumentError(f"{result} has no layer {bad_l[0]}; its layers: {', '.join(all_layers)}")
    pairs = []
    for cell, members in _cells(st, runs_used).items():
        for a, b in itertools.combinations(members, 2):
            pp = PairPlan(a, b, cell)
            for L in lens:
                pp.sources[L] = _source(st, a, b, L, inputs)
            pairs.append(pp)
    if not pairs:
        raise InvalidArgumentError(f"no (task, arch, variant) of {result} has two seeds among the selected runs: "
                                   "stability compares seeds; train and probe at least two")
    options = {"seed": int(seed), "inputs": inputs, "shuffles": int(shuffles)}
    return StabilityPlan(st, result, ds, pairs, lens, lays, options, str(ds.attrs["target"]))
