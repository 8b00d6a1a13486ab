"""The calibration factors kept on disk (analysis.stats.disk_cache): read back bit for bit
without the null paths, recomputed where the key differs or the file is damaged, and not kept
where the cache is off."""

from __future__ import annotations

import json

import pytest

from analysis.stats import boundaries
from analysis.stats.disk_cache import cache_dir

SEEDS, SPENDING = (2, 3), "obrien-fleming"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSTATE_CACHE_DIR", str(tmp_path / "cache"))
    boundaries.calibration_factor.cache_clear()
    yield tmp_path / "cache"
    boundaries.calibration_factor.cache_clear()


def _no_paths(monkeypatch):
    def refuse(_seeds):
        raise AssertionError("the null paths were simulated again")
    monkeypatch.setattr(boundaries, "_null_paths", refuse)


def test_a_kept_factor_is_read_back_bit_for_bit_without_the_paths(fresh, monkeypatch):
    first = boundaries.calibration_factor(SEEDS, 0.05, SPENDING)
    assert first == boundaries._calibration_factor(SEEDS, 0.05, SPENDING)  # what is kept is the computation's
    [kept] = list((fresh / "calibration").glob("*.json"))
    boundaries.calibration_factor.cache_clear()  # as another process
    _no_paths(monkeypatch)
    assert boundaries.calibration_factor(SEEDS, 0.05, SPENDING) == first
    with pytest.raises(AssertionError, match="simulated again"):  # another level is another key
        boundaries.calibration_factor(SEEDS, 0.025, SPENDING)

    kept.write_text("{not json")  # a damaged file is computed again and rewritten
    monkeypatch.undo()
    monkeypatch.setenv("LAYERSTATE_CACHE_DIR", str(fresh))
    boundaries.calibration_factor.cache_clear()
    assert boundaries.calibration_factor(SEEDS, 0.05, SPENDING) == first
    assert json.loads(kept.read_text())["value"] == first


def test_a_file_holding_another_key_or_another_code_is_not_read(fresh, monkeypatch):
    first = boundaries.calibration_factor(SEEDS, 0.05, SPENDING)
    [kept] = list((fresh / "calibration").glob("*.json"))
    doc = json.loads(kept.read_text())
    kept.write_text(json.dumps({"key": doc["key"] + " other", "value": 0.5}))
    boundaries.calibration_factor.cache_clear()
    assert boundaries.calibration_factor(SEEDS, 0.05, SPENDING) == first
    # the key holds a digest of the code that computes it: changed code is another key
    boundaries.calibration_factor.cache_clear()
    monkeypatch.setattr(boundaries, "_code", lambda: "changed")
    _no_paths(monkeypatch)
    with pytest.raises(AssertionError, match="simulated again"):
        boundaries.calibration_factor(SEEDS, 0.05, SPENDING)


@pytest.mark.parametrize("off", ["off", ""])
def test_off_keeps_nothing(tmp_path, monkeypatch, off):
    monkeypatch.setenv("LAYERSTATE_CACHE_DIR", off)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() is None
    boundaries.calibration_factor.cache_clear()
    boundaries.calibration_factor(SEEDS, 0.05, SPENDING)
    boundaries.calibration_factor.cache_clear()
    assert not any(tmp_path.iterdir())
