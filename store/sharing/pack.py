"""Sharing: one zip file that every reader opens directly, and safe unpacking."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ..access.lease import LEASE_DIR
from ..access.location import Location, check_zip_members
from ..core import Store
from ..errors import InvalidArgumentError, NotAStoreError, RunConflictError, UnsafeArchiveError


def pack(store: Store, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the whole store into one uncompressed zip (chunks are copied byte for byte).

    The zip is written beside ``out`` and renamed into place when complete, so an
    interrupted pack never leaves a half-written file under the final name.
    """
    out = Path(out)
    if out.suffix != ".zip":
        raise InvalidArgumentError(
            f"pack output must end in .zip, got {out.name!r}; name the file like {out.stem or 'store'}.zip"
        )
    if out.exists() and not overwrite:
        raise RunConflictError(f"{out} exists; choose another name or pass --force to replace it")
    if not store.read_only:
        store.consolidate()
    fs, root = store.location.filesystem()
    if store.location.is_zip:
        raise InvalidArgumentError(
            f"{store.location} is already a packed store; copy the zip, or unpack it with "
            "`layerstate unpack` to pack a changed copy"
        )
    tmp = out.with_name(f".{out.name}.partial")
    root = root.rstrip("/")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for path in sorted(fs.find(root)):
            rel = path[len(root) + 1 :]
            if rel.split("/", 1)[0] == LEASE_DIR:  # writers' leases belong to this copy only
                continue
            zf.writestr(rel, fs.cat_file(path))
    os.replace(tmp, out)
    return out


def unpack(archive: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Extract a packed store into a new directory, refusing members that escape it."""
    archive, target = Path(archive), Path(target)
    if target.exists():
        raise RunConflictError(f"{target} exists; unpack into a new directory")
    try:
        check_zip_members(archive)
    except zipfile.BadZipFile:
        raise NotAStoreError(
            f"{archive} is not a zip file; unpack a file written by `layerstate pack`"
        ) from None
    root = target.resolve()
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            dest = (root / name).resolve()
            if root not in dest.parents and dest != root:
                raise UnsafeArchiveError(f"{archive}: member {name!r} escapes {target}; refusing")
        zf.extractall(root)
    Store.open(Location(str(root)).url)  # prove it opens
    return root
