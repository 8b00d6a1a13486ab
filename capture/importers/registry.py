"""The import formats, each registered by the module that reads it.

A format is a name, a reader (``store, run, source, options -> ImportResult``, the options
being :class:`~capture.importers.writer.ImportOptions`) and one line saying what it reads.
``layerstate import FORMAT`` and its help read this table, so a new importer is one module
that calls :func:`register_format` (docs/guide/extending.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from store import Store
from store.errors import InvalidArgumentError

from .plans import RunInfo
from .writer import ImportOptions, ImportResult

Reader: TypeAlias = Callable[[Store | str, RunInfo | str, str | os.PathLike[str], ImportOptions], ImportResult]


@dataclass(frozen=True)
class ImportFormat:
    """One format ``layerstate import`` reads."""

    name: str
    read: Reader
    what: str


_FORMATS: dict[str, ImportFormat] = {}


def register_format(name: str, what: str) -> Callable[[Reader], Reader]:
    """Register the decorated reader as format ``name`` (``what``: one line for the help).

    A name already taken by another reader is refused: two formats cannot share a name."""

    def add(read: Reader) -> Reader:
        known = _FORMATS.get(name)
        if known is not None and known.read is not read:
            raise ValueError(f"import format {name!r} is already registered (by {known.read.__module__}); "
                             "choose another name")
        _FORMATS[name] = ImportFormat(name, read, what)
        return read

    return add


def formats() -> tuple[ImportFormat, ...]:
    """The registered formats, by name."""
    return tuple(_FORMATS[name] for name in sorted(_FORMATS))


def import_source(fmt: str, source: str | os.PathLike[str], store: Store | str, run: RunInfo | str,
                  options: ImportOptions | None = None) -> ImportResult:
    """``layerstate import FORMAT SOURCE STORE``: ``source`` read by format ``fmt`` into
    ``store`` under ``run`` (a :class:`RunInfo`, or a run id whose fields ``options`` gives)."""
    known = _FORMATS.get(fmt)
    if known is None:
        raise InvalidArgumentError(f"unknown import format {fmt!r}; formats: {', '.join(sorted(_FORMATS))} "
                                   "(docs/guide/importers.md)")
    return known.read(store, run, source, ImportOptions(**(options or {})))
