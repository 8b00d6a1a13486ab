"""Activations in files: safetensors files and directories of ``.npy`` arrays.

Both hold ``(sequence, position, d)`` arrays by name, one per layer (plus, optionally,
``tokens`` / ``token_ids`` / ``input_ids`` and ``logits``); several files are batches of
sequences in file-name order (natural: ``part_2`` before ``part_10``), every file with the
same names. Names become layers by :func:`~capture.importers.common.named_plan` (given
``layers=``, else TransformerLens hook names, else ``embed, L0, …``); ``plan=`` overrides.

Every file's header is read and checked before anything is written; each block of sequences
is then read on its own (safetensors slices, memory-mapped ``.npy``), so memory stays
bounded and a resumed import reads only the blocks not yet recorded. ``.npy`` files are
opened with ``allow_pickle=False``.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, TypeVar, Unpack

import numpy as np

from store import InvalidArrayError, MissingError, Store
from store.errors import MissingFileError

from .common import Arrays, ImportOptions, ImportResult, RunInfo, natural, options_plan, write_with
from .registry import register_format

E = TypeVar("E")


class _Files(abc.ABC, Generic[E]):
    """A ranged source over several files (batches), each holding every name; ``places`` are
    the batches (a file, a directory), each one's header read and checked (:meth:`_header`)
    before anything is written. ``layout[i]`` maps a name to where batch i holds it (``E``,
    each format's own)."""

    def __init__(self, places: list[Path], what: str) -> None:
        self.places = places
        self.layout: list[dict[str, E]] = []
        parts = []
        for place in places:
            layout, shapes = self._header(place)
            self.layout.append(layout)
            parts.append(shapes)
        self.what, self.parts, self.names = what, parts, sorted(parts[0], key=natural)

    @abc.abstractmethod
    def _header(self, place: Path) -> tuple[dict[str, E], dict[str, tuple[int, ...]]]:
        """Where one batch holds each name, and each name's shape (implemented by each file
        format)."""

    def check(self, names: Sequence[str]) -> None:
        """Every file holds ``names`` with agreeing shapes; sets the sequence offsets."""
        ref = self.parts[0]
        for i, shapes in enumerate(self.parts):
            missing = [n for n in names if n not in shapes]
            if missing:
                had = " (the first file has it)" if i and missing[0] in ref else ""
                raise MissingError(f"{self.part_name(i)}: hook {missing[0]!r} is missing{had}")
            for n in names:
                if shapes[n][1:] != ref[n][1:]:
                    raise InvalidArrayError(f"{self.part_name(i)}: hook {n!r} has shape {shapes[n]}, the "
                                            f"first file {ref[n]}: positions and widths must agree")
            counts = {n: shapes[n][0] for n in names}
            if len(set(counts.values())) > 1:
                lo, hi = min(counts.items(), key=lambda kv: kv[1]), max(counts.items(), key=lambda kv: kv[1])
                raise InvalidArrayError(f"{self.part_name(i)}: hook {lo[0]!r} has {lo[1]} sequences "
                                        f"but {hi[0]!r} has {hi[1]}")
        self.starts = [0]
        for shapes in self.parts:
            self.starts.append(self.starts[-1] + shapes[names[0]][0])
        self.n_sequences = self.starts[-1]
        self.shapes = {n: (self.n_sequences, *ref[n][1:]) for n in names}

    def part_name(self, i: int) -> str:
        return str(self.places[i])

    @property
    def fingerprint(self) -> str:
        """Identifies the files (recorded with an import, compared when it resumes): each
        one's size, header and first and last 64 KiB, so a moved file still matches."""
        return fingerprint(self.files())

    @abc.abstractmethod
    def files(self) -> list[Path]:
        """Implemented by each file format."""

    @abc.abstractmethod
    def _slice(self, i: int, name: str, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """Implemented by each file format."""

    @abc.abstractmethod
    def dtype(self, name: str) -> np.dtype:
        """Implemented by each file format."""

    def read_into(self, name: str, start: int, stop: int, out: np.ndarray) -> None:
        """Rows ``[start, stop)`` of ``name`` read straight into ``out`` (contiguous, the
        source's dtype, shape ``(stop - start, …)``)."""
        for i in range(len(self.parts)):
            a, b = self.starts[i], self.starts[i + 1]
            lo, hi = max(start, a), min(stop, b)
            if lo < hi:
                piece = out[lo - start:hi - start].reshape(hi - lo, *self.parts[i][name][1:])
                got = self._slice(i, name, lo - a, hi - a, piece)
                if got is not piece:
                    piece[...] = got

    def read(self, names: Sequence[str], start: int, stop: int) -> Arrays:
        out: dict[str, list[np.ndarray]] = {n: [] for n in names}
        for i in range(len(self.parts)):
            a, b = self.starts[i], self.starts[i + 1]
            lo, hi = max(start, a), min(stop, b)
            if lo < hi:
                for n in names:
                    out[n].append(self._slice(i, n, lo - a, hi - a))
        return {n: v[0] if len(v) == 1 else np.concatenate(v) for n, v in out.items()}


#: safetensors dtype codes (the format's header) -> numpy; BF16 is widened on read.
_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}


def _pread(path: Path, offset: int, dtype: np.dtype, shape: tuple[int, ...],
           out: np.ndarray | None = None) -> np.ndarray:
    """``shape`` values of ``dtype`` at ``offset`` of ``path``, read straight into ``out`` (a
    contiguous array) or a new array: one copy from the kernel (a memory map faults page by
    page and was 3x slower)."""
    out = np.empty(shape, dtype) if out is None else out
    view = out.reshape(-1).view(np.uint8).data
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset)
        got = 0
        while got < len(view):
            n = fh.readinto(view[got:])
            if not n:
                raise InvalidArrayError(f"{path} is truncated ({got + offset} bytes, needed {offset + len(view)})")
            got += n
    return out


