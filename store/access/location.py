"""Where a store lives: a local directory, a zip file, or any fsspec URL.

One :class:`Location` hands out the zarr store object for reading or writing and the
filesystem view that ``pack``, ``inspect`` (sizes) and ``validate`` (chunk existence) need.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import zarr.abc.store
import zarr.storage

from ..errors import MissingDependencyError, UnsafeArchiveError, WriterLockedError
from ..metadata.digests import GuardedFsspecStore, GuardedLocalStore, GuardedZipStore


@dataclass
class Location:
    """A store's address, resolved once.

    Parameters
    ----------
    url
        A directory path, a ``.zip`` file, or an fsspec URL (``s3://bucket/x``, ``memory://x``).
    storage_options
        Passed to fsspec for remote URLs (credentials, ``client_kwargs={"endpoint_url": …}``).
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.url = os.fspath(self.url)
        if self.url.startswith("zip::"):
            self.url = self.url[len("zip::") :]

    @property
    def is_zip(self) -> bool:
        return self.url.endswith(".zip")

    @property
    def is_local(self) -> bool:
        return "://" not in self.url or self.url.startswith("file://")

    @property
    def local_path(self) -> Path:
        return Path(self.url.removeprefix("file://")).resolve()

    def filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """The fsspec filesystem and root path of a directory-like store."""
        if self.is_local:
            return fsspec.filesystem("file"), str(self.local_path)
        with self._needs_packages():
            fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        return fs, root

    @contextlib.contextmanager
    def _needs_packages(self) -> Iterator[None]:
        """fsspec's ImportError for a protocol (HTTP needs aiohttp, s3 s3fs) as one line."""
        try:
            yield
        except ImportError as exc:
            protocol = self.url.split("://", 1)[0]
            raise MissingDependencyError(
                f"{self.url}: reading {protocol}:// stores needs a package that is not installed "
                f"({exc}); install it, e.g. pip install 'fsspec[{protocol}]'"
            ) from None

    def exists(self) -> bool:
        if self.is_local:
            return self.local_path.exists()
        fs, root = self.filesystem()
        # a static web server may answer nothing for a directory, yet serve its files
        return fs.exists(root) or fs.exists(f"{root.rstrip('/')}/zarr.json")

    def zarr_store(self, read_only: bool, *, guarded: bool = True) -> zarr.abc.store.Store:
        """A zarr store object for this location.

        ``guarded`` (the default): every ``zarr.json`` zarr reads through it is parsed first,
        so damaged metadata fails naming its file (:mod:`store.metadata.digests`); ``validate`` and
        ``repair`` read the raw files with ``guarded=False``.
        """
        zs: Any
        if self.is_zip:
            if not read_only:
                raise ValueError(
                    f"{self.url} is a packed (zip) store, which is write-once; "
                    "unpack it with `layerstate unpack` to add to it"
                )
            check_zip_members(self.local_path)
            zip_cls = GuardedZipStore if guarded else zarr.storage.ZipStore
            zs = zip_cls(self.local_path, mode="r")
        elif self.is_local:
            local_cls = GuardedLocalStore if guarded else zarr.storage.LocalStore
            zs = local_cls(self.local_path, read_only=read_only)
        else:
            fs_cls = GuardedFsspecStore if guarded else zarr.storage.FsspecStore
            with self._needs_packages():
                zs = fs_cls.from_url(self.url, storage_options=self.storage_options or None,
                                     read_only=read_only)
        if guarded:
            zs.where = self.url
        return zs

    def missing(self) -> str:
        """One line for a store path that does not exist: the closest names beside it (a
        misspelled ``acts.zip``), else what a store path looks like."""
        what = ("check the path: a store is a directory made by `layerstate capture` (or `layerstate run`, "
                "inside its --out folder) or a .zip made by `layerstate pack`")
        if not self.is_local:
            return f"{self} does not exist; {what}"
        path = Path(self.url.removeprefix("file://"))
        parent = path.parent if str(path.parent) else Path(".")
        try:
            names = [p.name for p in parent.iterdir()] if parent.is_dir() else []
        except OSError:
            names = []
        close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
        if close:
            shown = " or ".join(str(parent / c) if str(parent) != "." else c for c in close)
            return f"{self} does not exist; did you mean {shown}?"
        return f"{self} does not exist; {what}"

    def not_a_store(self) -> str:
        """One line for a path that holds no store: the stores inside it where it is a folder
        that holds some (a run's --out folder holds ``store.zarr``), else what a store is."""
        inside = self.stores_inside()
        if inside:
            return (f"{self} is a folder, not a store; the store in it is "
                    + " or ".join(str(p) for p in inside))
        return (f"{self} is not a layerstate store (no Zarr v3 group at its root); "
                "point at a directory made by `layerstate capture` or a file made by `layerstate pack`")

    def stores_inside(self) -> list[Path]:
        """The stores directly inside a local folder (a Zarr v3 root, or a .zip), for the
        error that points at them."""
        if not self.is_local or not self.local_path.is_dir():
            return []
        try:
            children = sorted(self.local_path.iterdir())
        except OSError:
            return []
        shown = Path(self.url.removeprefix("file://"))
        return [shown / c.name for c in children
                if (c.is_dir() and (c / "zarr.json").is_file()) or (c.is_file() and c.suffix == ".zip")]

    def __str__(self) -> str:
        return self.url


def check_zip_members(path: Path) -> None:
    """Refuse archives whose member names are absolute or climb out with ``..``."""
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            parts = name.replace("\\", "/").split("/")
            if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
                raise UnsafeArchiveError(
                    f"{path}: archive member {name!r} escapes the store root (path traversal); "
                    "refusing to read it — re-pack the store with `layerstate pack`"
                )


class RunLock:
    """An exclusive, per-run writer lock that dies with its process.

    ``fcntl.flock`` on a file in the temp directory keyed by (store, run): a writer killed
    with ``kill -9`` releases it automatically, so a restarted capture can resume, while a
    second live writer is refused. Object stores on other hosts are not covered (documented).
    """

    def __init__(self, location: Location, run_id: str) -> None:
        key = hashlib.sha256(f"{location.local_path if location.is_local else location.url}\0{run_id}".encode()).hexdigest()[:24]
        lock_dir = Path(tempfile.gettempdir()) / "layerstate-locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.path = lock_dir / f"{key}.lock"
        self.run_id = run_id
        self.location = location
        self._fd: int | None = None

    _held: dict[str, list] = {}  # path -> [fd, depth]: re-entrant within one process

    def acquire(self) -> RunLock:
        held = RunLock._held.get(str(self.path))
        if held is not None:
            held[1] += 1
            self._fd = held[0]
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WriterLockedError(
                f"run {self.run_id!r} in {self.location} is being written by another process "
                f"(pid {holder}); wait for it to finish or stop it, then run again"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        RunLock._held[str(self.path)] = [fd, 1]
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        held = RunLock._held.get(str(self.path))
        self._fd = None
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del RunLock._held[str(self.path)]
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
