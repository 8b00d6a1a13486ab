"""Copy a store, or a subset of it, between locations, chunk by chunk: ``pull`` and ``push``.

``pull(url, dir, runs=…, lengths=…, layers=…)`` makes a valid local store from a remote one
(any fsspec URL) by fetching only what the subset needs:

1. the source's root ``zarr.json``, whose consolidated snapshot (S32) lists every node, so
   nothing is listed on the remote; the snapshot entries used are checked against the
   digests in ``layerstate-metadata.json`` (S34) when the source has them;
2. the chunk keys of the selected runs, lengths (every kind: ``len_``, ``cfclean_``, …) and
   layers, enumerated from each array's own metadata (shape and chunk grid). A group with a
   completion record (S23) gives only the blocks it records as written; a group without one
   (written in one go, e.g. by plain xarray) gives every chunk of its grid. A group's layers
   are its ``spec.layers``, or, without a ``spec``, the values of its ``layer`` coordinate
   (read from the source). An array chunked one layer per chunk (S21) gives a layer subset
   as a subset of chunk files, renumbered along that axis; an array whose chunks hold several
   layers has each needed chunk fetched whole, decoded, and the kept layers re-encoded with
   the same codecs, one layer per chunk;
3. each chunk fetched (several at once) and checked as it arrives: its crc32c where the
   array's codecs end in one (and its size, for raw arrays); otherwise (another tool's
   codecs, e.g. xarray's zstd alone) by decoding it with the array's codecs, which catches a
   truncated or garbled chunk but not a change that still decodes. It is written under a
   temporary name and renamed;
4. node metadata for the subset: a layer subset shrinks the arrays' layer dim, and rewrites
   the ``layer`` coordinate, the group's ``spec.layers`` and the sites of dropped layers; then
   the root document, and a consolidation (snapshot + digests) makes it a store.

A chunk the source does not hold is damage where a completion record vouches for it (a
recorded block; the weights of a group marked ``complete``), and an error. Elsewhere it was
never written and reads as the fill value (S6): the copy does not hold it either, and it is
remembered in the marker so that a resumed copy does not ask for it again.

Progress is the target itself: a marker file (``layerstate-transfer.json``) names the source,
the selection and the chunks found absent at the source, and a chunk already in the target
with its expected size (and, on a local disk, its crc32c) is not fetched again. So a pull
killed at any point (``kill -9``) and run again fetches only what is missing, and ends
bit-identical to an uninterrupted pull (every file the target holds is a function of the
source and the selection; no timestamps). Until the root document is written at the end the
target is not a store, so a half-finished pull cannot be analysed by mistake.

``push(dir, url)`` is the same copy the other way (checked the same way, resumable the same
way: objects already at the target with their expected size are not sent again).

Only zarr, fsspec and this package's own helpers are used here. The copy's parts:
:mod:`store.sharing.transfer_plan` (what to copy), :mod:`store.sharing.transfer_chunks` (each
chunk checked, cut and recognised), :mod:`store.sharing.transfer_resume` (the marker, the
target's last writes).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack, cast

from ..access.location import Location
from ..errors import (
    CorruptStoreError,
    InvalidArgumentError,
    NotAStoreError,
    TransferError,
    check_keywords,
)
from ..metadata.digests import snapshot_entries
from .transfer_chunks import already_copied, part_ok, produce, rounds
from .transfer_plan import CopySelection, check_digests, plan_copy, read_root
from .transfer_resume import (
    MARKER,
    MARKER_FORMAT,
    claim,
    marker_bytes,
    plan_key,
    write_nodes,
)
from .transfer_side import Side

#: Chunks fetched per request round (s3fs/http fetch a list concurrently).
ROUND = 16

__all__ = [
    "MARKER",
    "MARKER_FORMAT",
    "CopySelection",
    "Side",
    "TransferError",
    "TransferReport",
    "copy_store",
    "format_report",
    "pull",
    "push",
]


@dataclass
class TransferReport:
    """What a copy did. ``fetched_bytes`` counts every body read from the source (chunks and
    metadata); ``target_bytes`` is the size of everything the target holds afterwards."""

    source: str
    target: str
    runs: list[str]
    lengths: dict[str, list[int]]
    layers: dict[str, list[str]]
    chunks: int = 0
    copied: int = 0
    skipped: int = 0
    absent: int = 0        # chunks the source never stored (no record vouches for them)
    fetched_bytes: int = 0
    target_bytes: int = 0



# ---------------------------------------------------------------------- entry points
class CopyOptions(TypedDict, total=False):
    """The keywords of `pull` and `push`: what to copy (default: every run, length and layer,
    with the weights) and how to reach the URL (fsspec ``storage_options``); ``progress(done,
    total)`` is called with the chunks done after each round."""

    runs: Sequence[str] | None
    lengths: Sequence[int] | None
    layers: Sequence[str] | None
    weights: bool
    storage_options: dict[str, Any] | None
    progress: Callable[[int, int], None] | None


def _copy(function: str, src: Location, dst: Location, options: CopyOptions) -> TransferReport:
    """`copy_store` of the selection ``options`` names."""
    check_keywords(function, options, CopyOptions.__optional_keys__)
    sel = CopySelection(_opt_list(options.get("runs")), _opt_list(options.get("lengths"), int),
                        _opt_list(options.get("layers")), options.get("weights", True))
    return copy_store(src, dst, sel, progress=options.get("progress"))


def pull(url: str, target: str | os.PathLike[str], **options: Unpack[CopyOptions]) -> TransferReport:
    """Copy the selected runs / lengths / layers of the store at ``url`` into a new local
    store at ``target`` (resumes an unfinished pull of the same selection there); keywords:
    :class:`CopyOptions`.

    Raises
    ------
    TransferError
        ``url`` cannot be reached or read.
    NotAStoreError
        ``url`` holds no layerstate store.
    MissingError
        A run, length or layer asked for is not in the store (the valid ones are listed).
    RunConflictError
        ``target`` exists and is not an unfinished pull of the same selection.
    CorruptStoreError
        A chunk fails its checksum (or is missing) in the source.
    """
    return _copy("pull", Location(url, options.get("storage_options") or {}),
                 Location(os.fspath(target)), options)


def push(source: str | os.PathLike[str], url: str, **options: Unpack[CopyOptions]) -> TransferReport:
    """Copy a local store (or the selected part of it) to ``url``: the same checks and keywords
    as :func:`pull` (every chunk's crc32c before it is sent), resumable the same way."""
    return _copy("push", Location(os.fspath(source)),
                 Location(url, options.get("storage_options") or {}), options)


def copy_store(src: Location, dst: Location, sel: CopySelection, *,
               progress: Callable[[int, int], None] | None = None) -> TransferReport:
    """Copy ``sel`` of the store at ``src`` to ``dst`` (see the module's docs)."""
    if src.is_zip or dst.is_zip:
        raise InvalidArgumentError("pull/push copy directory stores and URLs, not a zip; unpack it first "
                                   "(`layerstate unpack`), or pack the copy afterwards")
    source = Side(src)
    root_doc, fetched = read_root(source)
    entries, _ = snapshot_entries(root_doc)
    if entries is None:
        raise NotAStoreError(
            f"{src} holds no consolidated metadata snapshot, so what to copy cannot be told "
            "without listing it; open it once for writing with layerstate (any write "
            "consolidates), or `layerstate repair` it"
        )
    fetched += check_digests(source, root_doc, entries)
    plan = plan_copy(root_doc, entries, sel, str(src), source)
    fetched += plan.fetched
    target = Side(dst)
    key = plan_key(str(src), sel, plan)
    marker = claim(target, key, src, dst, sel)
    absent = set(cast("list[str]", marker.get("absent") or []))
    report = TransferReport(str(src), str(dst), plan.runs, plan.lengths, plan.layers,
                            chunks=len(plan.chunks), fetched_bytes=fetched)
    have = target.sizes()
    todo = [c for c in plan.chunks if c.src not in absent and not already_copied(target, have, c)]
    report.absent = sum(c.src in absent for c in plan.chunks)
    report.skipped = len(plan.chunks) - len(todo) - report.absent
    done = len(plan.chunks) - len(todo)
    for batch in rounds(todo, ROUND):
        got = source.fetch([c.src for c in batch])
        writes: dict[str, bytes] = {}
        found_absent = []
        for c in batch:
            data = got[c.src]
            if data is None:
                if c.required:
                    raise CorruptStoreError(
                        f"{src}: chunk {c.src} is missing though the store records it as written; "
                        f"`layerstate validate {src}` names every damaged chunk"
                    )
                found_absent.append(c.src)  # never written: reads as the fill value there and here
                continue
            report.fetched_bytes += len(data)
            sizes = dict(c.targets())  # a cut killed half-way: only the parts not yet there
            writes.update({k: v for k, v in produce(data, c, str(src)).items()
                           if not part_ok(target, have, k, sizes[k], c.crc)})
        target.put_many(writes)
        if found_absent:  # remembered, so that a resumed copy does not ask for them again
            absent.update(found_absent)
            target.put(MARKER, marker_bytes(marker, absent))
        report.copied += len(batch) - len(found_absent)
        report.absent += len(found_absent)
        done += len(batch)
        if progress is not None:
            progress(done, len(plan.chunks))
    write_nodes(target, plan, root_doc, sel, str(src))
    target.delete(MARKER)
    report.target_bytes = sum(target.sizes().values())
    return report


# ---------------------------------------------------------------------- the two sides
# ---------------------------------------------------------------------- helpers
def _opt_list(values: Sequence[Any] | None, conv: Callable[[Any], Any] = str) -> list[Any] | None:
    if values is None:
        return None
    out = [conv(v) for v in values]
    return out or None


def format_report(rep: TransferReport) -> str:
    """One line: what was copied, how much was fetched."""
    runs = ", ".join(rep.runs) or "(none)"
    return (f"{rep.target}: {len(rep.runs)} run(s) ({runs}) from {rep.source}; "
            f"{rep.copied} chunk(s) copied, {rep.skipped} already there"
            f"{f', {rep.absent} never stored at the source (read as fill)' if rep.absent else ''}; "
            f"{rep.fetched_bytes / 2**20:.1f} MiB read for {rep.target_bytes / 2**20:.1f} MiB stored")
