"""Numbers that cost seconds to compute and never change, kept on disk between processes.

A sequential design's t boundaries are calibrated on a million simulated null paths
(:func:`analysis.stats.boundaries.calibration_factor`): 0.3-1.3 s a design and 50 ms a level on
a 2-core machine, paid again by every command that reads the design (``sequential``, ``plan``,
``run --design``, the report's design section) and by every worker process. The result is a
function of its arguments and of the code that computes it, so it is kept here as a JSON
number (``repr`` of a float reads back to the same bits) under a key that holds both: the
arguments, a digest of the source of the modules that compute it, and the numpy and scipy
versions. A changed line of that code, or another numpy, is another key and is computed
afresh.

Where: ``$LAYERSTATE_CACHE_DIR`` if set (``off`` or empty: no cache), else
``$XDG_CACHE_HOME/layerstate`` or ``~/.cache/layerstate``. One small file per number, written
whole to a temporary name and renamed, so concurrent processes never read half a file; a file
that cannot be read, or holds another key, is computed again and overwritten. A cache that
cannot be written (a read-only home) only costs the time it would have saved.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import scipy

#: The environment variable naming the folder (``off`` or empty: nothing is kept).
ENV = "LAYERSTATE_CACHE_DIR"


def cache_dir() -> Path | None:
    """The folder numbers are kept in, or None where the cache is off."""
    where = os.environ.get(ENV)
    if where is not None:
        return None if where.strip() in ("", "off") else Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "layerstate"


def code_digest(modules: Sequence[ModuleType]) -> str:
    """A digest of the modules' source and of the numpy and scipy versions they run on."""
    h = hashlib.sha256(f"numpy {np.__version__} scipy {scipy.__version__}".encode())
    for m in modules:
        h.update(inspect.getsource(m).encode())
    return h.hexdigest()[:16]


def cached_number(kind: str, key: str, compute: Callable[[], float]) -> float:
    """``compute()``, kept under ``kind``/``key`` (the key must say everything the number
    depends on); read back bit for bit when the same key was computed before, by any process."""
    folder = cache_dir()
    if folder is None:
        return float(compute())
    path = folder / kind / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    try:
        doc = json.loads(path.read_text())
        if doc.get("key") == key and isinstance(doc.get("value"), float):
            return float(doc["value"])
    except (OSError, ValueError, AttributeError):
        pass
    value = float(compute())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return value
