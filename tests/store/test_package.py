"""The package's structure: no import cycles, and zarr's format notices kept off the terminal."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

from store import Store, validate
from tests.conftest import synthetic_arrays

STORE = Path(__file__).resolve().parents[2] / "store"


def _imports() -> dict[str, set[str]]:
    """Module -> the store modules it imports anywhere in its body (functions included)."""
    mods = {p.stem for p in STORE.glob("*.py")}
    out: dict[str, set[str]] = {}
    for name in mods:
        deps: set[str] = set()
        for node in ast.walk(ast.parse((STORE / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("store."):
                deps.add((node.module or "").split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("store.")}
        out[name] = (deps & mods) - {name}
    return out


def test_no_store_module_imports_one_that_imports_it_back():
    graph = _imports()

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    cycles = sorted(m for m in graph if m != "__init__" and m in reachable(m))
    assert not cycles, cycles
    assert graph["zarrutil"] <= {"errors"}  # the leaf: only the exception classes
    assert graph["errors"] == set()


def test_ordinary_use_shows_no_zarr_format_notices_and_leaves_no_filter(tmp_path):
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        st = Store.create(str(tmp_path / "s.zarr"))
        st.add_run("r0", task="parity", arch="lstm", seed=0)
        st.write_length("r0", 12, **synthetic_arrays(np.random.default_rng(0), n=8))
        st.write_weights("r0", {"w": np.ones((2, 3))})
        st.write_result("r", xr.Dataset({"name": ("x", np.array(["a", "b"]))}))
        ro = Store.open(str(tmp_path / "s.zarr"))
        ro.compute(ro.open_length("r0", 12).hidden)
        ro.load_length("r0", 12)
        ro.read_result("r")
        assert validate(ro).ok
        Store.open(str(tmp_path / "s.zarr"), mode="r+").add_run("r1", task="parity", arch="lstm", seed=1)
    assert [str(w.message) for w in caught] == []
    assert warnings.filters == filters
