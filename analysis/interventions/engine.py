"""The engine every intervention analysis runs on: a plan, delayed cells, one Dataset.

An analysis (ablation, patching, interchange) is a *builder* and a *per-cell function*:

1. the builder checks its arguments and opens a :class:`InterventionPlan` (:func:`open_plan`): the runs,
   their stored groups opened once (lazily via xarray, no dask), the layers intervened at, the
   stored sequences evaluated and the grid's own axes (``length``, ``setting``, ``position``,
   ``site``);
2. it lists :class:`DelayedCell`\\ s: a delayed call of its per-cell function on the run's model
   (:meth:`InterventionPlan.model`, rebuilt once per run from stored weights; a
   :class:`~analysis.interventions._common.PortableModel`, so it can move between workers)
   and stored states, and the grid coordinates its outputs go to;
3. :func:`assemble` turns the cells into a dask-backed ``xarray.Dataset``: one task gathers
   every cell's outputs into NaN-padded arrays (one per :class:`Var`), each variable a piece
   of it;
4. :func:`run_and_store` computes it with :func:`analysis.compute.compute` (the one compute
   policy of `analysis`) and writes it under ``results/<analysis>/<name>``.

How the pieces fit the rest of the project: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.array as dsa
import numpy as np
import xarray as xr

from analysis.compute import compute
from analysis.interventions._common import (
    check_lengths,
    layer_list,
    open_group,
    portable_model,
    site_description,
    target_of,
)
from capture.device import CPU, Device
from capture.rebuild import check_weights
from store import MissingError, Store


# ----------------------------------------------------------------------------- the plan
@dataclass
class InterventionPlan:
    """Everything an intervention analysis knows before computing.

    Attributes
    ----------
    store : Store
    runs : list of str
    groups : dict
        ``(run, kind, length) -> Dataset``: each stored group used, opened once.
    run_layers : dict
        run -> the layers intervened at (all stored for that run).
    layers : list of str
        Every run's layers in first-seen order: the grid's ``layer`` axis.
    arch, target, n_features : dict
        Per run: architecture, trained-on label, hidden width.
    sequences : dict
        ``(run, length) -> ndarray``: the stored sequences evaluated there, in order; the grid's
        ``sequence`` axis is as long as the longest of them (NaN-padded).
    axes : dict
        The analysis' own grid dims and their coordinates, e.g. ``{"length": [40, 120],
        "setting": ["probe", "pca:1"]}``.
    fit_length : int, optional
    fit_sequences : dict
        run -> the stored sequences (at ``fit_length``) that fit erasers (ablation only).
    """

    store: Store
    runs: list[str]
    groups: dict[tuple[str, str, int], xr.Dataset]
    run_layers: dict[str, list[str]]
    layers: list[str]
    arch: dict[str, str]
    target: dict[str, str]
    n_features: dict[str, int]
    sequences: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    axes: dict[str, list] = field(default_factory=dict)
    fit_length: int | None = None
    fit_sequences: dict[str, np.ndarray] = field(default_factory=dict)
    #: where the runs' models are rebuilt (resolved once by the builder,
    #: :func:`capture.device.as_device`); the stored states are read on the host and each
    #: cell's tensors follow its model
    device: Device = CPU
    _models: dict[str, Any] = field(default_factory=dict, repr=False)

    def group(self, run_id: str, length: int, kind: str = "len") -> xr.Dataset:
        """A stored group of the plan (opened by :func:`open_plan`)."""
        return self.groups[run_id, kind, length]

    def model(self, run_id: str) -> Any:
        """The run's trained model as one delayed task, shared by every cell of the run: a
        `PortableModel` (its ``module`` is the `SequenceModel`), which dask.distributed can
        move between workers."""
        if run_id not in self._models:
            self._models[run_id] = dask.delayed(portable_model, pure=False)(self.store, run_id, self.device)
        return self._models[run_id]

    @property
    def n_sequences(self) -> int:
        """Length of the grid's ``sequence`` axis."""
        return max(len(v) for v in self.sequences.values())

    def site_names(self, where: str) -> list[list[str]]:
        """``site_description`` per (run, layer) for an intervention at ``where``."""
        return [[site_description(self.arch[r], y, where) for y in self.layers] for r in self.runs]


def select_runs(store: Store, runs: Sequence[str] | None, verb: str) -> list[str]:
    """The runs to intervene on (default every run), each with trained weights."""
    runs = list(store.run_ids() if runs is None else runs)
    if not runs:
        raise MissingError(
            f"no runs to {verb} in {store.location}; train some with `layerstate train`"
        )
    for rid in runs:
        check_weights(store, rid)
    return runs


def open_plan(
    store: Store,
    runs: list[str],
    groups: Sequence[tuple[str, int]],
    layers: Sequence[str] | None,
    *,
    layers_at: tuple[str, int],
) -> InterventionPlan:
    """Check and open the stored groups of every run; layers are checked against one of them.

    Parameters
    ----------
    store : Store
    runs : list of str
        From :func:`select_runs`.
    groups : list of (kind, length)
        The groups every run needs, e.g. ``[("len", 40), ("len", 120)]`` or ``[("cfclean", 40),
        ("cfcorrupt", 40)]``.
    layers : list of str, optional
        Requested layers (default every stored layer).
    layers_at : (kind, length)
        The group whose ``layer`` coordinate, attributes and width describe the run.
    """
    kinds: dict[str, list[int]] = {}
    for kind, length in groups:
        kinds.setdefault(kind, []).append(int(length))
    plan = InterventionPlan(store, runs, {}, {}, [], {}, {}, {})
    for rid in runs:
        for kind, lengths in kinds.items():
            check_lengths(store, rid, sorted(set(lengths)), kind)
            for L in lengths:
                plan.groups[rid, kind, L] = open_group(store, rid, L, kind)
        ds = plan.group(rid, layers_at[1], layers_at[0])
        plan.run_layers[rid] = layer_list(ds, layers)
        plan.arch[rid] = str(ds.attrs["run"].get("arch", ""))
        plan.target[rid] = target_of(ds)
        plan.n_features[rid] = int(ds.sizes["feature"])
        plan.layers += [y for y in plan.run_layers[rid] if y not in plan.layers]
    return plan


