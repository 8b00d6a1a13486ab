"""``repair``: rebuild damaged metadata from its intact second copy.

Every node's ``zarr.json`` has a copy in the consolidated snapshot, and the root's own
document a copy in the metadata copy file; the digests recorded at the last consolidation
tell which of two disagreeing copies is intact (:func:`store.metadata.damage.check`). ``repair``
writes each damaged file back from the intact copy (atomically: a temp file, fsynced and
renamed), then rebuilds the snapshot and the digests from the nodes where those were the
damaged copy. It changes nothing when any file has no intact copy, or when a writer holds a
run of the store.

Chunk data has no second copy: a damaged chunk is reported as not repairable, with the way to
rewrite it (``forget_damaged=True`` marks the blocks holding damaged chunks of a length
group unwritten, so that ``layerstate capture`` rewrites them: capture resumes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from store.access.lease import live_leases

from .. import schema
from ..access.location import Location, RunLock
from ..core import Store
from ..errors import LayerstateError, ReadOnlyStoreError, WriterLockedError
from ..metadata.damage import MetadataCheck
from ..metadata.digests import ZARR_JSON, file_of, put, render
from .assess import damage_lines
from .validation import Report, validate


class RepairRefusedError(LayerstateError, ValueError):
    """``repair`` cannot tell an intact copy of some metadata; nothing was changed."""


@dataclass
class RepairReport:
    """What ``repair`` did (or, with ``dry_run``, would do)."""

    location: str
    dry_run: bool = False
    #: one line per file written (or to be written)
    actions: list[str] = field(default_factory=list)
    #: damaged chunks: not repairable from metadata, each with its fix
    unrepairable: list[str] = field(default_factory=list)
    #: damaged chunks whose blocks ``forget_damaged`` marked unwritten (what was asked: done),
    #: each with what rewrites it
    forgotten: list[str] = field(default_factory=list)
    #: what the damaged chunks lose and what can still be analysed (:func:`~store.integrity.assess.damage_lines`)
    damage: list[str] = field(default_factory=list)
    #: problems still there after repairing (empty when the store's metadata is healthy)
    remaining: list[str] = field(default_factory=list)
    #: warnings of the final check (a write in progress, …)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if nothing is left to fix (no damaged chunk, no metadata problem)."""
        return not self.unrepairable and not self.remaining


def repair(url: str | Any, *, dry_run: bool = False, forget_damaged: bool = False,
           storage_options: dict | None = None, check_chunks: bool = True) -> RepairReport:
    """Repair the metadata of the store at ``url`` from its intact copies.

    Raises
    ------
    RepairRefusedError
        Some metadata file has no intact copy (both copies damaged, or they disagree in a way
        no digest decides); the message names the first, and nothing is changed.
    ReadOnlyStoreError
        A packed (zip) or otherwise read-only store.
    WriterLockedError
        A writer is running on a run of the store (wait for it; nothing is changed).
    """
    loc = Location(url, storage_options or {})
    if loc.is_zip and not dry_run:
        raise ReadOnlyStoreError(
            f"{loc} is a packed (zip) store and cannot be written: `layerstate unpack` it, "
            "repair the directory, and pack it again (`layerstate repair --dry-run` lists what it would do)"
        )
    if not loc.is_zip:
        _no_live_writers(loc)
    before = validate(str(loc.url), storage_options=loc.storage_options, check_chunks=check_chunks)
    meta = before.metadata
    assert meta is not None
    refusals = meta.refusals
    if refusals:
        more = f" (and {len(refusals) - 1} more; see `layerstate validate`)" if len(refusals) > 1 else ""
        raise RepairRefusedError(f"{loc}: not repaired, nothing changed: {refusals[0].line()}{more}")
    out = RepairReport(str(loc), dry_run=dry_run)
    plan = _plan(meta, loc)
    out.actions = [line for line, _ in plan]
    blocks = _damaged_blocks(before)
    lines = _chunk_lines(before, blocks, forget_damaged)
    out.unrepairable = [line for line, forgot in lines if not forgot]
    out.forgotten = [line for line, forgot in lines if forgot]
    out.damage = damage_lines(before, str(loc))
    if forget_damaged and blocks:
        out.actions += [f"mark block(s) {', '.join(map(str, sorted(b)))} of {g} unwritten (damaged chunks), "
                        "so that `layerstate capture` rewrites them" for g, b in sorted(blocks.items())]
    if dry_run:
        out.remaining = [f.line() for f in meta.problems if f.action is None]
        return out
    zs = loc.zarr_store(read_only=False, guarded=False)
    for _, step in plan:
        step(zs)
    if forget_damaged and blocks:
        _forget(loc, blocks)
    after = validate(str(loc.url), storage_options=loc.storage_options, check_chunks=False)
    out.remaining = [p for p in after.problems]
    out.warnings = list(after.warnings)
    return out


