"""The seconds each test module took in one run of the suite (``module_times.json`` beside this
file), by which ``tests/conftest.py`` hands the longest modules to pytest-xdist's workers first.

pytest-xdist's ``--dist loadfile`` gives a worker a whole module at a time, in the order the
modules are queued; by default it queues them by their number of tests, so a module of one long
test (a whole pipeline run, 50 s) came last and ran alone while the other worker idled: 33 s of
the parallel part's 476 s on two workers (docs/measured.md, "CI time, 2026-12-08"). Longest
first, each worker taking the next when it is free, leaves at most a short module's time idle.

A stale table only orders the queue less well; a module missing from it is queued by its
collection order after the ones listed. To refresh it after the suite has changed::

    python -m pytest -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    python -m tests.module_times /tmp/suite.xml > tests/module_times.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("module_times.json")


def load() -> dict[str, float]:
    """Module path (``tests/.../test_x.py``) -> seconds; empty where there is no table."""
    try:
        return {str(k): float(v) for k, v in json.loads(TABLE.read_text()).items()}
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def from_junit(path: str) -> dict[str, float]:
    """Each module's seconds (its tests' setup, call and teardown) in a pytest JUnit XML file."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()  # a test class's name after its module's
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    print(json.dumps(from_junit(sys.argv[1]), indent=1))