# ----------------------------------------------------------------------------- cells -> Dataset
@dataclass(frozen=True)
class Var:
    """One output variable of the grid: its dims, dtype and the fill where no cell wrote."""

    dims: tuple[str, ...]
    dtype: Any = float
    fill: Any = np.nan


@dataclass(frozen=True)
class DelayedCell:
    """One delayed computation and where its outputs go.

    ``value`` (a dask ``Delayed`` or a plain value) computes to one output per entry of
    ``names`` (a tuple when there are several); ``None`` drops that output. Each output fills
    its variable at the coordinates ``at`` (a leading subset of the variable's dims, e.g.
    ``{"run": "r0", "layer": "L1"}``) from the start of each remaining dim, so shorter outputs
    (runs with fewer sequences) leave the fill behind them.
    """

    at: dict[str, Any]
    names: tuple[str | None, ...]
    value: Any


def _scatter(specs: dict, places: list, values: list) -> dict[str, np.ndarray]:
    """The gather task: every cell's outputs written into fresh, filled arrays."""
    out = {name: np.full(shape, fill, dtype=dtype) for name, (shape, dtype, fill) in specs.items()}
    for where, value in zip(places, values, strict=True):
        parts = value if len(where) > 1 else (value,)
        for target, part in zip(where, parts, strict=True):
            if target is None:
                continue
            name, index = target
            part = np.asarray(part)
            out[name][index + tuple(slice(0, s) for s in part.shape)] = part
    return out


def _place(cell: DelayedCell, name: str, var: Var, position: dict[str, dict]) -> tuple:
    dims = [d for d in var.dims if d in cell.at]
    if dims != list(var.dims[: len(dims)]):
        raise ValueError(f"cell at {cell.at} must name leading dims of {name} {var.dims}")
    return name, tuple(position[d][cell.at[d]] for d in dims)


def assemble(
    plan: InterventionPlan,
    variables: dict[str, Var],
    cells: Sequence[DelayedCell],
    *,
    data: dict[str, Any] | None = None,
    coords: dict[str, Any] | None = None,
    attrs: dict[str, Any] | None = None,
) -> xr.Dataset:
    """The lazy Dataset of a grid of delayed cells.

    Parameters
    ----------
    plan : InterventionPlan
        Its runs, layers, sequences and axes are the grid's coordinates (with ``arch (run)``).
    variables : dict of str to Var
        What the cells fill, in Dataset order.
    cells : list of DelayedCell
    data : dict, optional
        Variables known without computing (``(dims, values)``), added after ``variables``.
    coords, attrs : dict, optional
        Further coordinates and attributes (``device``, where the models ran, is one).

    Returns
    -------
    xarray.Dataset
        Every variable of ``variables`` a dask array computed by one shared gather task.
    """
    grid: dict[str, list] = {
        "run": list(plan.runs),
        **plan.axes,
        "layer": list(plan.layers),
        "sequence": list(range(plan.n_sequences)),
    }
    position = {d: {v: i for i, v in enumerate(values)} for d, values in grid.items()}
    shapes = {n: tuple(len(grid[d]) for d in v.dims) for n, v in variables.items()}
    places = [
        tuple(None if n is None else _place(c, n, variables[n], position) for n in c.names)
        for c in cells
    ]
    specs = {n: (shapes[n], v.dtype, v.fill) for n, v in variables.items()}
    gathered = dask.delayed(_scatter, pure=False)(specs, places, [c.value for c in cells])
    arrays: dict[str, Any] = {
        n: (v.dims, dsa.from_delayed(gathered[n], shape=shapes[n], dtype=v.dtype))
        for n, v in variables.items()
    }
    arrays.update(data or {})
    grid_coords: dict[str, Any] = {
        "run": grid["run"],
        **plan.axes,
        "layer": grid["layer"],
        "sequence": np.arange(plan.n_sequences),
        "arch": ("run", [plan.arch[r] for r in plan.runs]),
    }
    return xr.Dataset(arrays, coords={**grid_coords, **(coords or {})},
                      attrs={"device": plan.device.name, **(attrs or {})})


# ----------------------------------------------------------------------------- computing
def run_and_store(
    store: Store,
    result: str,
    lazy: xr.Dataset,
    *,
    scheduler: Any = None,
    num_workers: int | None = None,
    finish: Callable[[xr.Dataset], xr.Dataset] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Compute a built analysis, optionally ``finish`` it, and store it as ``results/<result>``.

    ``scheduler`` and ``num_workers`` are those of :func:`analysis.compute.compute`;
    ``attrs`` are added to the stored result's attributes (`layerstate run` records there
    what the result was computed from).
    """
    (done,) = compute([lazy], scheduler, num_workers)
    if finish is not None:
        done = finish(done)
    done.attrs.update(attrs or {})
    store.write_result(result, done)
    return done
