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


def _name(path: Path) -> str:
    """A module's name under ``store``: ``core``, ``io.chunks``; a subpackage is named by
    its ``__init__`` (``io``), the package itself ``__init__``."""
    parts = list(path.relative_to(STORE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the store modules it imports anywhere in its body (functions included),
    every module of every subpackage, and the subpackage ``__init__`` it passes through."""
    files = {_name(p): p for p in STORE.rglob("*.py")}
    packages = {n for n, p in files.items() if p.name == "__init__.py"}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name.split(".") if name in packages else name.split(".")[:-1]
        if name == "__init__":
            here = []

        def add(target: str, names: list[str]) -> set[str]:
            found = {target} if target in files else set()
            if target in packages or target == "":
                found |= {f"{target}.{n}".lstrip(".") for n in names} & files.keys()
            return found

        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
                deps |= add(target, [a.name for a in node.names])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("store."):
                deps |= add((node.module or "")[len("store.") :], [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                deps |= {a.name[len("store.") :] for a in node.names if a.name.startswith("store.")}
        # importing ``store.io.chunks`` runs ``store/io/__init__.py`` first
        deps |= {".".join(d.split(".")[:-1]) for d in deps if "." in d}
        out[name] = (deps & files.keys()) - {name, "__init__"}
    return out


def test_no_store_module_imports_one_that_imports_it_back():
    graph = _imports()
    assert {"core", "io.chunks", "integrity.validation", "sharing.transfer_side"} <= graph.keys()

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
    # subpackages import nothing themselves, so core may import integrity.metadata while
    # integrity.validation imports core
    subpackages = {n for n in graph if (STORE / n.replace(".", "/") / "__init__.py").exists()}
    assert subpackages == {"access", "contents", "integrity", "io", "sharing"}
    assert all(graph[p] == set() for p in subpackages)


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
