"""What produced a store: tool version, git commit, package versions, host."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("numpy", "zarr", "xarray", "dask", "torch", "transformers", "scikit-learn", "statsmodels")


def tool_version() -> str:
    try:
        return metadata.version("layerstate")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the layerstate source tree, if it is a git checkout."""
    where = path or Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def provenance() -> dict:
    """A JSON-able record of the software and machine that wrote a store."""
    return {
        "git_commit": git_commit(),
        "packages": package_versions(),
        "python": platform.python_version(),
        "host": platform.node(),
        "platform": platform.platform(),
    }


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
