"""Resumable, chunk-aligned writes of one (run, length) group: :class:`LengthWriter`.

The unit of work is a *block*: ``block_size`` consecutive sequences, exactly one chunk
along ``sequence`` in every array, so no two writes ever share a chunk (zarr does not
check this for numpy writes; docs/measured.md, "Zarr settings"). The group's layout is
fixed up front (:mod:`store.io.layout`), what is handed in is checked (:mod:`store.io.inputs`),
and each block, once all its chunks are stored and fsynced (:mod:`store.io.blocks`), is
recorded in the group's attributes (an atomic rename on local disks). A writer killed at
any point therefore leaves finished blocks recorded and unfinished ones simply unrecorded;
running it again redoes only those, and deterministic producers give a bit-identical store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np
import zarr

from .. import schema
from ..access.lease import RunLease
from ..errors import IncompleteError, InvalidArrayError
from ..zarrutil import ordered, to_numpy
from .blocks import BlockPipeline
from .inputs import cast_finite, check_block, check_extra
from .layout import float_dtypes, make_spec, n_blocks, open_or_create


class _Pipeline(BlockPipeline):
    """The block pipeline, optionally with more blocks in flight: with ``in_flight`` = 1,
    submitting block ``b`` makes block ``b - 2`` durable and records it while the threads
    still store ``b - 1`` and ``b``, so a block's fsyncs, which wait on the disk, overlap
    the next block's writes instead of stopping the caller (on the 2-core machine's shared,
    busy disk a 1 GB write took 3.8 s against 4.6 s, best of 4 interleaved; another run 1.45
    s against 2.77 s). :meth:`drain` (every flush) still waits for all."""

    def __init__(self, grp: zarr.Group, record: Any, in_flight: int = 0) -> None:
        super().__init__(grp, record)
        self.in_flight_blocks = in_flight
        self._draining = False

    def settle(self, keep: int) -> None:
        super().settle(keep if self._draining else max(keep, self.in_flight_blocks))

    def drain(self) -> None:
        """Record every block submitted so far (waiting for its chunks)."""
        self._draining = True
        try:
            self.settle(keep=0)
        finally:
            self._draining = False


class StoreHost(Protocol):
    """What a writer needs of its store (:class:`~store.core.Store` provides it)."""

    def run_group(self, run_id: str) -> zarr.Group: ...

    def lock(self, run_id: str) -> RunLease: ...

    def consolidate(self) -> None: ...


class LengthWriter:
    """Write the activations of one run at one sequence length.

    Parameters
    ----------
    store, run_id, length
        Where to write; the run must exist (:meth:`Store.add_run`).
    n_sequences
        Total number of sequences this group will hold (fixed up front).
    n_features
        Width of the hidden states (``feature`` dim).
    labels
        Names of the per-position integer labels, e.g. ``["depth", "top"]``.
    layers
        The ``layer`` coordinate (default ``embed, L0, …`` from ``n_layers``).
    n_layers
        Number of blocks, if ``layers`` is not given.
    n_classes
        Width of ``logits``; ``None`` stores no logits.
    target
        The label the model was trained on (recorded; default the first label).
    dtype
        ``"float16"`` (default) or ``"float32"`` for hidden states and logits.
    block_size
        Sequences per chunk; default keeps one layer's chunk near 4 MB.
    kind
        Group prefix: ``"len"`` for activations, ``"cf"`` etc. for other captures.
    allow_nonfinite
        Accept NaN/Inf in ``hidden`` (recorded in the group's attrs); refused by default.
    attrs
        Extra JSON-able attributes for the group (e.g. which sites were captured).
    extra
        More per-sequence variables: ``{name: (dims after 'sequence', their sizes, dtype)}``,
        e.g. ``{"corrupt_position": ((), (), "int64")}`` or an extra activation site
        ``{"site_L0_cell": (("position", "site_L0_cell_feature"), (40, 162), "float16")}``.
    in_flight
        Blocks left unrecorded (still being stored) when the next one is written: 0 records
        block ``b - 1`` while ``b`` is stored; 1 lets the disk's fsyncs of ``b - 2`` overlap
        the writes of ``b - 1`` and ``b`` (a fast producer, e.g. capture on a GPU). Arrays
        handed to :meth:`write_block` must then stay unchanged one block longer.

    Notes
    -----
    Use as a context manager. :meth:`write_block` writes block ``b`` (any order);
    :meth:`append` buffers arbitrary batches into blocks. ``missing_blocks()`` tells a
    resumed producer what is left to do.
    """

    def __init__(
        self,
        store: StoreHost,
        run_id: str,
        length: int,
        *,
        n_sequences: int,
        n_features: int,
        labels: Sequence[str],
        layers: Sequence[str] | None = None,
        n_layers: int | None = None,
        n_classes: int | None = None,
        target: str | None = None,
        dtype: str = "float16",
        block_size: int | None = None,
        kind: str = "len",
        allow_nonfinite: bool = False,
        attrs: Mapping[str, Any] | None = None,
        extra: Mapping[str, tuple[Sequence[str], Sequence[int], str]] | None = None,
        in_flight: int = 0,
    ) -> None:
        self.spec = make_spec(
            length, n_sequences=n_sequences, n_features=n_features, labels=labels, layers=layers,
            n_layers=n_layers, n_classes=n_classes, target=target, dtype=dtype,
            block_size=block_size, extra=extra,
        )
        self.store, self.run_id, self.length, self.kind = store, run_id, int(length), kind
        self.allow_nonfinite = allow_nonfinite
        self._lock = store.lock(run_id).acquire()
        try:
            self.group = open_or_create(
                store.run_group(run_id), run_id, schema.length_group(self.length, kind), self.spec,
                self._group_attrs(attrs or {}),
            )
        except BaseException:
            self._lock.release()
            raise
        if allow_nonfinite and not self.group.attrs.get("nonfinite_allowed"):
            # resuming a group begun without it: from now on it may hold NaN/Inf (never unset)
            self.group.attrs["nonfinite_allowed"] = True
        self._buffer: list[dict[str, Any]] = []
        self._buffered = 0
        self._pipeline = _Pipeline(self.group, self._record, in_flight)
        self._cursor = self.n_written

    def _group_attrs(self, extra_attrs: Mapping[str, Any]) -> dict[str, Any]:
        """The attributes a new group starts with (the spec is added last, by the layout)."""
        return {
            **extra_attrs,
            "length": self.length,
            "labels": self.spec["labels"],
            "target": self.spec["target"],
            "n_blocks": self.n_blocks,
            schema.ATTR_BLOCK: self.block_size,
            "nonfinite_allowed": self.allow_nonfinite,
            schema.ATTR_COMPLETED: [],
            schema.ATTR_COMPLETE: False,
        }

    # ------------------------------------------------------------------ layout
    @property
    def block_size(self) -> int:
        return self.spec["block_size"]

    @property
    def n_sequences(self) -> int:
        return self.spec["n_sequences"]

    @property
    def n_blocks(self) -> int:
        return n_blocks(self.spec)

    def block_range(self, b: int) -> tuple[int, int]:
        """Sequences ``[start, stop)`` of block ``b``."""
        if not 0 <= b < self.n_blocks:
            raise IndexError(f"block {b} out of range 0..{self.n_blocks - 1}")
        start = b * self.block_size
        return start, min(start + self.block_size, self.n_sequences)

    def completed_blocks(self) -> set[int]:
        """Blocks recorded as written (after waiting for any still being stored)."""
        self.flush()
        return self._recorded()

    def _recorded(self) -> set[int]:
        return set(cast("list[int]", self.group.attrs.get(schema.ATTR_COMPLETED, [])))

    def missing_blocks(self) -> list[int]:
        done = self.completed_blocks()
        return [b for b in range(self.n_blocks) if b not in done]

    @property
    def complete(self) -> bool:
        self.flush()
        return bool(self.group.attrs.get(schema.ATTR_COMPLETE))

    @property
    def n_written(self) -> int:
        """Sequences durably written from the start without a gap (where ``append`` resumes)."""
        done = self.completed_blocks()
        b = 0
        while b in done:
            b += 1
        return self.n_sequences if b >= self.n_blocks else b * self.block_size

    # ------------------------------------------------------------------ writing
    def write_block(
        self,
        b: int,
        *,
        hidden: Any,
        tokens: Any,
        labels: Mapping[str, Any],
        mask: Any = None,
        logits: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Write block ``b`` (all its sequences, every array) and record it as done.

        Shapes: ``hidden (m, length, layer, feature)``, ``tokens``/``mask``/each label
        ``(m, length)``, ``logits (m, length, class)``, where ``m`` is the block's size.
        """
        start, stop = self.block_range(b)
        m = stop - start
        data = check_block(self.spec, self.length, m, hidden, tokens, labels, mask, logits)
        data.update(check_extra(self.spec, m, extra or {}))
        floats = float_dtypes(self.spec)

        def cast_checked(var: str, values: np.ndarray) -> np.ndarray:
            try:
                return cast_finite(values, var, floats[var], start=start, layers=self.spec["layers"],
                                   allow_nonfinite=self.allow_nonfinite)
            except InvalidArrayError as exc:  # a grid's capture must say which of its runs
                raise InvalidArrayError(f"run {self.run_id!r}, length {self.length}: {exc}") from None

        # Rewriting a block already recorded (or about to be): check everything before
        # touching it, so a refused rewrite cannot leave a recorded block half replaced.
        eager = b in self._recorded() or self._pipeline.in_flight(b)
        if eager:
            for var in floats.keys() & data.keys():
                data[var] = cast_checked(var, data[var])
        # Otherwise the chunk threads cast and check each float chunk as they encode it
        # (same bytes as zarr, ~2x faster, store/io/chunks.py); this returns once the checks
        # pass, and the block is recorded only after all its chunks are stored.
        self._pipeline.submit(
            b, slice(start, stop), data, uncast=set() if eager else set(floats),
            check_finite=not self.allow_nonfinite, cast=cast_checked,
        )

    def _record(self, blocks: list[int]) -> None:
        """Record ``blocks`` as finished (their chunks are stored and durable)."""
        done = self._recorded() | set(blocks)
        self.group.attrs[schema.ATTR_COMPLETED] = sorted(done)
        if len(done) == self.n_blocks:
            self.group.attrs[schema.ATTR_COMPLETE] = True

    def flush(self) -> None:
        """Wait until every block written so far is stored, and record them."""
        self._pipeline.drain()

    def append(
        self,
        *,
        hidden: Any,
        tokens: Any,
        labels: Mapping[str, Any],
        mask: Any = None,
        logits: Any = None,
    ) -> None:
        """Add a batch of any size after the sequences written so far.

        After a restart, ``n_written`` says how many sequences are already stored: skip
        those before appending again.
        """
        hidden = ordered(hidden, schema.DIMS["hidden"], "hidden")
        m = hidden.shape[0]
        if self._cursor + self._buffered + m > self.n_sequences:
            raise InvalidArrayError(
                f"appending {m} sequences would exceed n_sequences={self.n_sequences} "
                f"({self._cursor + self._buffered} already written or buffered)"
            )
        self._buffer.append(
            {
                "hidden": hidden,
                "tokens": ordered(tokens, schema.DIMS["tokens"], "tokens"),
                "labels": {k: ordered(v, schema.LABEL_DIMS, f"label {k!r}") for k, v in labels.items()},
                "mask": None if mask is None else ordered(mask, schema.DIMS["mask"], "mask"),
                "logits": None if logits is None else ordered(logits, schema.DIMS["logits"], "logits"),
            }
        )
        self._buffered += m
        self._write_full_blocks()

    def _write_full_blocks(self) -> None:
        while self._buffered:
            b = self._cursor // self.block_size
            start, stop = self.block_range(b)
            need = stop - start
            if self._buffered < need:
                return
            batch = _take(self._buffer, need)
            self._buffered -= need
            self.write_block(b, **batch)
            self._cursor = stop

    def close(self) -> None:
        """Flush, consolidate metadata and release the run lock."""
        try:
            if self._buffered:
                raise IncompleteError(
                    f"{self._buffered} appended sequences do not fill block "
                    f"{self._cursor // self.block_size}; append all {self.n_sequences} sequences"
                )
            self.flush()
            self.store.consolidate()
        finally:
            self._release()

    def __enter__(self) -> LengthWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # blocks whose chunks did get stored are still recorded: a resume skips them
            with contextlib.suppress(Exception):
                self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        try:
            # every write is waited for (none outlives the lock)
            self._pipeline.close()
        finally:
            self._lock.release()


# ---------------------------------------------------------------------- append's buffer
def _take(buffer: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Pop exactly ``n`` sequences off the front of a list of batches, concatenated."""
    parts: list[dict[str, Any]] = []
    got = 0
    while got < n:
        batch = buffer[0]
        m = len(batch["hidden"])
        k = min(m, n - got)
        parts.append(_slice(batch, 0, k))
        if k == m:
            buffer.pop(0)
        else:
            buffer[0] = _slice(batch, k, m)
        got += k
    return _concat(parts)


def _slice(batch: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    def cut(v):
        return None if v is None else to_numpy(v)[a:b]

    return {
        "hidden": cut(batch["hidden"]),
        "tokens": cut(batch["tokens"]),
        "labels": {k: cut(v) for k, v in batch["labels"].items()},
        "mask": cut(batch["mask"]),
        "logits": cut(batch["logits"]),
    }


def _concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    if len(parts) == 1:
        return parts[0]

    def cat(key):
        vals = [p[key] for p in parts]
        return None if vals[0] is None else np.concatenate(vals)

    return {
        "hidden": cat("hidden"),
        "tokens": cat("tokens"),
        "labels": {k: np.concatenate([p["labels"][k] for p in parts]) for k in parts[0]["labels"]},
        "mask": cat("mask"),
        "logits": cat("logits"),
    }
