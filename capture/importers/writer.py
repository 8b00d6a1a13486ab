"""The resumable, streaming write of an import into a store.

Writes go through :meth:`store.Store.length_writer` (``write_block``): a killed import
leaves finished blocks recorded, and running it again redoes only the rest. Blocks are
whole chunks along ``sequence`` (the block size is moved to a divisor of the number of
sequences when one is near the default, so no block is short), and a file source's next
block is read by a second thread while the current one is stored: the import holds about
three blocks of the source at a time, whatever its size. A file source's fingerprint
(sizes, headers, a sample of the bytes) is recorded with the group; resuming or redoing it
from another source is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from store import InvalidArrayError, MissingError, RunConflictError, Store
from store.schema import length_group
from store.zarrutil import TARGET_CHUNK_BYTES, to_numpy

from .checks import (
    Arrays,
    Batches,
    Labels,
    Ranged,
    activation_dims,
    check_labels,
    check_shapes,
    label_arrays,
)
from .labels import resolve
from .plans import ImportPlan, RunInfo, as_run, named_plan, site_var, with_logits


# ---------------------------------------------------------------------- the write
@dataclass
class ImportResult:
    """What an import wrote."""

    store: str
    run_id: str
    length: int
    n_sequences: int
    layers: list[str]
    sites: list[str]
    labels: list[str]
    blocks_written: int
    blocks_total: int
    source: str
    #: the label analyses decode by default, and whether the import was told it (else the first label)
    target: str | None = None
    target_given: bool = False
    #: the source array stored as ``logits`` and its width (classes), or None
    logits: str | None = None
    n_classes: int | None = None


def write(
    store: Store | str,
    run: RunInfo,
    source: Ranged | Batches,
    plan: ImportPlan,
    *,
    labels: Mapping[str, Any] | Labels | str | None = None,
    tokens: Any = None,
    mask: Any = None,
    dtype: str = "float16",
    block_size: int | None = None,
    fmt: str,
    progress: Callable[[int], None] | None = None,
    allow_nonfinite: bool = False,
    target: str | None = None,
) -> ImportResult:
    """Write ``source`` through ``plan`` into run ``run`` of ``store`` (created if missing).
    ``allow_nonfinite``: store NaN/Inf instead of refusing them (recorded with the group).
    ``target``: the label analyses decode by default (default: the first label)."""
    lab = (labels, tokens, mask)
    if isinstance(source, Batches):
        return _write_batches(store, run, source, plan, lab, dtype, block_size, fmt, progress,
                              allow_nonfinite=allow_nonfinite, target=target)
    n = check_shapes(source.shapes, plan, source.what)
    fingerprint = getattr(source, "fingerprint", None)
    direct = getattr(source, "read_into", None)
    singles = [src[0] for _lay, src in plan.layers if len(src) == 1]
    if direct is None or len(singles) != len(plan.layers) or len({source.dtype(n) for n in singles}) != 1:
        return _write(store, run, plan, lab, n, source.shapes, dtype, block_size, fmt, source.what,
                      lambda start, stop: source.read(plan.names(), start, stop), progress, ahead=True,
                      fingerprint=fingerprint, allow_nonfinite=allow_nonfinite, target=target)
    layers_dtype = source.dtype(singles[0])
    others = [k for k in plan.names() if k not in singles]

    def read(start: int, stop: int) -> Arrays:
        # each layer read from its file straight into the layer-major buffer of hidden
        m, (_n, L, width) = stop - start, activation_dims(source.shapes[singles[0]])
        buf = np.empty((len(singles), m, L, width), layers_dtype)
        for j, name in enumerate(singles):
            direct(name, start, stop, buf[j])
        out = source.read(others, start, stop) if others else {}
        out[_HIDDEN] = buf.transpose(1, 2, 0, 3)
        return out

    return _write(store, run, plan, lab, n, source.shapes, dtype, block_size, fmt, source.what, read,
                  progress, ahead=True, fingerprint=fingerprint, allow_nonfinite=allow_nonfinite, target=target)


class ImportOptions(TypedDict, total=False):
    """The keywords of the file importers (``import_safetensors``, ``import_npy``,
    ``import_hf_datasets``): ``layers`` and ``sites`` pick the names that make them
    (:func:`~capture.importers.plans.named_plan`), or ``plan`` says it whole; ``labels``,
    ``tokens``, ``mask``, ``dtype`` (default float16), ``block_size``, ``allow_nonfinite``,
    ``target`` are :func:`write`'s; ``logits`` names the source array stored as logits
    (default: one named ``logits``); ``task``, ``arch``, ``seed``, ... are the run's fields when ``run`` is a
    run id (:class:`~capture.importers.plans.RunInfo`)."""

    layers: Sequence[str] | None
    sites: Sequence[str] | None
    plan: ImportPlan | None
    labels: Any
    tokens: Any
    mask: Any
    dtype: str
    block_size: int | None
    allow_nonfinite: bool
    target: str | None
    logits: str | None
    task: str
    arch: str
    seed: int
    variant: str
    model_config: Mapping[str, Any] | None
    task_config: Mapping[str, Any] | None


#: The keywords of :class:`ImportOptions` that `write` takes.
WRITE_OPTIONS = ("labels", "tokens", "mask", "dtype", "block_size", "allow_nonfinite", "target")


def options_plan(names: Sequence[str], options: ImportOptions) -> ImportPlan:
    """The plan ``options`` gives, else the one :func:`~capture.importers.plans.named_plan`
    makes of a file source's ``names`` with its ``layers`` and ``sites``."""
    plan = options.get("plan") or named_plan(names, layers=options.get("layers"), sites=options.get("sites"))
    return with_logits(plan, names, options.get("logits"))


