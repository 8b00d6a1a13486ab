"""One end of a copy (:class:`Side`): raw bytes by store key, through fsspec, plain files when
local, each local file written under a temporary name and renamed. Shared by the transfer
modules (plan, chunks, resume), which import it from here, not from :mod:`store.sharing.transfer`."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec.asyn

from ..access.location import Location
from ..errors import TransferError


class Side:
    """One end of a copy: raw bytes by store key, through fsspec (plain files when local)."""

    def __init__(self, loc: Location) -> None:
        self.loc = loc
        try:
            self.fs, root = loc.filesystem()
        except Exception as exc:  # an unknown protocol, a missing fsspec backend, bad options
            raise TransferError(f"cannot use {loc}: {type(exc).__name__}: {first_line(exc)}") from None
        self.root = root.rstrip("/")
        self.local = loc.is_local

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def get(self, key: str) -> bytes | None:
        return self.fetch([key])[key]

    def fetch(self, keys: list[str]) -> dict[str, bytes | None]:
        """Bodies by key (None where absent); several at once on remote filesystems."""
        if self.local:
            out: dict[str, bytes | None] = {}
            for k in keys:
                try:
                    out[k] = Path(self.path(k)).read_bytes()
                except (FileNotFoundError, NotADirectoryError):
                    out[k] = None
            return out
        paths = [self.path(k) for k in keys]
        try:
            got = self._cat(paths)
        except Exception as exc:
            raise TransferError(f"cannot read {self.loc}: {type(exc).__name__}: {first_line(exc)}") from None
        out = {}
        for k, p in zip(keys, paths, strict=True):
            body = got[p]
            if isinstance(body, FileNotFoundError) or body is None:
                out[k] = None
            elif isinstance(body, BaseException):
                raise TransferError(f"cannot read {self.loc}/{k}: {type(body).__name__}: "
                                    f"{first_line(body)}")
            else:
                out[k] = bytes(body)
        return out

    def _cat(self, paths: list[str]) -> dict[str, Any]:
        """Each object's body (or the exception reading it raised): one GET per object,
        all at once on async filesystems (``fs.cat`` of a list asks for each object's size
        first, doubling the requests)."""
        if getattr(self.fs, "async_impl", False):
            async def one(p: str) -> Any:
                try:
                    return await self.fs._cat_file(p)
                except Exception as exc:  # returned, so the caller names the object
                    return exc

            async def every() -> list[Any]:
                return await asyncio.gather(*(one(p) for p in paths))

            return dict(zip(paths, fsspec.asyn.sync(self.fs.loop, every), strict=True))
        out: dict[str, Any] = {}
        for p in paths:
            try:
                out[p] = self.fs.cat_file(p)
            except Exception as exc:
                out[p] = exc
        return out

    def put_many(self, items: dict[str, bytes]) -> None:
        if not items:
            return
        if self.local:
            for k, data in items.items():
                _write_file(Path(self.path(k)), data)
            return
        try:
            self.fs.pipe({self.path(k): v for k, v in items.items()})
        except Exception as exc:
            raise TransferError(f"cannot write to {self.loc}: {type(exc).__name__}: {first_line(exc)}") from None

    def put(self, key: str, data: bytes) -> None:
        self.put_many({key: data})

    def delete(self, key: str) -> None:
        if self.local:
            Path(self.path(key)).unlink(missing_ok=True)
            return
        if self.fs.exists(self.path(key)):
            self.fs.rm(self.path(key))

    def exists(self) -> bool:
        try:
            return self.loc.exists()
        except Exception:
            return False

    def sizes(self) -> dict[str, int]:
        """Every key under the root with its size (one listing)."""
        if self.local:
            base = Path(self.root)
            if not base.exists():
                return {}
            out = {}
            for dirpath, _dirs, files in os.walk(base):
                for name in files:
                    if name.endswith(".partial"):
                        continue
                    p = Path(dirpath) / name
                    out[p.relative_to(base).as_posix()] = p.stat().st_size
            return out
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return {}
        strip = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        return {p[len(strip):]: int(info.get("size") or 0) for p, info in found.items()
                if p.startswith(strip)}


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` under a temporary name and rename it: a kill leaves no torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def first_line(exc: BaseException) -> str:
    """An exception's first line (its type when it has no text): for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
