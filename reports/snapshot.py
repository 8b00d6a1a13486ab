"""A consistent view of a store that may still be being written.

A capture or training process may be writing while a report is built. The report therefore
reopens the store read-only, which reads its consolidated metadata: the snapshot taken at the
writer's last finished write (groups created after it are invisible). Of what the snapshot
shows, only lengths whose completion record says *complete* are used; a length still being
written (or left by a killed writer) is listed on the page and skipped, never read as the NaN
of its unwritten chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from store import Store, schema, summary


@dataclass
class Snapshot:
    """The store as the report sees it.

    Attributes
    ----------
    store : Store
        Opened read-only where possible (else the store given).
    info : dict
        :func:`store.summary` of that view.
    complete, incomplete : dict[str, list[int]]
        Per run, the activation lengths (``len_*`` groups) that are complete / not.
    with_logits : dict[str, list[int]]
        Per run, the complete lengths that hold the model's logits.
    notes : list of str
        What the snapshot left out, in words, for the page.
    """

    store: Store
    info: dict
    complete: dict[str, list[int]] = field(default_factory=dict)
    incomplete: dict[str, list[int]] = field(default_factory=dict)
    with_logits: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        return list(self.info["runs"])

    def results(self, prefix: str = "") -> list[str]:
        return [r for r in self.info["results"] if r.startswith(prefix)]


def take_snapshot(store: Store) -> Snapshot:
    """Reopen ``store`` read-only and record which lengths are complete."""
    view = _read_only(store)
    info = summary(view)
    snap = Snapshot(view, info)
    for rid, run in info["runs"].items():
        snap.complete[rid], snap.incomplete[rid], snap.with_logits[rid] = [], [], []
        for name, grp in sorted(run["groups"].items()):
            parsed = schema.parse_length_group(name)
            if parsed is None or parsed[0] != schema.LEN:
                continue
            length = parsed[1]
            if grp["complete"]:
                snap.complete[rid].append(length)
                if "logits" in grp["arrays"]:
                    snap.with_logits[rid].append(length)
            else:
                snap.incomplete[rid].append(length)
                snap.notes.append(
                    f"run {rid} length {length} is incomplete ({grp['blocks']} blocks written: "
                    "still being captured, or the capture was interrupted) and is left out; "
                    "re-run the capture to finish it, then rebuild the report"
                )
    return snap


def _read_only(store: Store) -> Store:
    if store.read_only:
        return store
    loc = store.location
    try:
        return Store.open(loc.url, mode="r", storage_options=loc.storage_options)
    except Exception:  # a location that cannot be reopened (e.g. a store object in memory)
        return store