def write_with(store: Store | str, run: RunInfo | str, source: Ranged, plan: ImportPlan,
               options: ImportOptions, *, fmt: str, arch: str) -> ImportResult:
    """`write` of a file importer: the write's keywords from ``options``, the rest (but the
    plan's) the fields of the run when ``run`` is a run id (whose ``arch`` defaults to
    ``arch``)."""
    given: dict[str, Any] = dict(options)
    fields = {k: v for k, v in given.items() if k not in (*WRITE_OPTIONS, "layers", "sites", "plan", "logits")}
    return write(store, as_run(run, {"arch": arch, **fields}), source, plan, fmt=fmt,
                 **{k: v for k, v in given.items() if k in WRITE_OPTIONS})


def _write_batches(store, run, source: Batches, plan: ImportPlan, lab: tuple[Any, Any, Any], dtype: str,
                   block_size: int | None, fmt: str, progress, *,
                   allow_nonfinite: bool = False, target: str | None = None) -> ImportResult:
    batches = source.batches
    if isinstance(batches, Sequence):  # in memory: every batch checked before anything is written
        ref: dict[str, tuple[int, ...]] | None = None
        total = 0
        for i, b in enumerate(batches):
            shapes = shapes_of(b)
            total += check_shapes(shapes, plan, f"{source.what}, batch {i}", ref)
            ref = ref or shapes
        if source.n_sequences is not None and source.n_sequences != total:
            raise InvalidArrayError(f"{source.what}: n_sequences={source.n_sequences} but the batches "
                                    f"hold {total} sequences")
        n = total
        it: Iterator[Mapping[str, Any]] = iter(batches)
    else:
        it = iter(batches)
        if source.n_sequences is None:
            raise InvalidArrayError(f"{source.what} arrive from a generator: give n_sequences= "
                                    "(the store is laid out at its full size first)")
        n = source.n_sequences
    head = next(it, None)
    if head is None:
        raise InvalidArrayError(f"{source.what}: no batches")
    shapes0 = shapes_of(head)
    check_shapes(shapes0, plan, f"{source.what}, batch 0")
    reader = _Sequential(source.what, plan, head, shapes0, it)
    return _write(store, run, plan, lab, n, shapes0, dtype, block_size, fmt, source.what,
                  reader.read, progress, after=reader.finish, allow_nonfinite=allow_nonfinite, target=target)


def first_tensor(value: Any) -> Any:
    """A module's output: the first element of a tuple (blocks that return (hidden, cache, …))."""
    while isinstance(value, tuple | list) and value:
        value = value[0]
    return value


