"""Errors raised by the store.

Every error is one line that names the problem and says how to fix it; the command line
turns any :class:`LayerstateError` into that line and exit code 2. They subclass the builtin
that fits (``ValueError``, ``KeyError``, ...) so plain ``except ValueError`` still works.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from typing import Any


class LayerstateError(Exception):
    """Base of every error layerstate reports to a user as a one-line message."""

    def __str__(self) -> str:  # KeyError would otherwise repr() its message
        return str(self.args[0]) if self.args else ""


class NotAStoreError(LayerstateError, FileNotFoundError):
    """The path exists but holds no layerstate store (or does not exist)."""


class MissingFileError(LayerstateError, FileNotFoundError):
    """A file or directory given as input (activations, labels, a dataset) does not exist."""


class SchemaVersionError(LayerstateError, ValueError):
    """The store was written by a newer (or unknown) schema version."""


class MissingError(LayerstateError, KeyError):
    """A run, length, label or result asked for is not in the store."""


class InvalidArrayError(LayerstateError, ValueError):
    """Arrays handed to the store (or to an analysis) have wrong dims, shapes, dtypes or values."""


class InvalidArgumentError(LayerstateError, ValueError):
    """A value given to a command, function or experiment setting is outside what it accepts
    (an unknown choice, a number out of range, two settings that cannot go together)."""


class InvalidTypeError(LayerstateError, TypeError):
    """A value given to a function has the wrong type (e.g. a numpy array where an
    ``xarray.DataArray`` with named dims is expected); the message says how to convert it."""


class RunConflictError(LayerstateError, ValueError):
    """A write would change an existing run (a different config) or collide with another writer."""


class WriterLockedError(LayerstateError, RuntimeError):
    """Another process is writing the same run."""


class CorruptStoreError(LayerstateError, ValueError):
    """A chunk failed its checksum, is truncated, or a completed block is missing.

    The project's one error for damaged data. Raised for one chunk (:meth:`in_chunk`) it also
    names it: ``array_path``, ``coord``, ``key`` and ``reason`` (otherwise None).
    """

    array_path: str | None = None
    coord: tuple[int, ...] | None = None
    key: str | None = None
    reason: str | None = None

    @classmethod
    def in_chunk(cls, array_path: str, coord: tuple[int, ...], key: str,
                 reason: str) -> CorruptStoreError:
        """The error for one damaged chunk; the message starts with ``reason``
        (``Stored and computed checksum do not match``, zarr's wording, or ``buffer size ...
        (truncated?)``)."""
        err = cls(f"{reason} in chunk {coord} of {array_path} ({key}); `layerstate validate` on the store says "
                  "what is lost and what can still be analysed (other layers, lengths and runs read as usual)")
        err.array_path, err.coord, err.key, err.reason = array_path, coord, key, reason
        return err

    def describe(self) -> str:
        """``validate``'s wording for a chunk: ``<array>: chunk (i, j, …) (<key>) is corrupt:
        <reason>`` (the message itself for an error not raised by :meth:`in_chunk`)."""
        if self.array_path is None:
            return str(self)
        return f"{self.array_path}: chunk {self.coord} ({self.key}) is corrupt: {self.reason}"


class IncompleteError(LayerstateError, ValueError):
    """Data asked for has not been completely written yet (a capture still running or killed)."""


class TransferError(LayerstateError, OSError):
    """The source of a copy (``pull``/``push``) could not be reached or read (network,
    permissions, a missing object)."""


class UnsafeArchiveError(LayerstateError, ValueError):
    """A zip archive whose member paths would escape the target directory."""


class MetadataDamagedError(CorruptStoreError):
    """A metadata file (``zarr.json``) cannot be read, or disagrees with its second copy."""


class ReadOnlyStoreError(LayerstateError, PermissionError):
    """A store that cannot be written (a zip, a read-only URL) was opened for writing."""


class ResultsMismatchError(LayerstateError, ValueError):
    """A results store was paired with a store other than the one its results belong to."""


class MissingDependencyError(LayerstateError, ImportError):
    """An optional package is not installed: one a store's location needs (e.g. aiohttp for
    HTTP) or an importer's library; the message names what to install. The project's one
    missing-dependency error."""


def check_keywords(function: str, keywords: Mapping[str, Any], known: Collection[str]) -> None:
    """Refuse a keyword ``function`` does not take, as Python does (a ``TypeError``), for a
    function whose keywords are a ``TypedDict``'s (``**options: Unpack[...]``), which Python
    does not check."""
    unknown = [k for k in keywords if k not in known]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")


def closest(name: object, known: Iterable[object]) -> list[str]:
    """The known names closest to ``name`` (at most three, a match but for case first), or
    none when ``name`` is one of them."""
    names = [str(k) for k in known]
    text = str(name)
    if text in names:
        return []
    close = [n for n in names if n.lower() == text.lower()]
    close += [n for n in difflib.get_close_matches(text, names, n=3, cutoff=0.6) if n not in close]
    return close[:3]


def did_you_mean(name: object, known: Iterable[object], *, what: str = "") -> str:
    """``"; did you mean 'dyck'?"`` when ``name`` is close to one of ``known`` (a misspelling),
    else ``""`` -- for the end of an error about an unknown name. Case alone never hides a
    match (``Dyck`` finds ``dyck``)."""
    close = closest(name, known)
    if not close:
        return ""
    shown = " or ".join(repr(c) for c in close)
    return f"; did you mean {what + ' ' if what else ''}{shown}?"


def validation_problems(exc: Any, fields: Mapping[str, Any], *, missing: str | None = None,
                        show_input: bool = False) -> list[str]:
    """Each problem of a pydantic ``ValidationError`` as one ``field: problem`` (the project's
    one reading of them), a misspelt field first -- it explains the missing one -- with the
    closest field name; ``fields`` are the model's (``model_fields``). ``missing``: the words for
    a required field left out, ``{description}`` replaced by the field's description (default:
    pydantic's); ``show_input``: add what was given."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    out = []
    for err in errors:
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")  # pydantic's prefix of a validator's ValueError
        if err["type"] == "missing" and missing is not None and where in fields:
            msg = missing.format(description=getattr(fields[where], "description", "") or "")
        elif err["type"] == "extra_forbidden":
            near = closest(where, fields)
            msg = (f"unknown field; did you mean {near[0]!r}?" if near else
                   f"unknown field; the fields are {', '.join(fields)}")
        elif show_input and where:
            msg = f"{msg} (got {err.get('input')!r})"
        out.append(f"{where}: {msg}" if where else msg)
    return out
