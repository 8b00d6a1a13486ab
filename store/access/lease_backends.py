"""Where leases live: the lease directory of one store, on a local or network file system or an
fsspec file system (S3, GCS, memory, ...), and the key that names a store across handles.

Each backend offers an exclusive create, read, overwrite, delete and list; :mod:`store.access.lease`
builds the lease protocol on them (docs/store-format.md, "Concurrent writers").
"""

from __future__ import annotations

import abc
import errno
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
import zarr.storage

from ..errors import InvalidArgumentError
from .location import Location

#: Directory (prefix) of the lease objects, beside the root's ``zarr.json``.
LEASE_DIR = "layerstate-leases"


class Backend(abc.ABC):
    """The lease directory of one store: exclusive create, read, overwrite, delete, list."""

    #: how a lease is created exclusively (docs/store-format.md, "Concurrent writers")
    kind = ""
    #: whether a created lease must be read back to know it is ours (create not atomic)
    read_back = False

    @abc.abstractmethod
    def create(self, name: str, data: bytes) -> bool:  # False: the name exists
        """Implemented by each backend."""

    @abc.abstractmethod
    def read(self, name: str) -> bytes | None:
        """Implemented by each backend."""

    @abc.abstractmethod
    def overwrite(self, name: str, data: bytes) -> None:
        """Implemented by each backend."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Implemented by each backend."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Implemented by each backend."""


class _LocalBackend(Backend):
    """A directory on a local or network file system: a finished temporary file hard-linked
    to the lease's name (atomic, also over NFS); ``O_CREAT | O_EXCL`` where links fail."""

    kind = "link"

    def __init__(self, root: Path) -> None:
        self.dir = root / LEASE_DIR

    def _tmp(self, data: bytes) -> Path:
        self.dir.mkdir(exist_ok=True)
        tmp = self.dir / f".tmp-{uuid.uuid4().hex}"
        tmp.write_bytes(data)
        return tmp

    def create(self, name: str, data: bytes) -> bool:
        for _ in range(5):  # the directory may be removed by a release between the two steps
            try:
                tmp = self._tmp(data)
            except FileNotFoundError:
                continue
            try:
                os.link(tmp, self.dir / name)
                return True
            except FileExistsError:
                return False
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK,
                                     errno.EXDEV, errno.ENOSYS):
                    raise
                return self._create_excl(name, data)  # a file system without hard links
            finally:
                tmp.unlink(missing_ok=True)
        return False

    def _create_excl(self, name: str, data: bytes) -> bool:
        try:
            fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def read(self, name: str) -> bytes | None:
        try:
            return (self.dir / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def overwrite(self, name: str, data: bytes) -> None:
        tmp = self._tmp(data)
        try:
            os.replace(tmp, self.dir / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def delete(self, name: str) -> None:
        (self.dir / name).unlink(missing_ok=True)
        try:
            self.dir.rmdir()  # only when empty: a store without writers holds no lease directory
        except OSError:
            pass

    def names(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except (FileNotFoundError, NotADirectoryError):
            return []


class _FsspecBackend(Backend):
    """An fsspec file system (S3, GCS, memory, …). S3 creates with a conditional PUT
    (``If-None-Match: *``, atomic on AWS S3); other file systems check, then write. Either
    way the lease is read back (one GET): on a server that ignores the condition, or
    without one, a race between two creators is narrowed, not excluded."""

    read_back = True

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.fs = fs
        self.dir = f"{root.rstrip('/')}/{LEASE_DIR}"
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self.kind = "conditional-put" if "s3" in protocols or "s3a" in protocols else "check-then-write"

    def _path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def create(self, name: str, data: bytes) -> bool:
        path = self._path(name)
        try:
            self.fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except OSError:
            # a refused condition that the client did not translate: the object is there
            if self.read(name) is not None:
                return False
            raise

    def read(self, name: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(name)))
        except FileNotFoundError:
            return None

    def overwrite(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(name), data)

    def delete(self, name: str) -> None:
        try:
            self.fs.rm_file(self._path(name))
        except FileNotFoundError:
            pass

    def names(self) -> list[str]:
        try:
            self.fs.invalidate_cache(self.dir)
            found = self.fs.ls(self.dir, detail=False, refresh=True)
        except TypeError:  # file systems whose ls takes no refresh
            found = self.fs.ls(self.dir, detail=False)
        except FileNotFoundError:
            return []
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in found]


def backend_for(location: Location) -> Backend:
    if location.is_zip:
        raise InvalidArgumentError(f"{location} is a packed (zip) store: it is read-only and takes no writer")
    if location.is_local:
        return _LocalBackend(location.local_path)
    fs, root = location.filesystem()
    return _FsspecBackend(fs, root)


def location_key(location: Location) -> str:
    """The store as leases key it: its absolute local path, or ``protocol://path``."""
    if location.is_local:
        return str(location.local_path)
    fs, root = location.filesystem()
    return _fs_key(fs, root)


def _fs_key(fs: Any, root: str) -> str:
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{proto}://{root.rstrip('/')}"


def zarr_store_key(zs: Any) -> str | None:
    """:func:`location_key` of the store a zarr store object reads (None if it cannot be told)."""
    if isinstance(zs, zarr.storage.LocalStore):
        return str(Path(zs.root).resolve())
    fs, path = getattr(zs, "fs", None), getattr(zs, "path", None)
    if fs is not None and isinstance(path, str):
        return _fs_key(fs, path)
    inner = getattr(zs, "_store", None)  # a wrapper store
    return None if inner is None else zarr_store_key(inner)
