"""A damaged chunk, as its receiver meets it: validate names the fix and says what can still be
analysed; repair --forget-damaged succeeds once it has done what was asked (issue 54, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from layerstate.cli import main

CHUNK = ("runs", "r1", "len_012", "hidden", "c", "0", "0", "1", "0")  # run r1, length 12, layer L0


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def damaged(make_store):
    """Three runs at lengths 12 and 16; run r1's hidden chunk of layer L0 at length 12 flipped."""
    st = make_store(runs=("r0", "r1", "r2"), lengths=(12, 16), n=32, block_size=32)
    root = Path(str(st.location))
    chunk = root.joinpath(*CHUNK)
    raw = bytearray(chunk.read_bytes())
    raw[5] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    return root


def test_validate_of_a_damaged_zip_names_the_fix_and_what_is_intact(damaged, tmp_path):
    zipped = tmp_path / "acts.zip"
    assert cli("pack", damaged, zipped).exit_code == 0
    res = cli("validate", zipped)
    assert res.exit_code == 2
    error = res.output.strip().splitlines()[-1]
    assert error.startswith("layerstate: error: ") and "runs/r1/len_012/hidden: chunk (0, 0, 1, 0)" in error
    assert f"`layerstate repair --dry-run {zipped}`" in error
    assert "  lost: run r1 len_012 layer L0\n" in res.output
    assert "  intact: run r1 len_012 layers embed, L1; run r1 len_016 whole; 2 other runs whole" in res.output
    assert "needs the experiment file the store was made from" in res.output
    assert "`layerstate unpack` it first" in res.output
    # the suggested command reads what is intact ...
    res = cli("probe", zipped, "--results", tmp_path / "mine.zarr", "--positions", "pooled", "--folds", "2",
              "--runs", "r1", "--lengths", "12", "--layers", "embed,L1")
    assert res.exit_code == 0, res.output
    assert "r1 len12: embed=" in res.output and "L0=" not in res.output
    # ... while reading the lost layer is one line pointing at validate
    res = cli("probe", zipped, "--results", tmp_path / "all.zarr", "--positions", "pooled", "--folds", "2",
              "--runs", "r1", "--lengths", "12")
    assert res.exit_code == 2 and "`layerstate validate` on the store says what is lost" in res.output
    # a dry run of repair works on a zip (it changes nothing) and says the same
    res = cli("repair", "--dry-run", zipped)
    assert res.exit_code == 0 and "  lost: run r1 len_012 layer L0" in res.output


def test_forget_damaged_succeeds_and_says_what_it_forgot(damaged):
    res = cli("repair", "--forget-damaged", damaged)
    assert res.exit_code == 0, res.output
    assert "forgot: runs/r1/len_012/hidden chunk (0, 0, 1, 0)" in res.output
    assert "1 damaged chunk(s) forgotten" in res.output and "layerstate capture EXPERIMENT.toml" in res.output
    # the forgotten block is no longer data anyone reads: the store validates, the length waits for capture
    res = cli("validate", damaged)
    assert res.exit_code == 0, res.output
    assert "runs/r1/len_012: incomplete, 0 of 1 blocks written" in res.output
    assert "holds only blocks not recorded as written" in res.output


def test_repair_without_forgetting_still_exits_2_naming_each_chunk(damaged):
    res = cli("repair", damaged)
    assert res.exit_code == 2
    assert "not repairable: runs/r1/len_012/hidden chunk (0, 0, 1, 0)" in res.output
    assert "1 damaged chunk(s) not repairable" in res.output.strip().splitlines()[-1]
