"""The command line: exit codes and one-line messages (library behaviour is tested elsewhere)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from layerstate.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_inspect_shows_runs_lengths_and_shapes(make_store):
    st = make_store(runs=("r0", "r1"), n=40)
    res = run("inspect", str(st.location))
    assert res.exit_code == 0, res.output
    assert "r1: task=parity arch=lstm" in res.output
    assert "len_012: hidden 40x12x3x8 float16" in res.output and "labels parity, ones" in res.output


def test_validate_ok_and_corrupt(make_store):
    st = make_store(n=40)
    res = run("validate", str(st.location))
    assert res.exit_code == 0 and res.output.startswith("ok:")
    chunk = next(p for p in sorted(Path(str(st.location)).rglob("c/*/*/*/*")) if p.is_file())
    chunk.write_bytes(b"\0" * 10)
    res = run("validate", str(st.location))
    assert res.exit_code == 2
    assert "failed validation" in res.output and "corrupt" in res.output


def test_pack_then_inspect_the_zip(make_store, tmp_path):
    st = make_store(n=40)
    out = tmp_path / "s.zip"
    assert run("pack", str(st.location), str(out)).exit_code == 0
    res = run("pack", str(st.location), str(out))
    assert res.exit_code == 2 and "exists" in res.output and "--force" in res.output
    assert run("pack", str(st.location), str(out), "--force").exit_code == 0
    assert "r0: task=parity" in run("inspect", str(out)).output


def test_not_a_store_is_one_line_exit_2_without_traceback(tmp_path):
    res = run("inspect", str(tmp_path))
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layerstate: error:")
    assert "not a layerstate store" in lines[0] and "Traceback" not in res.output


def test_debug_flag_shows_the_exception(tmp_path):
    res = run("--debug", "inspect", str(tmp_path / "nope"))
    assert res.exit_code != 0 and res.exception is not None