class SafetensorsSource(_Files[tuple[str, int]]):
    """safetensors files: each header read and checked here (the format is an 8-byte length,
    a JSON header, then the raw tensors), blocks of rows read by offset; a layout entry is
    (dtype code, data offset)."""

    def _header(self, place: Path) -> tuple[dict[str, tuple[str, int]], dict[str, tuple[int, ...]]]:
        try:
            return _safetensors_header(place)
        except InvalidArrayError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidArrayError(f"{place} is not a safetensors file ({type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''})") from None

    def files(self) -> list[Path]:
        return list(self.places)

    def dtype(self, name: str) -> np.dtype:
        code = self.layout[0][name][0]
        return np.dtype("float32" if code == "BF16" else _ST_DTYPES[code])

    def _slice(self, i: int, name: str, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        code, start = self.layout[i][name]
        shape = self.parts[i][name]
        dtype = np.dtype(_ST_DTYPES[code])
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        if code == "BF16":
            out = None
        out = _pread(self.places[i], start + lo * row, dtype, (hi - lo, *shape[1:]), out)
        if code == "BF16":  # the top half of a float32
            return (out.astype(np.uint32) << 16).view(np.float32)
        return out


def _safetensors_header(p: Path) -> tuple[dict[str, tuple[str, int]], dict[str, tuple[int, ...]]]:
    """Each tensor's (dtype code, absolute data offset) and shape, every entry checked
    against the file: its byte range lies inside the data and matches its shape and dtype,
    so every later read by offset stays inside the tensor it names."""
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError("shorter than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise ValueError(f"header length {n} exceeds the file ({size} bytes)")
        header = json.loads(fh.read(n))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    data = size - 8 - n
    layout, shapes = {}, {}
    for k, info in header.items():
        if k == "__metadata__":
            continue
        code, shape, (a, b) = info["dtype"], [int(x) for x in info["shape"]], info["data_offsets"]
        if code not in _ST_DTYPES:
            raise InvalidArrayError(f"{p}: {k!r} has dtype {code}, which numpy cannot hold")
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_ST_DTYPES[code]).itemsize
        if not 0 <= int(a) <= int(b) <= data or int(b) - int(a) != want:
            raise ValueError(f"{k!r}: bytes [{a}, {b}) do not hold {code} {shape} inside {data} data bytes")
        layout[k] = (code, 8 + n + int(a))
        shapes[k] = tuple(shape)
    return layout, shapes


class NpySource(_Files[tuple[Path, np.dtype, int, bool]]):
    """A directory of ``<name>.npy`` files (one batch), or of such directories (batches);
    headers read with ``allow_pickle=False`` semantics (object arrays refused), rows by offset;
    a layout entry is (file, dtype, data offset, Fortran order)."""

    def _header(self, place: Path) -> tuple[dict[str, tuple[Path, np.dtype, int, bool]],
                                            dict[str, tuple[int, ...]]]:
        layout, shapes = {}, {}
        for f in sorted(place.glob("*.npy")):
            try:
                with open(f, "rb") as fh:
                    version = np.lib.format.read_magic(fh)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read_header(fh)
                    offset = fh.tell()
            except ValueError as exc:
                raise InvalidArrayError(f"{f} is not a .npy file ({exc})") from None
            if dtype.hasobject:
                raise InvalidArrayError(f"{f} holds Python objects, which need pickle: refused")
            layout[f.stem] = (f, dtype, offset, fortran)
            shapes[f.stem] = tuple(shape)
        if not layout:
            raise MissingError(f"{place} holds no .npy files")
        return layout, shapes

    def files(self) -> list[Path]:
        return [f for layout in self.layout for f, _dt, _off, _fortran in layout.values()]

    def dtype(self, name: str) -> np.dtype:
        return self.layout[0][name][1]

    def _slice(self, i: int, name: str, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        path, dtype, offset, fortran = self.layout[i][name]
        shape = self.parts[i][name]
        if fortran:  # column-major: rows are not contiguous
            got = np.asarray(np.load(path, mmap_mode="r", allow_pickle=False)[lo:hi])
            if out is not None:
                out[...] = got
            return got
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        return _pread(path, offset + lo * row, dtype, (hi - lo, *shape[1:]), out)


def fingerprint(paths: Sequence[Path], edge: int = 64 * 2**10) -> str:
    """A digest of each file's name, size and first and last ``edge`` bytes (two reads per
    file, not the whole file: it tells sources apart, it does not check their contents)."""
    h = hashlib.sha256()
    for p in paths:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(edge)
            fh.seek(max(0, size - edge))
            tail = fh.read(edge)
        h.update(f"{p.name}\0{size}\0".encode())
        h.update(hashlib.sha256(head + tail).digest())
    return h.hexdigest()[:32]


def safetensors_files(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"), key=lambda f: natural(f.name))
        if not files:
            raise MissingError(f"{p} holds no .safetensors files")
        return files
    if not p.exists():
        raise MissingFileError(f"{p} does not exist; give the path of a .safetensors file or of a "
                               "directory holding them")
    return [p]


def npy_dirs(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    if not p.is_dir():
        raise InvalidArrayError(f"{p} is not a directory of .npy files") if p.exists() else FileNotFoundError(
            f"{p} does not exist")
    if any(p.glob("*.npy")):
        return [p]
    subs = sorted((d for d in p.iterdir() if d.is_dir() and any(d.glob("*.npy"))), key=lambda d: natural(d.name))
    if not subs:
        raise MissingError(f"{p} holds no .npy files (nor directories of them)")
    return subs


def _import(source: _Files, store: Store | str, run: RunInfo | str, fmt: str,
            options: ImportOptions) -> ImportResult:
    plan = options_plan(source.names, options)
    source.check(plan.names())
    return write_with(store, run, source, plan, options, fmt=fmt, arch="unknown")


def import_safetensors(store: Store | str, run: RunInfo | str, path: str | os.PathLike[str], *,
                       fmt: str = "safetensors", **options: Unpack[ImportOptions]) -> ImportResult:
    """Import a safetensors file, or a directory of them (batches in name order); keywords:
    :class:`~capture.importers.writer.ImportOptions`."""
    files = safetensors_files(path)
    return _import(SafetensorsSource(files, str(path)), store, run, fmt, options)


def import_npy(store: Store | str, run: RunInfo | str, path: str | os.PathLike[str],
               **options: Unpack[ImportOptions]) -> ImportResult:
    """Import a directory of ``<layer>.npy`` files (or a directory of such directories);
    keywords: :class:`~capture.importers.writer.ImportOptions`."""
    return _import(NpySource(npy_dirs(path), str(path)), store, run, "npy", options)


@register_format("safetensors", "a safetensors file, or a directory of them (one per batch), name -> array")
def read_safetensors(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
                     options: ImportOptions) -> ImportResult:
    """The ``safetensors`` format: :func:`import_safetensors`."""
    return _import(SafetensorsSource(safetensors_files(source), str(source)), store, run, "safetensors",
                   options)


@register_format("npy", "a directory of <layer>.npy files, or a directory of such directories")
def read_npy(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
             options: ImportOptions) -> ImportResult:
    """The ``npy`` format: :func:`import_npy`."""
    return _import(NpySource(npy_dirs(source), str(source)), store, run, "npy", options)
