"""MDL probes over a store: the online code (:mod:`analysis.probes.mdl`) of a label at every
selected (run, length, layer, position) -- or position pool -- as one dask graph, stored as
``results/mdl/<task>`` with seed-level intervals of the compression profile.

The cells are the accuracy probes' cells (:mod:`analysis.probes.sweep`: the same rows, read
from the store's chunks the same way, one layer and a block of positions per task); their
sequences are sent in one seeded random order per (run, length) (:func:`transmission_rank`),
and a cell's blocks are whole sequences, as the probes' folds are::

    from analysis.probes import mdl_probe
    ds = mdl_probe("acts.zarr", positions="last", save=True)
    ds.compression_profile.sel(length=40)        # uniform / online bits per run and layer
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dask
import numpy as np
import xarray as xr

from analysis import registry
from analysis.compute import compute
from analysis.intervals import CI_LEVEL, frame_cells, frame_variables, with_cells
from analysis.probes.intervals import seed_level
from analysis.probes.probing import task_attrs
from store import Store, open_analysis, schema
from store.errors import InvalidArgumentError

from . import plan as sweep_plan
from .mdl import ORDER_PURPOSE, PORTIONS, CodeInput, cell_codes, cell_ranks
from .sweep import Cell, cell_jobs, layer_index, layer_states, length_cells, rows_of

#: Single-thread CPU seconds per (row x feature x class x C value x labelling) of a coded cell:
#: 39.4 s for 200 cells of 2000 rows x 128 features x 6 classes x 5 C x 2 labellings
#: (``python -m bench.probes --mdl``). Decides where a sweep runs and what it announces.
MDL_S_PER_UNIT = 1.3e-8
#: Stored (and claimed) per-seed metrics of an MDL result and the variables they come from.
INTERVAL_METRICS = {"compression": "compression_profile", "control_compression": "control_compression_profile"}


@dataclass
class MDLJob:
    """The cells of one task: their rows' transmission ranks come with them."""

    cells: list[Cell]
    ranks: list[np.ndarray]
    n_classes: int
    C: float | tuple[float, ...]
    method: str


@dataclass
class MDLPlan:
    """A checked, built, not yet computed MDL sweep; :meth:`compute` returns the Dataset."""

    tasks: list
    runs: dict[str, sweep_plan.RunPlan]
    lengths: dict[str, list[int]]
    options: dict[str, Any]
    cells: int = 0
    cpu_s: float = 0.0
    positions: dict[tuple[str, int], list[int | None]] = field(default_factory=dict)

    def compute(self, scheduler: Any = None, num_workers: int | None = None) -> xr.Dataset:
        results = compute(self.tasks, scheduler, num_workers, cpu_s=self.cpu_s)
        return assemble(self, [o for part in results for o in part])


def transmission_rank(n: int, seed: int, run: str, length: int) -> np.ndarray:
    """Each sequence's place in the order the online code sends them (a seeded permutation,
    depending only on seed, run and length)."""
    order = sweep_plan.probe_rng(seed, run, length, ORDER_PURPOSE).permutation(n)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


def mdl_task(data: Any, job: MDLJob) -> list[dict]:
    """The online code of every cell of ``job`` on its data (a slab or gathered pieces)."""
    data = np.concatenate(data) if isinstance(data, list) else data
    inputs = [CodeInput(rows_of(data, c), c.y, c.control, r) for c, r in zip(job.cells, job.ranks, strict=True)]
    codes = cell_codes(inputs, job.n_classes, job.C, method=job.method)
    return [{"run": c.run, "length": c.length, "layer": c.layer, "position": c.position, "code": code}
            for c, code in zip(job.cells, codes, strict=True)]