def format_repair(rep: RepairReport) -> list[str]:
    """The report as lines of text, the verdict last (the command prints them)."""
    verb = "would " if rep.dry_run else ""
    lines = [f"{verb}{a}" for a in rep.actions]
    lines += [f"{'would forget' if rep.dry_run else 'forgot'}: {u}" for u in rep.forgotten]
    lines += [f"not repairable: {u}" for u in rep.unrepairable]
    chunk_arrays = {u.split(" chunk ")[0] for u in rep.unrepairable + rep.forgotten}
    left = [p for p in rep.remaining if p.split(":")[0] not in chunk_arrays]
    lines += [f"still wrong: {p}" for p in left]
    if rep.unrepairable or rep.dry_run:
        lines += rep.damage
    n = len(rep.actions)
    forgot = (f"; {len(rep.forgotten)} damaged chunk(s) forgotten: their blocks are marked unwritten, and "
              "`layerstate capture EXPERIMENT.toml --store STORE` (the experiment file the store was made "
              "from) rewrites them" if rep.forgotten else "")
    if rep.dry_run:
        packed = ("; a packed store: `layerstate unpack` it and repair the directory"
                  if rep.location.endswith(".zip") and n else "")
        lines.append(f"dry run: {n} repair(s) planned for {rep.location}; nothing changed{packed}")
    elif rep.ok:
        lines.append(f"repaired {rep.location}: {n} repair(s); its metadata validates{forgot}" if n else
                     f"{rep.location}: metadata intact, nothing to repair")
    else:
        lines.append(f"{rep.location}: {n} repair(s) done; {len(rep.unrepairable)} damaged chunk(s) not "
                     f"repairable and {len(left)} other problem(s) left (see above)")
    return lines


# ---------------------------------------------------------------------- the plan
def _plan(meta: MetadataCheck, loc: Location) -> list[tuple[str, Any]]:
    """``(line, step(zarr_store))`` for each write, in order: the root's document, then the
    nodes' files, then (once) the snapshot and digests rebuilt from the nodes."""
    steps: list[tuple[str, Any]] = []
    actions = {f.action for f in meta.findings}
    if "restore_root" in actions:
        root = cast("dict[str, Any]", meta.root_copy)
        steps.append((f"restore {ZARR_JSON} (the root's attributes) from {schema.METADATA_COPY}",
                      lambda zs, root=root: put(zs, ZARR_JSON, render(root))))
    for f in meta.findings:
        if f.action == "restore":
            doc = meta.entries[f.path]
            steps.append((f"restore {file_of(f.path)} from its copy in the consolidated snapshot",
                          lambda zs, p=f.path, doc=doc: put(zs, file_of(p), render(doc))))
    if actions & {"restore_root", "consolidate"}:
        steps.append((f"rebuild the consolidated snapshot ({ZARR_JSON}) and the digests "
                      f"({schema.METADATA_COPY}) from the nodes",
                      lambda zs: Store.open(loc.url, mode="r+", storage_options=loc.storage_options).consolidate()))
    return steps


def _no_live_writers(loc: Location) -> None:
    """Refuse while any run is being written or the store consolidated: a live lease (any
    host, any backend, S41) or, on a local store, a held run lock."""
    leases = live_leases(loc)
    if leases:
        more = f" (and {len(leases) - 1} more)" if len(leases) > 1 else ""
        raise WriterLockedError(
            f"{loc}: not repaired, nothing changed: {leases[0]}{more}; wait for the writer to "
            "finish (or stop it and let its lease expire), then repair"
        )
    if not loc.is_local:
        return
    runs = loc.local_path / schema.RUNS
    if not runs.is_dir():
        return
    for run in sorted(p.name for p in runs.iterdir() if p.is_dir()):
        lock = RunLock(loc, run)
        lock.acquire()  # WriterLockedError names the run and the writer's pid
        lock.release()


# ---------------------------------------------------------------------- damaged chunks
def _damaged_blocks(rep: Report) -> dict[str, set[int]]:
    """Length group path -> blocks holding a damaged chunk (of an array chunked by sequence)."""
    out: dict[str, set[int]] = {}
    for array_path, _idx, group_path, held in rep.damaged_chunks:
        if group_path is None or not schema.parse_length_group(group_path.rsplit("/", 1)[-1]):
            continue
        name = array_path.rsplit("/", 1)[-1]
        if name in ("sequence", "position", "layer") or not held:
            continue
        out.setdefault(group_path, set()).update(held)  # a shard: every block it spans
    return out


def _chunk_lines(rep: Report, blocks: dict[str, set[int]], forgetting: bool) -> list[tuple[str, bool]]:
    """Each damaged chunk's line with its fix, and whether ``forgetting`` forgets its block."""
    lines = []
    for array_path, idx, group_path, held in rep.damaged_chunks:
        what = f"{array_path} chunk {idx}: chunk data has no second copy"
        forgot = False
        if group_path is not None and held and set(held) <= blocks.get(group_path, set()):
            forgot = forgetting
            fix = ("its block is marked unwritten: run `layerstate capture` again, it rewrites it"
                   if forgetting else "re-capture it: `layerstate repair --forget-damaged` marks its "
                   "block unwritten, then `layerstate capture` rewrites it (capture resumes)")
        elif array_path.startswith(f"{schema.RESULTS}/"):
            fix = "run the analysis that wrote this result again (it replaces the result)"
        else:
            fix = "restore the store from a backup, or train and capture that run into a new store"
        lines.append((f"{what}; {fix}", forgot))
    return lines


def _forget(loc: Location, blocks: dict[str, set[int]]) -> None:
    """Remove ``blocks`` from their groups' completion records (S23) and consolidate."""
    st = Store.open(loc.url, mode="r+", storage_options=loc.storage_options)
    with st.deferred_consolidation():
        for path, bad in blocks.items():
            grp = st.root[path]
            done = set(cast("list[int]", grp.attrs.get(schema.ATTR_COMPLETED, []))) - bad
            grp.attrs.update({schema.ATTR_COMPLETED: sorted(done), schema.ATTR_COMPLETE: False})
            st.consolidate()
