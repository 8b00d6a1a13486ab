"""Session fixtures: the stores and the report every test in this folder reads, each built once
per test run (``build_once``: shared by the xdist workers) and opened read-only."""

from __future__ import annotations

import pytest

from store import Store

from ._data import SEEDS_FOR, build_store, experiment


@pytest.fixture(scope="session")
def full_store(build_once) -> Store:
    """Every kind of result; parity with 3 seeds, dyck with 2 (too few for intervals)."""
    path = build_once("reports-full.zarr", lambda p: build_store(p, seeds_for=SEEDS_FOR))
    return Store.open(str(path))


@pytest.fixture(scope="session")
def bare_store(build_once) -> Store:
    """Runs with activations and logits, no analysis results at all."""
    path = build_once("reports-bare.zarr", lambda p: build_store(
        p, probes=False, interventions=False, claims=False, tasks=("parity",), seeds=(0, 1)))
    return Store.open(str(path))


@pytest.fixture(scope="session")
def full_report(full_store, build_once):
    """The report of the full store: (folder, path of its index.html)."""
    from reports import build_report

    base = build_once("reports-full-report",
                      lambda p: build_report(full_store, p / "report", experiment=experiment()))
    return base / "report", base / "report" / "index.html"
