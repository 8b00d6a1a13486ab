"""Removing what a store holds: a result, a run's captured lengths, or a whole run.

A store only ever grows by itself: a capture never replaces a complete length group (a
different ``dtype`` or sequence count is refused), training never replaces a trained run. To
capture again with other settings, or to train a run again with another budget, the old
groups are removed first, on purpose, with these functions (``layerstate forget``).

Each removal deletes one subtree of the hierarchy and then consolidates, so the snapshot and
the metadata digests (docs/store-format.md, S32-S35) describe the store without it. Run-level
removals hold the run's writer lease, so a capture or training writing that run at the same
time is refused rather than raced. A removal that is interrupted leaves a partly deleted
subtree, which ``layerstate validate`` reports; running the same removal again finishes it.
Results that were computed from a removed run stay, and ``layerstate run`` computes them
again (their record names the runs they came from).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from zarr.core.sync import sync

from .. import schema
from ..errors import MissingError
from ..io.lengths import lengths as _lengths

#: ``st`` below is a :class:`store.Store` opened for writing; typed ``Any`` because ``core``
#: imports this module (the store's modules never import each other both ways).
Store = Any

#: The kinds of length group a run may hold (activations, counterfactual twins).
KINDS = schema.GROUP_KINDS


def _delete(st: Store, prefix: str) -> None:
    sync(st.root.store.delete_dir(prefix))


def forget_result(st: Store, name: str) -> None:
    """Remove ``results/<name>``; MissingError naming the stored results if there is none."""
    st._writable()
    if name not in st.results():
        raise MissingError(
            f"no result {name!r} in {st.location}; stored results: {', '.join(st.results()) or '(none)'}"
        )
    _delete(st, f"{schema.RESULTS}/{name}")
    st.consolidate()


def captured_groups(st: Store, run_id: str, lengths: Iterable[int] | None = None) -> list[str]:
    """Names of the run's length groups (every kind) at ``lengths`` (default: all)."""
    run = st.run_group(run_id)
    wanted = None if lengths is None else {int(n) for n in lengths}
    return [schema.length_group(n, kind) for kind in KINDS for n in _lengths(run, kind)
            if wanted is None or n in wanted]


def forget_captures(st: Store, run_id: str, lengths: Iterable[int] | None = None) -> list[str]:
    """Remove the run's captured length groups (activations and counterfactual twins) at
    ``lengths`` (default: every length); its record and weights stay. Returns the group
    names removed; MissingError if the run holds none of those lengths."""
    st._writable()
    lengths = None if lengths is None else [int(n) for n in lengths]
    names = captured_groups(st, run_id, lengths)
    if not names:
        have = sorted({n for kind in KINDS for n in _lengths(st.run_group(run_id), kind)})
        where = "" if lengths is None else f" at length(s) {', '.join(map(str, lengths))}"
        raise MissingError(
            f"run {run_id!r} has no captures{where}; "
            f"its captured lengths: {', '.join(map(str, have)) or '(none)'}"
        )
    with st.lock(run_id):
        for name in names:
            _delete(st, f"{schema.RUNS}/{run_id}/{name}")
    st.consolidate()
    return names


def forget_run(st: Store, run_id: str) -> None:
    """Remove a run: its record, weights and captures."""
    st._writable()
    st.run_group(run_id)  # MissingError naming the runs there
    with st.lock(run_id):
        _delete(st, f"{schema.RUNS}/{run_id}")
    st.consolidate()


def forget_plan(st: Store, results: Sequence[str] = (), runs: Sequence[str] = (), *, captures: bool = False,
                lengths: Iterable[int] | None = None) -> list[tuple[str, Callable[[], object]]]:
    """What ``layerstate forget`` removes, in order, each as (what, the removal): the
    ``results``, then per run of ``runs`` its captures (``captures``; ``lengths`` only) or the
    whole run. ``st`` needs ``results``, ``run_ids`` and the ``forget_*`` methods (a
    :class:`store.Store`, or the results store beside a read-only one). Nothing is removed here.

    Raises
    ------
    MissingError
        A result or run that is not there (named, with what is), or runs that hold no captures
        at ``lengths``.
    """
    held = st.results()
    missing = [r for r in results if r not in held]
    if missing:
        raise MissingError(f"no result {missing[0]!r} in {st.location}; stored results: {', '.join(held) or '(none)'}")
    unknown = [r for r in runs if r not in st.run_ids()]
    if unknown:
        raise MissingError(f"no run {unknown[0]!r} in {st.location}; see `layerstate inspect`")
    plan: list[tuple[str, Callable[[], object]]] = [
        (f"result {r}", functools.partial(st.forget_result, r)) for r in results]
    for rid in runs:
        if captures:
            groups = captured_groups(st, rid, lengths)
            if groups:
                plan.append((f"{rid}: {', '.join(groups)}", functools.partial(st.forget_captures, rid, lengths)))
        else:
            plan.append((f"run {rid} (record, weights, captures)", functools.partial(st.forget_run, rid)))
    if runs and captures and len(plan) == len(results):
        raise MissingError(f"the selected runs hold no captures at length(s) {list(lengths or [])}; nothing to remove")
    return plan
