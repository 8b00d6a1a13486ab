"""Leases: who may write a run, and who may consolidate, across processes, hosts and object stores.

A lease is a small JSON object inside the store, under :data:`LEASE_DIR`, naming its holder
(host, pid, a random id) and when it expires. The holder renews it from a background thread
while it writes; a lease whose holder stopped renewing (killed, cut off) expires and the next
writer takes it over. docs/store-format.md, "Concurrent writers" (S40-S45), states the rules
and what each kind of location guarantees.

How a lease is taken (:meth:`Lease.acquire`), for a name such as ``run-r0``:

1. list the lease objects of that name, ``<name>.g<generation>.json``;
2. if one is live (not expired, and its holder not known dead), refuse, naming it;
3. otherwise create generation ``max + 1`` *exclusively*: on a local or network file system a
   finished file hard-linked into place (``link`` fails if the name exists), on S3 a
   conditional PUT (``If-None-Match: *``), elsewhere (other fsspec file systems) a check
   followed by a write, then a read-back. Of several contenders for the same generation
   exactly one wins where the create is atomic;
4. list again: if another generation is live (a contender that saw an older listing), back
   off and refuse; otherwise delete the expired generations below and hold.

Renewal rewrites the holder's own generation (nobody else ever writes it) after checking that
no higher generation exists; one that does means the lease was taken over (the holder was
paused or cut off for longer than the lease lasts): the lease is then *lost*, and
:func:`check_group` (called before a block is recorded) stops the writer. Generation numbers
grow with every takeover, so a holder that comes back late cannot mistake a newer lease for
its own.

A holder on the same machine (same boot and process namespace) whose process is gone is dead
at once: a capture killed with ``kill -9`` and started again resumes without waiting for the
lease to expire.

Where the lease objects are kept (a local directory, an fsspec file system) and how a store is
keyed: :mod:`store.access.lease_backends`.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zarr.storage

from ..errors import InvalidArgumentError, WriterLockedError
from .lease_backends import LEASE_DIR as LEASE_DIR
from .lease_backends import Backend, backend_for
from .lease_backends import location_key as location_key
from .lease_backends import zarr_store_key as zarr_store_key
from .location import Location, RunLock

#: Environment variable: how long a lease lasts without renewal, in seconds.
ENV_TTL = "LAYERSTATE_LEASE_SECONDS"
#: Default lease duration (seconds); renewed every third of it.
DEFAULT_TTL = 60.0
#: Lease format name.
FORMAT = "layerstate-lease/1"

_FILE = re.compile(r"^(?P<name>.+)\.g(?P<gen>\d+)\.json$")


def lease_seconds() -> float:
    """The lease duration: :data:`ENV_TTL` if set, else :data:`DEFAULT_TTL`."""
    raw = os.environ.get(ENV_TTL)
    if raw is None or raw == "":
        return DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if not ttl > 0 or ttl != ttl or ttl == float("inf"):
        raise InvalidArgumentError(
            f"{ENV_TTL}={raw!r} is not a positive number of seconds; set it to e.g. {DEFAULT_TTL:g} "
            "or unset it"
        )
    return ttl


# ---------------------------------------------------------------------- who we are
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


#: This machine as leases record it: host name, boot id and pid namespace. Two processes
#: with the same node see each other's pids, so a dead holder can be told at once.
NODE = f"{socket.gethostname()}|{_boot_id()}|{_pid_namespace()}"
HOST = socket.gethostname()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this node is running (a zombie is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- lease documents
@dataclass
class Holder:
    """A lease as stored: who holds it and until when."""

    doc: dict[str, Any]
    generation: int

    @property
    def expires(self) -> float:
        try:
            return float(self.doc.get("expires", 0))
        except (TypeError, ValueError):
            return 0.0

    @property
    def pid(self) -> int | None:
        pid = self.doc.get("pid")
        return pid if isinstance(pid, int) else None

    def live(self, now: float) -> bool:
        """Not expired, and not held by a process of this node that is gone."""
        if now >= self.expires:
            return False
        if self.doc.get("node") == NODE and self.pid is not None:
            if self.pid == os.getpid():  # this process: held only if it is registered
                return any(h.doc.get("uuid") == self.doc.get("uuid") for h in _HELD.values())
            return _alive(self.pid)
        return True

    def describe(self, now: float) -> str:
        """``another process (pid N) on host H (lease …, expires …)``."""
        host = self.doc.get("host", "?")
        where = "this host" if self.doc.get("node") == NODE else f"host {host}"
        left = self.expires - now
        return (f"another process (pid {self.pid if self.pid is not None else '?'}) on {where} "
                f"(lease {str(self.doc.get('uuid', '?'))[:8]}, generation {self.generation}, expires "
                f"{_iso(self.expires)}, in {max(left, 0):.0f} s unless renewed)")


def _parse(raw: bytes | None, gen: int) -> Holder | None:
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        doc = None
    if not isinstance(doc, dict):
        # unreadable (damaged, or being written where creation is not atomic): counts as a
        # holder that expired, so it never blocks a store for good
        doc = {"uuid": "unreadable", "expires": 0}
    return Holder(doc, gen)


# ---------------------------------------------------------------------- held leases
@dataclass
class _Held:
    backend: Backend
    key: str
    name: str
    what: str
    where: str
    ttl: float
    file: str
    generation: int
    doc: dict[str, Any]
    depth: int = 1
    lost: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


_HELD: dict[tuple[str, str], _Held] = {}
_REGISTRY = threading.RLock()


def _forget_after_fork() -> None:
    """A forked child holds none of its parent's leases (nor their renewal threads)."""
    global _REGISTRY
    _HELD.clear()
    _REGISTRY = threading.RLock()