def plan_mdl(
    store: Any,
    target: str | None = None,
    *,
    runs: Any = None,
    layers: Any = None,
    positions: Any = "last",
    lengths: Any = None,
    C: float | Sequence[float] | None = None,
    method: str = "exact",
    control: bool | str = "permute",
    seed: int = 0,
) -> MDLPlan:
    """Check an MDL sweep and build its graph, computing nothing (arguments: :func:`mdl_probe`)."""
    st = Store.open(store) if isinstance(store, str) else store
    if method not in ("exact", "reference"):
        raise InvalidArgumentError(f"an MDL probe's method must be 'exact' or 'reference', got {method!r}")
    mode, pos_list, control_kind = sweep_plan.check_options(positions, "exact", control, 2, C)
    grid = sweep_plan.check_C(C)
    run_ids = sweep_plan.select_runs(st, runs)
    target = sweep_plan.choose_target(st, run_ids, target)
    plans: dict[str, sweep_plan.RunPlan] = {}
    lens: dict[str, list[int]] = {}
    tasks: list = []
    n_cells = 0
    units = 0.0
    where: dict[tuple[str, int], list[int | None]] = {}
    for run in run_ids:
        lens[run] = sweep_plan.choose_lengths(st, run, lengths, None)[0]
        hidden = {L: st.open_length(run, L)["hidden"] for L in lens[run]}
        first = hidden[lens[run][0]]
        chosen = sweep_plan.choose_layers([str(v) for v in first["layer"].values], layers, run)
        classes, labels = sweep_plan.build_labels(st, run, lens[run], [], target, control_kind, 2, seed)
        rp = sweep_plan.RunPlan(run, classes, chosen, int(first.sizes["feature"]), labels)
        plans[run] = rp
        for L in lens[run]:
            lab = labels[L]
            cells = length_cells(lab, mode, pos_list, must_exist=mode == "list")
            where[run, L] = [c.position for c in cells]
            rank = transmission_rank(lab.y.shape[0], seed, run, L)
            rows_from = None
            if mode in ("last", "pooled"):
                var = st.open_length(run, L, lazy="xarray")["hidden"].variable
                name = f"hidden-rows-{dask.base.tokenize(str(st.location), run, L)}"
                rows_from = dask.delayed(var, name=name)
            for layer in chosen:
                arr = layer_states(hidden[L], layer)
                src = None if rows_from is None else (rows_from, layer_index(hidden[L], layer))
                for job_cells, data in cell_jobs(arr, [replace(c, layer=layer) for c in cells], src):
                    ranks = [cell_ranks(rank[c.seq]) for c in job_cells]
                    job = MDLJob(job_cells, ranks, classes.size, grid, method)
                    tasks.append(dask.delayed(mdl_task, pure=True)(data, job))
                n_cells += len(cells)
                units += sum(c.seq.size for c in cells) * rp.n_features * classes.size
    n_C = len(grid) if isinstance(grid, tuple) else 1
    cpu_s = units * n_C * (2 if control_kind else 1) * MDL_S_PER_UNIT
    options = {"target": target, "positions": mode, "position_list": pos_list, "C": grid, "method": method,
               "control": control_kind, "seed": int(seed)}
    return MDLPlan(tasks, plans, lens, options, n_cells, cpu_s, where)


def assemble(plan: MDLPlan, outs: list[dict]) -> xr.Dataset:
    """The result Dataset of a computed :class:`MDLPlan` (see :func:`mdl_probe`)."""
    runs = list(plan.runs)
    lengths = sorted({L for r in runs for L in plan.lengths[r]})
    layers = list(dict.fromkeys(lay for rp in plan.runs.values() for lay in rp.layers))
    by_position = plan.options["positions"] in ("all", "list")
    positions = sorted({int(p) for ps in plan.positions.values() for p in ps if p is not None}) if by_position else []
    nb = len(PORTIONS)
    shape = (len(runs), len(lengths), len(layers), *((len(positions),) if by_position else ()))
    has_control = plan.options["control"] is not None
    cl, un, ctl = (np.full(shape, np.nan) for _ in range(3))
    rows, seqs = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    conv = np.ones(shape, bool)
    bbits, bend, bC = np.full((*shape, nb), np.nan), np.full((*shape, nb), -1, np.int64), np.full((*shape, nb), np.nan)
    for o in outs:
        code = o["code"]
        at: tuple[int, ...] = (runs.index(o["run"]), lengths.index(o["length"]), layers.index(o["layer"]))
        if by_position:
            at += (positions.index(int(o["position"])),)
        cl[at], un[at], ctl[at] = code.codelength, code.uniform, code.control_codelength
        rows[at], seqs[at], conv[at] = code.n_rows, code.n_sequences, code.converged
        k = code.block_bits.size
        bbits[at][:k], bend[at][:k], bC[at][:k] = code.block_bits, code.block_end, code.block_C
    dims = ["run", "length", "layer", *(["position"] if by_position else [])]
    pos_axes = (3,) if by_position else ()
    with np.errstate(invalid="ignore", divide="ignore"):
        data: dict[str, Any] = {
            "codelength": (dims, cl, {"units": "bits", "what": "online codelength (Voita & Titov 2020)"}),
            "uniform_codelength": (dims, un, {"units": "bits", "what": "rows x log2(classes)"}),
            "compression": (dims, un / cl, {"what": "uniform_codelength / codelength"}),
            "n_rows": (dims, rows), "n_sequences": (dims, seqs), "converged": (dims, conv),
            "block_codelength": ([*dims, "block"], bbits, {"units": "bits", "what": "bits of each block; the "
                                                           "first sent with the uniform code"}),
            "block_end": ([*dims, "block"], bend, {"what": "sequences sent by the end of the block (-1: none)"}),
            "block_C": ([*dims, "block"], bC, {"what": "C the block was coded at (NaN: the uniform code)"}),
            "compression_profile": (dims[:3], np.nansum(un, axis=pos_axes) / np.nansum(cl, axis=pos_axes),
                                    {"what": "sum of uniform / sum of online codelengths over positions"}),
        }
        if has_control:
            data["control_codelength"] = (dims, ctl, {"units": "bits"})
            data["control_compression"] = (dims, un / ctl)
            data["control_compression_profile"] = (dims[:3], np.nansum(un, axis=pos_axes) / np.nansum(ctl, axis=pos_axes))
    coords: dict[str, Any] = {"run": runs, "length": lengths, "layer": layers, "block_portion": ("block", list(PORTIONS))}
    if by_position:
        coords["position"] = positions
    opt = plan.options
    C = opt["C"]
    attrs = {
        "target": opt["target"], "positions": opt["positions"], "method": opt["method"],
        "control": opt["control"] or "none", "seed": opt["seed"],
        "C": list(C) if isinstance(C, tuple) else float(C), "portions": list(PORTIONS),
        "coding": "online code: first block uniform, each later block by the probe trained on the blocks "
                  "before it, its probability mixed with the uniform code at weight K / (n_train + K); "
                  "with a C grid each block is coded at the C that coded the previous block best",
        "unit": "bits",
    }
    if opt["position_list"] is not None:
        attrs["position_list"] = list(opt["position_list"])
    return xr.Dataset(data, coords=coords, attrs=attrs)


