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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from capture.device import Device, as_device
from capture.rebuild import rebuild_model
from capture.tasks import TaskBatch, get_task
from capture.train import (
    STREAM_CAPTURE,
    STREAM_CF,
    check_trained_with,
    rng_for,
    split_config,
)
from store import MissingError, RunConflictError, Store, config_hash, run_identity
from store.contents.runs import same_run
from store.errors import InvalidArgumentError, InvalidArrayError
from store.io.layout import float_dtypes

#: On an accelerator, one forward covers this many sequences (whole store blocks): a block
#: alone leaves a GPU mostly idle between the host's copies and writes.
FORWARD_SEQUENCES = 512
#: ... and holds at most this many bytes of float32 hidden states on the device.
FORWARD_BYTES = 2 << 30


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
def _forward(model, batch: TaskBatch, sites: Sequence[str], batch_size: int):
    """Logits, hidden (sequence, position, layer, feature) and site arrays, as numpy (the
    forwards run where the model is)."""
    device = Device.of(model).torch_device
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


def blocks_per_forward(device: Device | str, block_size: int, sequence_bytes: int) -> int:
    """Store blocks per forward: one on the CPU (the forward costs what it costs per
    sequence, and a block's batch keeps the stored bytes what they always were); on an
    accelerator as many as make :data:`FORWARD_SEQUENCES`, within :data:`FORWARD_BYTES`
    of float32 hidden states (``sequence_bytes`` per sequence)."""
    if as_device(device).on_host:
        return 1
    by_count = max(1, FORWARD_SEQUENCES // max(block_size, 1))
    by_bytes = max(1, FORWARD_BYTES // max(block_size * sequence_bytes, 1))
    return min(by_count, by_bytes)


@dataclass
class _Staged:
    """One forward's outputs on their way to the host: the blocks it covers (``blocks``,
    each ``(block, start, stop)`` relative to the group), the task batches, the host arrays
    (sequence first) and the event that says the copies are done (None: already done)."""

    blocks: list[tuple[int, int, int]]
    batches: list[TaskBatch]
    arrays: dict[str, np.ndarray]
    event: Any = None
    todo: set[int] = field(default_factory=set)


class _DeviceForward:
    """Forward passes on an accelerator, their outputs cast to the stored dtypes on the
    device and copied to the host without blocking.

    The host buffers are pinned on CUDA (a copy from pinned memory is a DMA that needs no
    staging copy and can run while the next forward computes); two sets alternate, so the
    chunk threads read one forward's values while the next forward's copies land in the
    other. A set is reused only after every block written from it was handed to the writer,
    whose float chunks have then been encoded (``write_block`` returns after their checks).
    """

    def __init__(self, model, sites: Sequence[str], dtypes: dict[str, str],
                 batch_size: int | None) -> None:
        where = Device.of(model)
        self.model, self.device, self.sites = model, where.torch_device, list(sites)
        self.dtypes = {k: getattr(torch, v) for k, v in dtypes.items()}
        self.batch_size = batch_size
        self.pin = where.pinned
        self._sets: list[dict[str, torch.Tensor]] = [{}, {}]
        self._turn = 0

    def _buffer(self, var: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        bufs = self._sets[self._turn]
        buf = bufs.get(var)
        if buf is None or buf.shape[0] < shape[0] or tuple(buf.shape[1:]) != shape[1:] or buf.dtype != dtype:
            buf = bufs[var] = torch.empty(shape, dtype=dtype, pin_memory=self.pin)
        return buf[: shape[0]]

    @torch.no_grad()
    def launch(self, tokens: np.ndarray) -> tuple[dict[str, np.ndarray], Any]:
        """Start the forward of ``tokens`` (sequence, position); the host arrays it fills and
        an event to wait on before reading them."""
        n = tokens.shape[0]
        tok = torch.as_tensor(tokens, device=self.device)
        step = self.batch_size or n
        out: dict[str, torch.Tensor] = {}

        def put(var: str, lo: int, value: torch.Tensor) -> None:
            dtype = self.dtypes.get(var, value.dtype)
            if var not in out:
                out[var] = self._buffer(var, (n, *value.shape[1:]), dtype)
            out[var][lo : lo + value.shape[0]].copy_(value.to(dtype), non_blocking=self.pin)

        for lo in range(0, n, step):
            lg, hd = self.model.forward_with_hidden(tok[lo : lo + step])
            put("logits", lo, lg)
            put("hidden", lo, hd)
            if self.sites:
                _, found = self.model.forward_with_sites(tok[lo : lo + step], self.sites)
                for s in self.sites:
                    put(site_var(s), lo, found[s])
        event = None
        if self.pin:
            event = torch.cuda.Event()
            event.record()
        self._turn = 1 - self._turn
        return {k: v.numpy() for k, v in out.items()}, event


def _site_shapes(model, sites: Sequence[str], length: int) -> dict[str, tuple]:
    if not sites:
        return {}
    tok = torch.zeros((1, length), dtype=torch.long, device=Device.of(model).torch_device)
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
    device: Device | str = "cpu",
    model: torch.nn.Module | None = None,
    progress: Callable[[int], None] | None = None,
    blocks_per_pass: int | None = None,
) -> CaptureResult:
    """Capture one run at one length into ``runs/<run>/len_<L>`` (resumable).

    ``model``: the run's model, which runs where it is; without one, the model is rebuilt
    from the store on ``device``. On the CPU each store block is one forward (``batch_size``
    sequences at a time), its float32 outputs cast to ``dtype`` by the store's chunk threads.
    On any other device (``cuda[:N]``), or when ``blocks_per_pass`` is given, a forward covers
    ``blocks_per_pass`` consecutive blocks (default :func:`blocks_per_forward`), its outputs
    are cast on the device and copied to pinned host memory without blocking, and the chunk
    threads store one forward's blocks while the device computes the next. The blocks of a forward are fixed by their index, so a
    resumed capture runs the same batches (finished blocks of a partly done pass are
    computed again, not written).
    """
    model = model if model is not None else rebuild_model(store, run_id, device)
    where = Device.of(model)
    check_length(model, run_id, length)
    a = store.run_attrs(run_id)
    task = split_config(task_of(store, run_id), "eval")
    # nn.Module.__getattr__ is typed Tensor | Module; match_sites is a SequenceModel method.
    sites = model.match_sites(list(sites)) if sites else []  # type: ignore[operator]  # globs -> names
    shapes = _site_shapes(model, sites, length)
    extra = {v: (("position", f"{v}_feature"), (length, *shp[-1:]), dtype) for v, shp in shapes.items()}
    with store.length_writer(
        run_id, length, n_sequences=n_sequences, layers=model.layer_names,
        n_features=model.hidden_size, labels=list(task.label_names), n_classes=a["n_classes"],
        target=task.target, dtype=dtype, extra=extra or None, block_size=block_size,
        attrs={"sites": list(sites), "split": "eval", "stream": "capture"},
        # a device's forwards outrun one block's fsyncs: keep one more block in flight
        in_flight=0 if where.on_host else 1,
    ) as w, full_float32(where):
        todo = w.missing_blocks()
        if todo:
            note_device(w.group, where)

        def generate(b: int) -> TaskBatch:
            start, stop = w.block_range(b)
            return task.generate(rng_for(a["seed"], STREAM_CAPTURE, length, b), stop - start, length)

        def write(b: int, batch: TaskBatch, logits, hidden, site_arrays) -> None:
            w.write_block(b, hidden=hidden, tokens=batch.tokens, labels=batch.labels,
                          mask=batch.mask, logits=logits, extra=site_arrays or None)
            if progress:
                progress(batch.n)

        if where.on_host and blocks_per_pass is None:
            for b in todo:
                batch = generate(b)
                write(b, batch, *_forward(model, batch, sites, batch_size or batch.n))
        else:
            per_seq = length * len(w.spec["layers"]) * int(w.spec["n_features"]) * 4
            k = blocks_per_pass or blocks_per_forward(where, w.block_size, per_seq)
            fwd = _DeviceForward(model, sites, float_dtypes(w.spec), batch_size)

            def store_pass(staged: _Staged) -> None:
                if staged.event is not None:
                    staged.event.synchronize()
                for (b, lo, hi), batch in zip(staged.blocks, staged.batches, strict=True):
                    if b not in staged.todo:
                        continue
                    cut = {k: v[lo:hi] for k, v in staged.arrays.items()}
                    sites_cut = {k: v for k, v in cut.items() if k.startswith("site_")}
                    try:
                        write(b, batch, cut["logits"], cut["hidden"], sites_cut)
                    except InvalidArrayError:
                        # cast on the device: the float32 values say whether they overflowed
                        # the stored dtype or were NaN/Inf already (the error says which)
                        write(b, batch, *_forward(model, batch, sites, batch.n))

            pending: _Staged | None = None
            missing = set(todo)
            for first in sorted({b // k * k for b in todo}):
                blocks, batches, lo = [], [], 0
                for b in range(first, min(first + k, w.n_blocks)):
                    batch = generate(b)
                    blocks.append((b, lo, lo + batch.n))
                    batches.append(batch)
                    lo += batch.n
                arrays, event = fwd.launch(np.concatenate([bt.tokens for bt in batches]))
                staged = _Staged(blocks, batches, arrays, event, missing & {b for b, _, _ in blocks})
                if pending is not None:
                    store_pass(pending)  # while the device computes ``staged``
                pending = staged
            if pending is not None:
                store_pass(pending)
        return CaptureResult(run_id, length, "len", len(todo), w.n_blocks)


@contextmanager
def full_float32(device: Device | str) -> Iterator[None]:
    """No TF32 on CUDA while capturing: cuDNN's convolutions (and matmuls, where enabled)
    would otherwise round float32 inputs to 10 bits of mantissa, about float16's precision,
    and the stored states would no longer equal the CPU's within float16 rounding. The
    process-wide flags are restored afterwards."""
    if as_device(device).type != "cuda":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def note_device(group, device: Device) -> None:
    """Record in a group's attributes the devices its blocks were computed on (a resumed
    capture may have run on another), by :attr:`Device.name`."""
    seen = list(group.attrs.get("devices", []))
    if device.name not in seen:
        group.attrs["devices"] = [*seen, device.name]


def capture_counterfactuals(
    store: Store,
    run_id: str,
    length: int,
    *,
    n_pairs: int,
    dtype: str = "float32",
    device: Device | str = "cpu",
    model: torch.nn.Module | None = None,
) -> CaptureResult:
    """Capture clean/corrupted twins into ``cfclean_<L>`` and ``cfcorrupt_<L>`` (resumable).

    ``model``, ``device``: as in :func:`capture_length` (a given model runs where it is).

    Patching needs both runs' hidden states at every layer; the positions that were edited
    (``pos_corrupt``), where the label changes (``pos_label``) and the task's named sites
    (``pos_<name>``) are stored per sequence in both groups. float32 by default: patching
    differences can be small.
    """
    model = model if model is not None else rebuild_model(store, run_id, device)
    where = Device.of(model)
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
         store.length_writer(run_id, length, kind="cfcorrupt", attrs={"twin": "cfclean"}, **common) as wx, \
         full_float32(where):
        todo = sorted(set(wc.missing_blocks()) | set(wx.missing_blocks()))
        if todo:
            note_device(wc.group, where)
            note_device(wx.group, where)
        for b in todo:
            start, stop = wc.block_range(b)
            pair = task.counterfactual(rng_for(a["seed"], STREAM_CF, length, b), stop - start, length)
            pos = {"pos_corrupt": pair.corrupt_position, "pos_label": pair.label_position,
                   **{f"pos_{k}": v for k, v in pair.sites.items()}}
            for w, batch in ((wc, pair.clean), (wx, pair.corrupted)):
                logits, hidden, _ = _forward(model, batch, (), stop - start)
                w.write_block(b, hidden=hidden, tokens=batch.tokens, labels=batch.labels,
                              mask=batch.mask, logits=logits, extra=pos)
        return CaptureResult(run_id, length, "cf", len(todo), wc.n_blocks)


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


def captures_of(spec) -> list[tuple[str, int]]:
    """Every (kind, length) one run (a :class:`capture.experiment.RunSpec`) is captured at,
    in order: its lengths (``"len"``), then, when the experiment asks for pairs, its
    counterfactual lengths (``"cf"``). The units of an experiment's capture
    (``layerstate.work``), each done by :func:`capture_unit`."""
    cap = spec.exp.capture
    return [("len", L) for L in cap.lengths] + (
        [("cf", L) for L in cap.counterfactual_lengths] if cap.counterfactual_pairs else [])


def capture_unit(
    store: Store,
    spec,
    kind: str,
    length: int,
    *,
    device: Device | str = "cpu",
    models: dict | None = None,
    progress_factory: Callable[[str, int], Callable[[int], None]] | None = None,
) -> CaptureResult:
    """One (run, kind, length) of an experiment with its ``[capture]`` settings (resumable):
    refuses a run not trained from this experiment (:func:`check_capturable`), rebuilds the
    model from its stored weights, then :func:`capture_length` (``kind="len"``) or
    :func:`capture_counterfactuals` (``"cf"``). ``models``: a dict shared by the calls of
    one process keeps the last run's model, so a run's lengths rebuild it once. ``device``:
    where the model is rebuilt (a :class:`~capture.device.Device`, or its name, checked
    first); the captures run where the model is."""
    cap, rid = spec.exp.capture, spec.run_id
    where = as_device(device)
    check_capturable(store, spec)
    t0 = time.perf_counter()
    model = (models or {}).get(rid)
    if model is None:
        model = rebuild_model(store, rid, where)
        if models is not None:
            models.clear()  # one model held at a time
            models[rid] = model
    if kind == "cf":
        res = capture_counterfactuals(store, rid, length, n_pairs=cap.counterfactual_pairs, model=model)
    else:
        prog = progress_factory(f"{rid} L={length}", cap.n_sequences) if progress_factory else None
        res = capture_length(store, rid, length, n_sequences=cap.n_sequences, dtype=cap.dtype,
                             sites=cap.sites, batch_size=cap.batch_size, model=model,
                             progress=prog)
    if res.blocks_written:
        record_capture_seconds(store, rid, f"{kind}_{length}", time.perf_counter() - t0)
    return res


#: Run attributes of the time its captures took: seconds per capture (``"len_40"``,
#: ``"cf_40"``, …) and their sum. Not part of the run's identity (``store.run_identity``).
CAPTURE_SECONDS_BY, CAPTURE_SECONDS = "capture_seconds_by", "capture_seconds"


def record_capture_seconds(store: Store, run_id: str, key: str, seconds: float) -> None:
    """Record that capture ``key`` of a run took ``seconds`` (wall seconds): its part of
    ``capture_seconds_by``, replacing the part of an earlier capture of the same key, and
    ``capture_seconds``, the sum of the parts (what ``layerstate plan`` adds to a run's
    training time). :func:`capture_unit` records a capture that wrote blocks (a resumed one:
    the time of the blocks it wrote), not one found complete. A run's captures run one after
    another under its writer's lease, so reading and rewriting the map is safe on a cluster
    worker too (through the store handle the capture writes with)."""
    parts = store.run_attrs(run_id).get(CAPTURE_SECONDS_BY) or {}
    parts = {str(k): float(v) for k, v in dict(parts).items()}
    parts[key] = float(seconds)
    store.update_run_attrs(run_id, **{CAPTURE_SECONDS_BY: parts, CAPTURE_SECONDS: float(sum(parts.values()))})