def shapes_of(batch: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    out = {}
    for k in batch.keys():
        v = first_tensor(batch[k])
        out[str(k)] = tuple(int(x) for x in (v.shape if hasattr(v, "shape") else np.shape(v)))
    return out


class _Sequential:
    """Reads ``[start, stop)`` from batches arriving in order, keeping only what is unread
    (bounded memory); each new batch is checked against the first."""

    def __init__(self, what: str, plan: ImportPlan, head: Mapping[str, Any], ref: dict[str, tuple[int, ...]],
                 rest: Iterator[Mapping[str, Any]]) -> None:
        self.what, self.plan, self.ref, self.rest = what, plan, ref, rest
        self.buf: list[Arrays] = [self._take(head)]
        self.buf_start = 0      # sequence index of buf[0][0]
        self.index = 1          # batches taken so far
        self.count = len(next(iter(self.buf[0].values())))

    def _take(self, batch: Mapping[str, Any]) -> Arrays:
        out = {}
        for k in self.plan.names():
            out[k] = np.asarray(to_numpy(first_tensor(batch[k])))
        return out

    def read(self, start: int, stop: int) -> Arrays:
        while self.count < stop:
            batch = next(self.rest, None)
            if batch is None:
                raise InvalidArrayError(f"{self.what}: the batches end after {self.count} sequences, "
                                        f"fewer than the {stop} expected")
            shapes = shapes_of(batch)
            m = check_shapes(shapes, self.plan, f"{self.what}, batch {self.index}", self.ref)
            self.index += 1
            self.buf.append(self._take(batch))
            self.count += m
        # drop batches wholly before start
        while self.buf and self.buf_start + len(next(iter(self.buf[0].values()))) <= start:
            self.buf_start += len(next(iter(self.buf.pop(0).values())))
        out: dict[str, list[np.ndarray]] = {k: [] for k in self.plan.names()}
        pos = self.buf_start
        for b in self.buf:
            m = len(next(iter(b.values())))
            lo, hi = max(start, pos) - pos, min(stop, pos + m) - pos
            if lo < hi:
                for k, v in b.items():
                    out[k].append(v[lo:hi])
            pos += m
            if pos >= stop:
                break
        return {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in out.items()}

    def finish(self) -> None:
        extra = next(self.rest, None)
        if extra is not None:
            raise InvalidArrayError(f"{self.what}: more sequences than n_sequences={self.count}")


def _write(store: Store | str, run: RunInfo, plan: ImportPlan, given: tuple[Any, Any, Any], n: int,
           shapes: Mapping[str, Sequence[int]], dtype: str, block_size: int | None, fmt: str,
           what: str, read: Callable[[int, int], Arrays], progress: Callable[[int], None] | None,
           after: Callable[[], None] | None = None, ahead: bool = False,
           fingerprint: str | None = None, allow_nonfinite: bool = False,
           target: str | None = None) -> ImportResult:
    """The write itself. ``read(start, stop)`` hands over the arrays of a block; with
    ``ahead`` (files, which any thread may read) block ``b + 1`` is read by a second thread
    while block ``b`` is cast, checksummed and stored, so at most two blocks of the source
    are held besides the one being stored. ``fingerprint`` identifies a file source: it is
    recorded with the group, and a group recorded from another source is not resumed."""
    _n, L, width = activation_dims(shapes[plan.layers[0][1][0]])
    lab = label_arrays(resolve(given[0], n, L), given[1], given[2])
    if plan.tokens is not None and lab.tokens is None:
        tokens_from_source = True
    else:
        tokens_from_source = False
    check_labels(lab, n, L)
    labels = dict(lab.labels)
    if not labels:
        if lab.tokens is None and not tokens_from_source:
            raise MissingError(f"{what}: no labels and no tokens; give labels (a CSV/Parquet table "
                               "keyed by sequence, position, or arrays) or tokens")
        labels = {"token": lab.tokens} if lab.tokens is not None else {"token": None}  # type: ignore[dict-item]
    if target is not None and target not in labels:
        raise MissingError(f"target {target!r} is not a label of this import (labels: {', '.join(labels)}); "
                           "name one of them")
    n_classes = activation_dims(shapes[plan.logits])[2] if plan.logits else None
    extra = {site_var(s): (("position", f"{site_var(s)}_feature"), (L, activation_dims(shapes[src])[2]), dtype)
             for s, src in plan.sites}
    if len(extra) != len(plan.sites):
        raise InvalidArrayError(f"{what}: two sites share the store name {sorted(extra)}")
    st = store if isinstance(store, Store) else Store.create(store, exist_ok=True)
    attrs = {"sites": [s for s, _ in plan.sites], "stream": "import",
             "source": {"format": fmt, "what": what, "fingerprint": fingerprint,
                        "layers": {lay: list(src) for lay, src in plan.layers}}}
    written = 0
    # one consolidation at the end instead of one per step (each re-reads every document)
    with st.deferred_consolidation():
        st.add_run(run.run_id, task=run.task, arch=run.arch, seed=run.seed, variant=run.variant,
                   model_config=run.model_config, task_config=run.task_config)
        _same_source(st, run.run_id, L, fingerprint, what)
        if block_size is None:
            block_size = _block_size(st, run.run_id, L, n, width, dtype)
        with st.length_writer(run.run_id, L, n_sequences=n, n_features=width, labels=list(labels),
                              target=target, layers=[lay for lay, _ in plan.layers], n_classes=n_classes, dtype=dtype,
                              block_size=block_size, attrs=attrs, extra=extra or None,
                              allow_nonfinite=allow_nonfinite) as w:
            todo = w.missing_blocks()
            order = list(range(w.n_blocks)) if after is not None else todo
            with closing(_blocks(read, [w.block_range(b) for b in order], order, ahead)) as blocks:
                for b, arrays in blocks:
                    if b in todo:
                        _put(w, b, arrays, plan, lab, labels, L, width)
                        written += 1
                        if progress is not None:
                            progress(w.block_range(b)[1] - w.block_range(b)[0])
                    del arrays  # the writer holds a block until it is stored; nothing else does
            if after is not None:
                after()
            total = w.n_blocks
    return ImportResult(str(st.location), run.run_id, L, n, [lay for lay, _ in plan.layers],
                        [s for s, _ in plan.sites], list(labels), written, total, what,
                        target=target or next(iter(labels)), target_given=target is not None,
                        logits=plan.logits, n_classes=n_classes)


def _put(w: Any, b: int, arrays: Arrays, plan: ImportPlan, lab: Labels, labels: Mapping[str, Any], L: int,
         width: int) -> None:
    """Hand block ``b`` (the source's arrays of its sequences) to the writer."""
    start, stop = w.block_range(b)
    m = stop - start
    hidden = arrays[_HIDDEN] if _HIDDEN in arrays else _hidden(arrays, plan, m, L, width)
    tok = lab.tokens[start:stop] if lab.tokens is not None else (
        arrays[plan.tokens].reshape(m, L) if plan.tokens else np.full((m, L), -1))
    block_labels = {k: (tok if v is None else v[start:stop]) for k, v in labels.items()}
    w.write_block(
        b, hidden=hidden, tokens=tok, labels=block_labels,
        mask=None if lab.mask is None else lab.mask[start:stop],
        logits=arrays[plan.logits].reshape(m, L, -1) if plan.logits else None,
        extra={site_var(s): arrays[src].reshape(m, L, -1) for s, src in plan.sites} or None,
    )


#: Key of a ``hidden`` a source assembled itself (read straight into its buffer).
_HIDDEN = "\0hidden"


def _blocks(read: Callable[[int, int], Arrays], ranges: list[tuple[int, int]], order: list[int],
            ahead: bool) -> Generator[tuple[int, Arrays], None, None]:
    """``(block, read(*range))`` in order; with ``ahead``, the next block is read by a
    second thread while the caller stores this one (reading and storing overlap: the reads
    wait on the disk, the stores on the chunk threads). An error reading block ``k`` is
    raised when the caller gets to ``k``, after every block before it was handed over."""
    if not ahead or len(order) < 2:
        for b, (start, stop) in zip(order, ranges, strict=True):
            yield b, read(start, stop)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="layerstate-import-read") as pool:
        pending = pool.submit(read, *ranges[0])
        try:
            for i, b in enumerate(order):
                got = pending.result()
                if i + 1 < len(order):
                    pending = pool.submit(read, *ranges[i + 1])
                yield b, got
                del got
        finally:  # the caller stopped early: wait for the read in flight, drop its result
            pending.cancel()


