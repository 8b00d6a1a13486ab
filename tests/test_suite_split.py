"""`make test` runs the modules in ``SERIAL_MODULES`` apart from the parallel part: a renamed
or moved module must not slip silently into the parallel part, where its clocks and kills
would compete with other tests for the cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SERIAL_MODULES

TESTS = Path(__file__).parent


@pytest.mark.parametrize("name", sorted(SERIAL_MODULES))
def test_every_serial_module_is_one_test_file(name):
    found = [p.relative_to(TESTS) for p in TESTS.rglob(name)]
    assert len(found) == 1, f"{name}: {found or 'no such test module'}"


def test_the_serial_marker_reaches_the_tests_of_a_serial_module(request):
    here = request.node
    assert here.get_closest_marker("serial") is None  # this module runs in the parallel part
    items = request.session.items
    serial = {i.path.name for i in items if i.get_closest_marker("serial") is not None}
    assert serial <= SERIAL_MODULES
    collected = {i.path.name for i in items}
    assert serial == SERIAL_MODULES & collected
