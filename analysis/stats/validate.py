"""Argument checks shared by every statistic in :mod:`analysis.stats`.

All checks live here, in one place, so that the same mistake gets the same message whichever
function it was passed to. Each raises a project error (:mod:`store.errors`: the command line
turns it into one line and exit code 2) with what was wrong, what was expected and how to fix
it; each subclasses the builtin it replaced, so ``except ValueError`` (``TypeError``,
``KeyError``) still catches it:

* :class:`~store.errors.InvalidTypeError` (``TypeError``): not a DataArray, not a Generator;
* :class:`~store.errors.InvalidArrayError` (``ValueError``): dims, sizes, seeds or masks of
  the data;
* :class:`~store.errors.InvalidArgumentError` (``ValueError``): an option out of range or
  unknown;
* :class:`~store.errors.MissingError` (``KeyError``): a level that is not a coordinate value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import xarray as xr

from store.errors import InvalidArgumentError, InvalidArrayError, InvalidTypeError, MissingError


def check_dataarray(obj: object, name: str) -> xr.DataArray:
    """Return ``obj`` if it is an ``xarray.DataArray``; raise ``TypeError`` otherwise."""
    if not isinstance(obj, xr.DataArray):
        raise InvalidTypeError(
            f"{name} must be an xarray.DataArray with named dims, got {type(obj).__name__}; "
            f"wrap a numpy array with xr.DataArray(values, dims=(...))"
        )
    return obj


def check_dims(da: xr.DataArray, required: Sequence[Hashable], name: str) -> None:
    """Raise ``ValueError`` naming the dims of ``required`` missing from ``da``."""
    missing = tuple(d for d in required if d not in da.dims)
    if missing:
        raise InvalidArrayError(
            f"Dimensions {missing} not found in {name} dimensions {tuple(da.dims)}; "
            f"expected {tuple(required)} among them. Rename with "
            f"{name}.rename({{old: new}}) or pass the matching *_dim argument."
        )


def check_no_dims(da: xr.DataArray, forbidden: Sequence[Hashable], name: str, why: str) -> None:
    """Raise ``ValueError`` if ``da`` carries any dim of ``forbidden``."""
    present = tuple(d for d in forbidden if d in da.dims)
    if present:
        raise InvalidArrayError(f"{name} must not have dimensions {present}: {why}")


def check_same_dims(a: xr.DataArray, b: xr.DataArray, names: tuple[str, str]) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same dims and sizes."""
    if set(a.dims) != set(b.dims) or any(a.sizes[d] != b.sizes[d] for d in a.dims):
        raise InvalidArrayError(
            f"{names[0]} {dict(a.sizes)} and {names[1]} {dict(b.sizes)} must have the same "
            f"dimensions and sizes (one value per cell of each)"
        )


def check_choice(value: str, valid: Iterable[str], name: str) -> str:
    """Return ``value`` if it is one of ``valid``; raise ``ValueError`` listing them otherwise."""
    valid = tuple(valid)
    if value not in valid:
        raise InvalidArgumentError(f"unknown {name} {value!r}; valid options: {', '.join(map(repr, valid))}")
    return value


def check_probability(value: float, name: str) -> float:
    """Return ``value`` if ``0 < value < 1``; raise ``ValueError`` otherwise."""
    if not (isinstance(value, (int, float, np.floating)) and 0.0 < float(value) < 1.0):
        raise InvalidArgumentError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def check_margin(margin: float) -> float:
    """Return an equivalence margin if it is a finite number > 0."""
    if not (isinstance(margin, (int, float, np.floating)) and np.isfinite(margin) and margin > 0):
        raise InvalidArgumentError(
            f"margin must be a finite number > 0 (the largest difference you declare "
            f"negligible, in the metric's units, e.g. 0.02 for 2 pp), got {margin!r}"
        )
    return float(margin)


def check_n_boot(n_boot: int) -> int:
    """Return ``n_boot`` if it is an int >= 100."""
    if not isinstance(n_boot, (int, np.integer)) or isinstance(n_boot, bool) or n_boot < 100:
        raise InvalidArgumentError(
            f"n_boot must be an integer >= 100 (>= 2000 for stable 95% endpoints), got {n_boot!r}"
        )
    return int(n_boot)


def check_min_seeds(n_seeds: int, needed: int, what: str, hint: str = "Train more seeds.") -> None:
    """Raise ``ValueError`` if fewer than ``needed`` seeds are available for ``what``."""
    if n_seeds < needed:
        raise InvalidArrayError(
            f"{what} needs at least {needed} seeds (independently trained replicates), got "
            f"{n_seeds}: seed-to-seed variation cannot be estimated from fewer. {hint}"
        )


def check_rng(rng: object) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` built from ``rng`` (a Generator or an int seed)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise InvalidTypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}; "
        f"pass e.g. rng=np.random.default_rng(0) (global RNGs are never used)"
    )


def check_mask(mask: np.ndarray, n_seeds: int) -> None:
    """Raise ``ValueError`` if any seed in a (seed, sequence) mask has no valid sequence."""
    empty = np.flatnonzero(~mask.any(axis=-1))
    if empty.size:
        raise InvalidArrayError(
            f"seeds at positions {empty.tolist()} (of {n_seeds}) have no valid sequence; "
            f"drop them with .drop_sel(seed=...) or fix the sequence mask"
        )


def check_levels(da: xr.DataArray, dim: Hashable, levels: Sequence[Hashable], name: str) -> None:
    """Raise ``KeyError`` if a level in ``levels`` is not a coordinate value of ``dim``."""
    have = list(da[dim].values.tolist())
    for level in levels:
        if level not in have:
            raise MissingError(f"{name} {level!r} is not a value of dimension {dim!r}; valid: {have}")
