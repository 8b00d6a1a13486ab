"""Capture: run each trained model over fresh evaluation sequences and store every layer.

For each run and length, the model is rebuilt from its stored weights and run block by
block; each block's sequences come from a Generator seeded by (seed, length, block), so a
capture killed at any point and started again redoes only unfinished blocks and produces a
bit-identical store. Memory is bounded by one block whatever the number of sequences.

Groups written per run (see docs/store-format.md): ``len_<L>`` with ``hidden (sequence, position,
layer, feature)``, ``tokens``, every label, ``mask``, ``logits`` and, when asked, extra
sites (``site_<name>``); for patching, ``cfclean_<L>`` and ``cfcorrupt_<L>`` hold clean and
minimally corrupted twins of the same sequences, with ``pos_corrupt``, ``pos_label`` and
the task's named positions (``pos_key``, ``pos_query``, …) per sequence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from capture.tasks import TaskBatch, get_task
from capture.train import (
    STREAM_CAPTURE,
    STREAM_CF,
    check_trained_with,
    rebuild_model,
    rng_for,
    split_config,
)
from store import MissingError, RunConflictError, Store
from store.errors import InvalidArgumentError


@dataclass
class CaptureResult:
    run_id: str
    length: int
    kind: str
    blocks_written: int
    blocks_total: int


def site_var(site: str) -> str:
    """Store variable name of an extra site: ``L1.cell`` -> ``site_L1_cell``."""
    return "site_" + re.sub(r"[^A-Za-z0-9]+", "_", site).strip("_")


def task_of(store: Store, run_id: str):
    a = store.run_attrs(run_id)
    return get_task(a["task"], **a.get("task_config", {}))


def check_length(model: torch.nn.Module, run_id: str, length: int) -> None:
    """Refuse lengths beyond a model's position limit (learned or rotary tables)."""
    limit = getattr(model, "max_length", None)
    if limit is not None and length > limit:
        raise InvalidArgumentError(
            f"run {run_id!r} takes at most {limit} positions (its position-embedding limit); "
            f"drop length {length} or train with a larger max_position_embeddings"
        )


@torch.no_grad()
def _forward(model, batch: TaskBatch, sites: Sequence[str], device: str, batch_size: int):
    """Logits, hidden (sequence, position, layer, feature) and site arrays, as numpy."""
    logits: list[np.ndarray] = []
    hidden: list[np.ndarray] = []
    extra: dict[str, list[np.ndarray]] = {s: [] for s in sites}
    for lo in range(0, batch.n, batch_size):
        tok = torch.as_tensor(batch.tokens[lo : lo + batch_size], device=device)
        lg, hd = model.forward_with_hidden(tok)
        logits.append(lg.float().cpu().numpy())
        hidden.append(hd.float().cpu().numpy())
        if sites:
            _, found = model.forward_with_sites(tok, list(sites))
            for s in sites:
                extra[s].append(found[s].float().cpu().numpy())
    cat = np.concatenate
    return cat(logits), cat(hidden), {site_var(s): cat(v) for s, v in extra.items()}


def _site_shapes(model, sites: Sequence[str], length: int, device: str) -> dict[str, tuple]:
    if not sites:
        return {}
    tok = torch.zeros((1, length), dtype=torch.long, device=device)
    with torch.no_grad():
        _, found = model.forward_with_sites(tok, list(sites))
    missing = [s for s in sites if s not in found]
    if missing:
        raise InvalidArgumentError(
            f"sites {missing} are not exact site names of this model; valid: {', '.join(model.sites())}"
        )
    return {site_var(s): found[s].shape[2:] for s in sites}


def capture_length(
    store: Store,
    run_id: str,
    length: int,
    *,
    n_sequences: int,
    dtype: str = "float16",
    sites: Sequence[str] = (),
    batch_size: int | None = None,
    block_size: int | None = None,
    device: str = "cpu",
    model: torch.nn.Module | None = None,
    progress: Callable[[int], None] | None = None,
) -> CaptureResult:
    """Capture one run at one length into ``runs/<run>/len_<L>`` (resumable)."""
    model = model if model is not None else rebuild_model(store, run_id, device)
    check_length(model, run_id, length)
    a = store.run_attrs(run_id)
    task = split_config(task_of(store, run_id), "eval")
    # nn.Module.__getattr__ is typed Tensor | Module; match_sites is a SequenceModel method.
    sites = model.match_sites(list(sites)) if sites else []  # type: ignore[operator]  # globs -> names
    shapes = _site_shapes(model, sites, length, device)
    extra = {v: (("position", f"{v}_feature"), (length, *shp[-1:]), dtype) for v, shp in shapes.items()}
    with store.length_writer(
        run_id, length, n_sequences=n_sequences, layers=model.layer_names,
        n_features=model.hidden_size, labels=list(task.label_names), n_classes=a["n_classes"],
        target=task.target, dtype=dtype, extra=extra or None, block_size=block_size,
        attrs={"sites": list(sites), "split": "eval", "stream": "capture"},
    ) as w:
        todo = w.missing_blocks()
        for b in todo:
            start, stop = w.block_range(b)
            batch = task.generate(rng_for(a["seed"], STREAM_CAPTURE, length, b), stop - start, length)
            logits, hidden, site_arrays = _forward(model, batch, sites, device, batch_size or (stop - start))
            w.write_block(b, hidden=hidden, tokens=batch.tokens, labels=batch.labels,
                          mask=batch.mask, logits=logits, extra=site_arrays or None)
            if progress:
                progress(stop - start)
        return CaptureResult(run_id, length, "len", len(todo), w.n_blocks)