def _existing(st: Store, run_id: str, L: int) -> dict[str, Any] | None:
    """The attributes of the run's length group ``L``, if there is one."""
    grp = st.run_group(run_id)
    name = length_group(L)
    return dict(grp[name].attrs) if name in grp else None


def _same_source(st: Store, run_id: str, L: int, fingerprint: str | None, what: str) -> None:
    """Refuse to resume (or redo) an import of one file source with another: the blocks
    already stored would be mixed with the new source's, or the new one silently skipped."""
    attrs = _existing(st, run_id, L)
    old = (attrs or {}).get("source") or {}
    if fingerprint is None or not isinstance(old, dict) or old.get("fingerprint") in (None, fingerprint):
        return
    state = "an import" if attrs and attrs.get("complete") else "an unfinished import"
    raise RunConflictError(
        f"run {run_id!r} length {L} holds {state} of {old.get('what')}, not of {what}; "
        + ("run the import of that source again to finish it, or " if state != "an import" else "")
        + "import this one under a new run id or into another store"
    )


def _block_size(st: Store, run_id: str, L: int, n: int, width: int, dtype: str) -> int:
    """Sequences per block when none is asked for: an unfinished import's own (a resume
    keeps its layout), else the store's default (chunks near ``TARGET_CHUNK_BYTES``) moved
    down to a divisor of ``n`` when one is within half of it. Every block then fills whole
    chunks, which the writer stores directly; a short last block went through zarr's
    generic write (the whole edge chunk, padded) and cost as much as a full block."""
    spec = (_existing(st, run_id, L) or {}).get("spec")
    if isinstance(spec, dict) and spec.get("n_sequences") == n and spec.get("block_size"):
        return int(spec["block_size"])
    auto = max(1, TARGET_CHUNK_BYTES // (L * width * np.dtype(dtype).itemsize))
    if auto >= n:
        return n
    for size in range(auto, (auto + 1) // 2 - 1, -1):
        if n % size == 0:
            return size
    return auto


def _hidden(arrays: Arrays, plan: ImportPlan, m: int, L: int, width: int) -> np.ndarray:
    """``(sequence, position, layer, feature)`` from the plan's arrays, laid out layer-major
    underneath (a transposed view): each layer is filled by one contiguous copy and each
    chunk (one layer) is read back contiguously by the writer; ``np.stack`` along axis 2
    made one strided copy of everything, the slowest step of an import."""
    dtypes = [arrays[s].dtype for _lay, src in plan.layers for s in src]
    dt = np.result_type(*dtypes)
    if dt.kind != "f" or any(len(src) > 1 for _lay, src in plan.layers):
        dt = np.promote_types(dt, np.float32)
    buf = np.empty((len(plan.layers), m, L, width), dt)
    for j, (_lay, src) in enumerate(plan.layers):
        first = arrays[src[0]].reshape(m, L, width)
        if len(src) == 1:
            buf[j] = first
            continue
        np.add(first, arrays[src[1]].reshape(m, L, width), out=buf[j], dtype=dt)
        for s in src[2:]:
            buf[j] += arrays[s].reshape(m, L, width)
    return buf.transpose(1, 2, 0, 3)


def format_import(res: ImportResult) -> str:
    """One line: what was imported where."""
    did = (f"{res.blocks_written} of {res.blocks_total} blocks written" if res.blocks_written != res.blocks_total
           else f"{res.blocks_total} blocks")
    sites = f", sites {', '.join(res.sites)}" if res.sites else ""
    target = ""
    if len(res.labels) > 1 and res.target:
        target = (f" (target {res.target})" if res.target_given else
                  f" (target {res.target}: the first label column, which analyses decode by default; "
                  "choose another with --target)")
    logits = (f"; logits from {res.logits!r} ({res.n_classes} classes)" if res.logits else
              "; no logits (an array named 'logits', or --logits NAME, brings them)")
    return (f"{res.store}: run {res.run_id!r} length {res.length}: {res.n_sequences} sequences, layers "
            f"{', '.join(res.layers)}{sites}; labels {', '.join(res.labels)}{target}{logits} ({did}) "
            f"from {res.source}")

