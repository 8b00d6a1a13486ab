"""Session fixtures: the stores and the report every test in this folder reads."""

from __future__ import annotations

import pytest

from store import Store

from ._data import SEEDS_FOR, build_store, experiment


@pytest.fixture(scope="session")
def full_store(tmp_path_factory) -> Store:
    """Every kind of result; parity with 3 seeds, dyck with 2 (too few for intervals)."""
    return build_store(tmp_path_factory.mktemp("reports") / "full.zarr", seeds_for=SEEDS_FOR)


@pytest.fixture(scope="session")
def bare_store(tmp_path_factory) -> Store:
    """Runs with activations and logits, no analysis results at all."""
    return build_store(tmp_path_factory.mktemp("reports") / "bare.zarr", probes=False,
                       interventions=False, claims=False, tasks=("parity",), seeds=(0, 1))


@pytest.fixture(scope="session")
def full_report(full_store, tmp_path_factory):
    """The report of the full store: (folder, path returned by build_report)."""
    from reports import build_report

    out = tmp_path_factory.mktemp("built") / "report"
    return out, build_report(full_store, out, experiment=experiment())