def capture_counterfactuals(
    store: Store,
    run_id: str,
    length: int,
    *,
    n_pairs: int,
    dtype: str = "float32",
    device: str = "cpu",
    model: torch.nn.Module | None = None,
) -> CaptureResult:
    """Capture clean/corrupted twins into ``cfclean_<L>`` and ``cfcorrupt_<L>`` (resumable).

    Patching needs both runs' hidden states at every layer; the positions that were edited
    (``pos_corrupt``), where the label changes (``pos_label``) and the task's named sites
    (``pos_<name>``) are stored per sequence in both groups. float32 by default: patching
    differences can be small.
    """
    model = model if model is not None else rebuild_model(store, run_id, device)
    check_length(model, run_id, length)
    a = store.run_attrs(run_id)
    task = split_config(task_of(store, run_id), "eval")
    probe = task.counterfactual(rng_for(a["seed"], STREAM_CF, length, 10**6), 2, length)
    pos_names = ["corrupt", "label", *sorted(probe.sites)]
    extra = {f"pos_{p}": ((), (), "int64") for p in pos_names}
    common = dict(
        n_sequences=n_pairs, layers=model.layer_names, n_features=model.hidden_size,
        labels=list(task.label_names), n_classes=a["n_classes"], target=task.target,
        dtype=dtype, extra=extra,
    )
    with store.length_writer(run_id, length, kind="cfclean", attrs={"twin": "cfcorrupt"}, **common) as wc, \
         store.length_writer(run_id, length, kind="cfcorrupt", attrs={"twin": "cfclean"}, **common) as wx:
        todo = sorted(set(wc.missing_blocks()) | set(wx.missing_blocks()))
        for b in todo:
            start, stop = wc.block_range(b)
            pair = task.counterfactual(rng_for(a["seed"], STREAM_CF, length, b), stop - start, length)
            pos = {"pos_corrupt": pair.corrupt_position, "pos_label": pair.label_position,
                   **{f"pos_{k}": v for k, v in pair.sites.items()}}
            for w, batch in ((wc, pair.clean), (wx, pair.corrupted)):
                logits, hidden, _ = _forward(model, batch, (), device, stop - start)
                w.write_block(b, hidden=hidden, tokens=batch.tokens, labels=batch.labels,
                              mask=batch.mask, logits=logits, extra=pos)
        return CaptureResult(run_id, length, "cf", len(todo), wc.n_blocks)


def capture_experiment(
    store: Store,
    exp,
    *,
    device: str = "cpu",
    progress_factory: Callable[[str, int], Callable[[int], None]] | None = None,
) -> list[CaptureResult]:
    """Capture every run of an experiment at every configured length (one consolidation)."""
    with store.deferred_consolidation():
        return _capture_all(store, exp, device, progress_factory)


def check_capturable(store: Store, spec) -> None:
    """Refuse to capture a run of ``spec`` (a :class:`capture.experiment.RunSpec`) that was
    never trained in ``store``, or was trained from other settings than the experiment's now.

    Raises
    ------
    MissingError
        No trained weights for the run.
    ValueError, RunConflictError
        The run's identity or its ``[train]`` config differ from the experiment's.
    """
    from store import config_hash, run_identity
    from store.runs import same_run

    rid = spec.run_id
    if rid not in store.run_ids() or not store.has_weights(rid):
        raise MissingError(
            f"run {rid!r} was never trained in {store.location}; run `layerstate train` first"
        )
    attrs = store.run_attrs(rid)
    stored = attrs["config_hash"]
    identity = run_identity(
        spec.task, spec.arch, spec.variant, spec.seed,
        spec.model_config().model_dump(), spec.task_config().model_dump(),
    )
    expected = config_hash(identity)
    if not same_run(attrs, identity):
        raise RunConflictError(
            f"the experiment no longer matches run {rid!r} in the store (config hash {stored} "
            f"stored, {expected} now); capture into a new store or restore the experiment file"
        )
    check_trained_with(store, rid, spec.train)


def _capture_all(store: Store, exp, device: str, progress_factory) -> list[CaptureResult]:
    cap = exp.capture
    out = []
    for spec in exp.runs():
        rid = spec.run_id
        check_capturable(store, spec)
        model = rebuild_model(store, rid, device)
        for L in cap.lengths:
            prog = progress_factory(f"{rid} L={L}", cap.n_sequences) if progress_factory else None
            out.append(capture_length(
                store, rid, L, n_sequences=cap.n_sequences, dtype=cap.dtype, sites=cap.sites,
                batch_size=cap.batch_size, device=device, model=model, progress=prog,
            ))
        if cap.counterfactual_pairs:
            for L in cap.counterfactual_lengths:
                out.append(capture_counterfactuals(
                    store, rid, L, n_pairs=cap.counterfactual_pairs, device=device, model=model,
                ))
    return out