def result_name(ds: xr.Dataset) -> str:
    """``mdl/<task>`` for the runs' trained target, ``mdl/<task>.<target>`` for another label,
    ``mdl/<target>`` when the runs are of several tasks (probe results' rule)."""
    task = ds.attrs.get("task")
    target = str(ds.attrs["target"])
    if not task:
        return schema.result_name(registry.MDL, target)
    own = target == ds.attrs.get("trained_target")
    return schema.result_name(registry.MDL, str(task) if own else f"{task}{registry.TARGET_SEP}{target}")


def add_mdl_intervals(ds: xr.Dataset, store: Any) -> xr.Dataset:
    """``ds`` with seed-level t intervals of its compression profiles over (cell, length, layer)
    (``compression_estimate/_lower/_upper/_n_seeds/_method``, and ``control_compression_*``):
    per (task, arch, variant) the runs' profiles are the seeds' values."""

    frames = {m: seed_level(ds[v], store) for m, v in INTERVAL_METRICS.items() if v in ds}
    cells = sorted(frame_cells(frames.values()))
    index = {c: i for i, c in enumerate(cells)}
    new = {}
    for metric, frame in frames.items():
        new.update(frame_variables(ds, metric, frame, index,
                                   {"what": f"{INTERVAL_METRICS[metric]} per seed; seed-level t over seeds"}))
    out = with_cells(ds.assign(new), cells)
    out.attrs.update(interval_metrics=list(frames), ci_level=CI_LEVEL)
    return out


def save_mdl(store: Any, ds: xr.Dataset, name: str | None = None) -> str:
    """Write an MDL Dataset with its intervals to ``results/<name>`` (default
    :func:`result_name`); returns the name."""
    name = name or result_name(ds)
    store.write_result(name, add_mdl_intervals(ds, store))
    return name


def mdl_probe(
    store: Any,
    target: str | None = None,
    *,
    scheduler: Any = None,
    save: bool = False,
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
    runs: Any = None,
    layers: Any = None,
    positions: Any = "last",
    lengths: Any = None,
    C: float | Sequence[float] | None = None,
    method: str = "exact",
    control: bool | str = "permute",
    seed: int = 0,
) -> xr.Dataset:
    """Online codelength (MDL probe, Voita & Titov 2020) of ``target`` at every selected
    (run, length, layer, position).

    Parameters
    ----------
    store : Store or str
        The activation store (a path is opened for analysis, writable when ``save``).
    target : str, optional
        The label to code; default the label the runs were trained on.
    runs, layers, positions, lengths, C, method, control, seed
        What :func:`plan_mdl` sweeps: ``runs``, ``layers``, ``lengths`` and ``seed`` as for
        :func:`analysis.probes.probe`; ``positions`` (``"last"`` by default, one cell per run,
        length and layer; ``"pooled"``, ``"all"`` or a list as for the probes); ``C`` (a
        number, or a grid: default :data:`~analysis.probes.cells.C_GRID`, each block at the C
        that coded the block before it best); ``method`` (``"exact"``, the batched solver, or
        ``"reference"``, scikit-learn one problem at a time); ``control`` (``"permute"``
        (default): the same code of each position's labels shuffled across sequences,
        ``"token"``, or ``"none"``).
    scheduler : see :func:`analysis.compute.compute`.
    save, name, attrs : as for :func:`analysis.probes.probe`; the default name is
        ``mdl/<task>`` (``mdl/<task>.<target>`` for another label).

    Returns
    -------
    xarray.Dataset
        ``codelength``, ``uniform_codelength`` (bits), ``compression`` (their ratio), with dims
        ``run, length, layer[, position]``; ``block_codelength``, ``block_end``, ``block_C``
        along ``block``; ``control_codelength``/``control_compression``; per run
        ``compression_profile`` (and ``control_compression_profile``) over ``run, length,
        layer``: summed uniform over summed online bits across positions. Saved, it also holds
        their seed-level intervals (:func:`add_mdl_intervals`).
    """

    if isinstance(store, str):
        store = open_analysis(store, write=save)
    plan = plan_mdl(store, target, runs=runs, layers=layers, positions=positions, lengths=lengths, C=C,
                    method=method, control=control, seed=seed)
    ds = plan.compute(scheduler)
    ds.attrs.update(task_attrs(store, list(ds.run.values)))
    ds.attrs.update(attrs or {})
    if save:
        save_mdl(store, ds, name)
    return ds