os.register_at_fork(after_in_child=_forget_after_fork)


class Lease:
    """An exclusive lease ``name`` on a store, e.g. ``run-r0`` or ``consolidate``.

    Re-entrant within a process (a nested :meth:`acquire` of a lease this process holds
    succeeds); renewed every third of its duration by a daemon thread while held.

    Parameters
    ----------
    location
        The store.
    name
        The lease's name (letters, digits, ``_.-``).
    what
        How messages name what it protects (``"run 'r0'"``).
    ttl
        Seconds a lease lasts unrenewed; default :func:`lease_seconds`.
    """

    def __init__(self, location: Location, name: str, what: str, *, ttl: float | None = None) -> None:
        self.location = location
        self.name = name
        self.what = what
        self.ttl = lease_seconds() if ttl is None else float(ttl)
        self._key = (location_key(location), name)
        self._holding = False

    # -------------------------------------------------------------- acquire / release
    def acquire(self, *, wait: float = 0.0) -> Lease:
        """Take the lease, or raise :class:`WriterLockedError` naming its holder.

        ``wait``: seconds to keep trying while another holder has it (it may finish, or
        stop renewing and expire); 0 refuses at once.
        """
        if self._holding:
            return self
        with _REGISTRY:
            held = _HELD.get(self._key)
            if held is not None:
                held.depth += 1
                self._holding = True
                return self
        deadline = time.time() + wait
        backend = backend_for(self.location)
        delay = 0.02
        while True:
            holder = self._try(backend)
            if holder is None:
                self._holding = True
                return self
            now = time.time()
            if now >= deadline:
                raise WriterLockedError(self._refusal(holder, now, wait))
            time.sleep(min(delay, max(deadline - now, 0.0)) * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    def _refusal(self, holder: Holder, now: float, waited: float) -> str:
        if self.name.startswith("run-"):
            return (f"{self.what} in {self.location} is being written by {holder.describe(now)}; "
                    "wait for it to finish or stop it, then run again (a writer that died on "
                    "another host is taken over once its lease expires)")
        return (f"{self.what} of {self.location} is held by {holder.describe(now)}"
                f"{f' and was not released within {waited:.0f} s' if waited else ''}; wait for "
                "that process to finish or stop it, then run again")

    def _try(self, backend: Backend) -> Holder | None:
        """One attempt: None when taken, else the live holder that prevents it."""
        for _ in range(8):
            leases = self._list(backend)
            now = time.time()
            live = [h for h in leases.values() if h.live(now)]
            if live:
                return max(live, key=lambda h: h.generation)
            gen = max(leases, default=-1) + 1
            doc = self._document(gen, now)
            file = f"{self.name}.g{gen}.json"
            data = json.dumps(doc, indent=1).encode()
            if not backend.create(file, data):
                continue  # another contender took this generation: look again
            if backend.read_back:
                mine = _parse(backend.read(file), gen)
                if mine is None or mine.doc.get("uuid") != doc["uuid"]:
                    continue
            others = {g: h for g, h in self._list(backend).items() if g != gen}
            now = time.time()
            rival = [h for h in others.values() if h.live(now)]
            if rival:  # a contender that listed before we created: neither may hold both
                backend.delete(file)
                return max(rival, key=lambda h: h.generation)
            for g, h in others.items():
                if g < gen and not h.live(now):
                    backend.delete(f"{self.name}.g{g}.json")
            self._hold(backend, file, gen, doc)
            return None
        leases = self._list(backend)
        now = time.time()
        live = [h for h in leases.values() if h.live(now)]
        if live:
            return max(live, key=lambda h: h.generation)
        raise WriterLockedError(
            f"{self.what} in {self.location}: could not take its lease after 8 attempts (other "
            "writers keep taking and releasing it); run again"
        )

    def _list(self, backend: Backend) -> dict[int, Holder]:
        out: dict[int, Holder] = {}
        for entry in backend.names():
            m = _FILE.match(entry)
            if m is None or m["name"] != self.name:
                continue
            gen = int(m["gen"])
            h = _parse(backend.read(entry), gen)
            if h is not None:  # gone between the listing and the read: released
                out[gen] = h
        return out

    def _document(self, gen: int, now: float) -> dict[str, Any]:
        return {
            "format": FORMAT, "name": self.name, "what": self.what, "store": str(self.location),
            "host": HOST, "pid": os.getpid(), "node": NODE, "uuid": uuid.uuid4().hex,
            "generation": gen, "acquired": _iso(now), "renewed": _iso(now), "ttl": self.ttl,
            "expires": now + self.ttl, "expires_at": _iso(now + self.ttl),
        }

    def _hold(self, backend: Backend, file: str, gen: int, doc: dict[str, Any]) -> None:
        held = _Held(backend, self._key[0], self.name, self.what, str(self.location), self.ttl,
                     file, gen, doc)
        held.thread = threading.Thread(target=_renew_loop, args=(held,), daemon=True,
                                       name=f"layerstate-lease-{self.name}")
        with _REGISTRY:
            _HELD[self._key] = held
        held.thread.start()

    def release(self) -> None:
        """Give the lease back (the last release of a nested hold deletes it)."""
        if not self._holding:
            return
        self._holding = False
        with _REGISTRY:
            held = _HELD.get(self._key)
            if held is None:
                return
            held.depth -= 1
            if held.depth > 0:
                return
            del _HELD[self._key]
        held.stop.set()
        if held.thread is not None and held.thread is not threading.current_thread():
            held.thread.join(timeout=held.ttl)
        if held.lost is None:
            try:
                held.backend.delete(held.file)
            except OSError:
                pass  # unreachable now: the lease expires on its own

    @property
    def lost(self) -> str | None:
        """Why this process no longer holds the lease (taken over), or None."""
        held = _HELD.get(self._key)
        return None if held is None else held.lost

    def check(self) -> None:
        """Raise :class:`WriterLockedError` if the lease was lost (see :attr:`lost`)."""
        held = _HELD.get(self._key)
        if held is not None and held.lost is not None:
            raise WriterLockedError(held.lost)

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _renew_loop(held: _Held) -> None:
    while not held.stop.wait(held.ttl / 3):
        _renew(held)
        if held.lost is not None:
            return


def _renew(held: _Held) -> None:
    """Extend the lease, unless a higher generation shows it was taken over."""
    try:
        higher = _newer(held)
        if higher is None:
            now = time.time()
            held.doc = {**held.doc, "renewed": _iso(now), "expires": now + held.ttl,
                        "expires_at": _iso(now + held.ttl)}
            held.backend.overwrite(held.file, json.dumps(held.doc, indent=1).encode())
            higher = _newer(held)  # a takeover between the check and the write
        if higher is not None:
            _lose(held, f"taken over by {higher.describe(time.time())}")
    except Exception as exc:  # unreachable for now (any client error): retry until it runs out
        if time.time() >= float(held.doc["expires"]):
            _lose(held, f"not renewed in time ({type(exc).__name__}: {exc})")


def _newer(held: _Held) -> Holder | None:
    """A generation above ours, or (our file gone) a stand-in saying so."""
    names = held.backend.names()
    if held.file not in names:
        return Holder({"uuid": "?", "host": "?", "expires": 0}, held.generation)
    best = None
    for entry in names:
        m = _FILE.match(entry)
        if m is not None and m["name"] == held.name and int(m["gen"]) > held.generation:
            h = _parse(held.backend.read(entry), int(m["gen"]))
            if h is not None and (best is None or h.generation > best.generation):
                best = h
    return best


def _lose(held: _Held, why: str) -> None:
    held.lost = (f"{held.what} in {held.where}: this process lost its lease ({why}; it was paused or "
                 f"cut off for longer than the lease's {held.ttl:g} s); nothing more is recorded by "
                 "this writer: run it again (it resumes from the recorded blocks)")


#: Seconds past a lease's expiry, by this host's clock, before :func:`acquire_waiting` takes
#: over a lease of another host (two hosts' clocks differ a little).
TAKEOVER_MARGIN_S = 2.0


def acquire_waiting(lease: Lease, *, margin: float | None = None) -> Lease:
    """Take ``lease``; if a process of another host holds it, wait for that lease to expire
    (plus ``margin`` seconds, default :data:`TAKEOVER_MARGIN_S`) and take it over.

    For work run again after its process died on another host (a cluster task): that
    writer's pid cannot be checked from here, so its lease can only run out. A lease that is
    renewed while we wait has a live writer: refused as soon as a renewal is seen (or if it
    is still live when the wait ends), with :meth:`Lease.acquire`'s line. A holder on this
    host is never waited for (a dead one is taken over at once, a live one refused at once).
    :meth:`Lease.acquire`, what the library's writers call, never waits like this: a second
    writer is refused at once there.
    """
    margin = TAKEOVER_MARGIN_S if margin is None else margin
    try:
        return lease.acquire()
    except WriterLockedError:
        pass
    backend = backend_for(lease.location)
    first: Holder | None = None  # the foreign lease we wait out
    while True:
        now = time.time()
        leases = lease._list(backend)
        live = [h for h in leases.values() if h.live(now)]
        if live:
            holder = max(live, key=lambda h: h.generation)
            if holder.doc.get("node") == NODE:
                return lease.acquire()  # a live process of this host: refused at once
            if first is None:
                first = holder
        elif first is None:
            return lease.acquire()  # released meanwhile
        else:
            holder = leases.get(first.generation, first)
            if now >= first.expires + margin or holder is first:
                return lease.acquire()  # past expiry and margin (or released): taken over
        if holder.doc.get("uuid") != first.doc.get("uuid") or holder.expires > first.expires:
            raise WriterLockedError(lease._refusal(holder, now, 0.0))  # renewed: a live writer
        ttl = first.doc.get("ttl")
        ttl = float(ttl) if isinstance(ttl, (int, float)) and ttl > 0 else lease.ttl
        # a live holder renews every third of its ttl: look often enough to see it
        time.sleep(max(0.0, min(first.expires + margin - now, 0.05 + min(1.0, ttl / 6))))


def holding(key: str, name: str) -> bool:
    """Whether this process holds lease ``name`` of the store keyed ``key``."""
    return (key, name) in _HELD


def check_group(grp: zarr.Group) -> None:
    """Before recording a block of a length group: refuse if this process holds its run's
    lease and lost it (:class:`WriterLockedError`, one line). Nothing to do otherwise."""
    parts = grp.path.split("/")
    if len(parts) < 2 or parts[0] != "runs":
        return
    key = zarr_store_key(grp.store_path.store)
    if key is None:
        return
    held = _HELD.get((key, f"run-{parts[1]}"))
    if held is not None and held.lost is not None:
        raise WriterLockedError(held.lost)


def live_leases(location: Location) -> list[str]:
    """One line per live lease of a store (who holds what, until when); empty when no
    writer or consolidation is running. For tools that must not act under a writer."""
    if location.is_zip or location.url.startswith(("http://", "https://")):
        return []
    backend = backend_for(location)
    now = time.time()
    out = []
    for entry in sorted(backend.names()):
        m = _FILE.match(entry)
        if m is None:
            continue
        h = _parse(backend.read(entry), int(m["gen"]))
        if h is not None and h.live(now):
            who = h.describe(now).replace("another process", "process", 1)
            out.append(f"{h.doc.get('what', m['name'])}: held by {who}")
    return out


def run_lease(location: Location, run_id: str) -> Lease:
    """The lease a writer of run ``run_id`` holds (S41)."""
    return Lease(location, f"run-{run_id}", f"run {run_id!r}")


def consolidation_lease(location: Location) -> Lease:
    """The lease a consolidation holds (S40)."""
    return Lease(location, "consolidate", "the consolidated metadata")


class RunLease(RunLock):
    """The writer lock of one run: its lease in the store (S41), which holds across
    processes, hosts and object stores, and the local ``flock`` of :class:`RunLock` (S26),
    which ``repair`` looks for. Re-entrant within a process, like :class:`RunLock`."""

    def __init__(self, location: Location, run_id: str) -> None:
        super().__init__(location, run_id)
        self.lease = run_lease(location, run_id)

    def acquire(self) -> RunLease:
        self.lease.acquire()  # refused: one line naming the holder and when its lease expires
        try:
            super().acquire()
        except BaseException:
            self.lease.release()
            raise
        return self

    def release(self) -> None:
        try:
            super().release()
        finally:
            self.lease.release()

    def __enter__(self) -> RunLease:
        return self.acquire()
