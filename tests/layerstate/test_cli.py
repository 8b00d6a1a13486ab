"""The command line: exit codes and one-line messages (library behaviour is tested elsewhere)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from layerstate.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_inspect_shows_runs_lengths_and_shapes(make_store):
    st = make_store(runs=("r0", "r1"), n=40)
    res = run("inspect", str(st.location), "--detail")
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
    assert "r0: task=parity" in run("inspect", str(out), "--detail").output


def test_not_a_store_is_one_line_exit_2_without_traceback(tmp_path):
    res = run("inspect", str(tmp_path))
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layerstate: error:")
    assert "not a layerstate store" in lines[0] and "Traceback" not in res.output


def test_debug_flag_shows_the_exception(tmp_path):
    res = run("--debug", "inspect", str(tmp_path / "nope"))
    assert res.exit_code != 0 and res.exception is not None


def test_a_bug_shows_its_traceback(make_store, monkeypatch):
    """Only bad input is one line and exit 2; a TypeError is a bug."""
    import layerstate.cli.store_commands as store_commands

    st = make_store(n=40)

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(store_commands, "summary", broken)  # where `inspect` reads it
    res = run("inspect", str(st.location))
    assert res.exit_code == 1 and isinstance(res.exception, TypeError)


def test_scheduler_is_one_shared_option():
    from layerstate.cli import ablate, patch, probe

    opts = [next(p for p in cmd.params if p.name == "scheduler") for cmd in (probe, ablate, patch)]
    assert {o.default for o in opts} == {"auto"}
    assert len({o.help for o in opts}) == 1 and "local:N" in opts[0].help and "tcp://" in opts[0].help


def _fake_ablation(calls):
    import numpy as np
    import xarray as xr

    def run_ablation(store, name, **kwargs):
        calls.append(kwargs)
        settings = [s for s in kwargs["settings"]]
        drop = np.zeros((1, len(settings), 1, 2))
        return xr.Dataset({"accuracy_drop": (("run", "setting", "length", "layer"), drop)},
                          coords={"run": ["r0"], "setting": settings, "length": [12], "layer": ["embed", "L0"]})

    return run_ablation


def test_ablate_passes_settings_and_scheduler_through(make_store, monkeypatch):
    import layerstate.cli.analysis_commands as analysis_commands

    calls: list[dict] = []
    monkeypatch.setattr(analysis_commands, "run_ablation", _fake_ablation(calls))  # where `ablate` reads it
    st = make_store(n=40)
    res = run("ablate", str(st.location), "--settings", "probe,pca:1,4;random:2", "--scheduler", "sync",
              "--lengths", "12")
    assert res.exit_code == 0, res.output
    assert calls[0]["settings"] == ["probe", "pca:1,4", "random:2"]
    assert calls[0]["scheduler"] == "sync" and calls[0]["lengths"] == [12]
    assert "r0 [pca:1,4] accuracy drop: embed=+0.000 L0=+0.000" in res.output
    assert res.output.strip().endswith("stored results/ablation/default")


def test_bad_option_values_are_one_line(make_store):
    st = make_store(n=40)
    res = run("ablate", str(st.location), "--settings", "probe,pcb:2")
    assert res.exit_code == 2 and res.output.startswith("layerstate: error: --settings: unknown ablation setting 'pcb:2'")
    res = run("probe", str(st.location), "--lengths", "12,x")
    assert res.exit_code == 2 and "--lengths: expected comma-separated integers" in res.output
    res = run("probe", str(st.location), "--task", "sorting")
    assert res.exit_code == 2 and "no runs match task=['sorting']" in res.output
    res = run("inspect", str(st.location), "-S", "anon")
    assert res.exit_code == 2 and "not KEY=VALUE" in res.output


def test_commands_leave_no_global_state(make_store):
    import warnings

    st = make_store(n=40)
    before = list(warnings.filters)
    assert run("inspect", str(st.location)).exit_code == 0
    assert list(warnings.filters) == before


def test_importing_sets_nothing_process_wide():
    import subprocess
    import sys

    # numpy, scipy and zarr add filters of their own when imported; ours would name zarr's
    # consolidated-metadata warning
    code = ("import os, warnings\n"
            "env = dict(os.environ)\n"
            "import layerstate.cli, layerstate.pipeline, layerstate.experiment, layerstate.present\n"
            "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())\n"
            "assert not [f for f in warnings.filters if f[1] and 'Consolidated' in f[1].pattern]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_own_warnings_print_as_one_line_others_keep_their_source():
    """A warning from layerstate's own code is one 'layerstate: warning:' line, without the
    source line Python's default format appends; a library's keeps the default."""
    import importlib
    import warnings

    from layerstate.cli.base import _format_warning

    ablation = importlib.import_module("analysis.interventions.ablation")
    ours = _format_warning(RuntimeWarning("2 of 3 refitted probe fit(s) stopped"), RuntimeWarning,
                           str(ablation.__file__), 234, "    probe = _refit_correct(...)")
    assert ours == "layerstate: warning: 2 of 3 refitted probe fit(s) stopped\n"
    theirs = _format_warning(UserWarning("deprecated"), UserWarning, warnings.__file__, 10, "x = 1")
    assert theirs == warnings._formatwarning_orig(UserWarning("deprecated"), UserWarning,  # type: ignore[attr-defined]
                                                  warnings.__file__, 10, "x = 1")
    assert "x = 1" in theirs
