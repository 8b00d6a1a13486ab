"""``--jobs N --device cuda``: N training processes share the device (the routing is
checked here on a CPU; the processes themselves run in tests/gpu)."""

from __future__ import annotations

import pytest

from layerstate.executor import Executor, Section
from layerstate.work import Work


@pytest.mark.parametrize("device,jobs,where", [
    ("cuda", 4, "processes"), ("cuda:1", 2, "processes"), ("cpu", 2, "processes"),
    ("cuda", 1, "here"), ("cpu", 1, "here"),
])
def test_training_jobs_share_the_device(tmp_path, monkeypatch, device, jobs, where):
    ex = Executor("threads", str(tmp_path), device=device, jobs=jobs)
    monkeypatch.setattr(ex, "_on_processes", lambda section: iter([("processes", None)]))
    monkeypatch.setattr(ex, "_in_process", lambda section, st: iter([("here", None)]))
    section = Section([Work("train", "train-a", device=True), Work("train", "train-b", device=True)])
    assert next(ex._pool(section, None))[0] == where


def test_captures_stay_in_this_process_on_the_device(tmp_path, monkeypatch):
    ex = Executor("threads", str(tmp_path), device="cuda", jobs=4)
    monkeypatch.setattr(ex, "_on_processes", lambda section: iter([("processes", None)]))
    monkeypatch.setattr(ex, "_in_process", lambda section, st: iter([("here", None)]))
    section = Section([Work("capture", "capture-a", kind="len", length=12, device=True)])
    assert next(ex._pool(section, None))[0] == "here"
