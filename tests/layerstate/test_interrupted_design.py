"""`run --design` interrupted in every phase of a stage (issue 69): Ctrl-C (SIGINT to the
process group, as a terminal sends it) and ``kill -9`` (the process alone, as the OOM killer
does), after the stage's training, capture, behaviour and probes. After each, `sequential`,
`plan` and the report's design section give no decision of the stage while a result it reads
lacks the stage's seeds, and never one that differs from the decision the finished run makes;
the same command then resumes to the end.

One run of the real command line in a subprocess, resumed after each interrupt, so every phase
is reached once: about one pipeline's cost, not four."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from layerstate.cli import main
from reports.seeds import sequential as report_sequential
from reports.snapshot import take_snapshot
from store import Store
from tests.layerstate.test_incomplete_stage import EXPERIMENT

ROOT = Path(__file__).resolve().parents[2]
DESIGN = """
[design]
first_seeds = 2
stage_seeds = 1
max_seeds = 3
spending = "obrien-fleming"
"""
#: (the section header of stage 2 at which the signal is sent, the signal, what is done by then)
PHASES = [("== capture", signal.SIGINT, "trained"), ("== behaviour", signal.SIGKILL, "captured"),
          ("== probes", signal.SIGINT, "behaviour analysed"), ("== claims", signal.SIGKILL, "probes analysed")]


def _cli(*args) -> str:
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def _decisions(output: str, stage: int) -> list[str]:
    return [ln for ln in output.splitlines() if re.match(rf"stage {stage} \(\d+ seeds\) [\w-]+: ", ln)]


def _run(args: list[str], header: str | None = None, sig: int | None = None) -> tuple[int, str]:
    """``layerstate ARGS`` in a subprocess (its own process group); with ``header``, send it
    ``sig`` as soon as it prints that header in stage 2 (after "stage at 3 seeds")."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # SIGINT as a terminal leaves it: a job started in the background (CI's runner, `cmd &`)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    p = subprocess.Popen([sys.executable, "-m", "layerstate.cli", *args], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout is not None
    lines, in_stage_2 = [], False
    for line in p.stdout:
        lines.append(line)
        in_stage_2 = in_stage_2 or line.startswith("stage at 3 seeds")
        if header is not None and in_stage_2 and line.startswith(header):
            if sig == signal.SIGINT:
                os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
            else:
                os.kill(p.pid, signal.SIGKILL)
            break
    rest, _ = p.communicate(timeout=300)
    return p.returncode, "".join(lines) + rest


def test_run_design_interrupted_in_every_phase_gives_no_early_decision_and_resumes(tmp_path):
    exp, design = tmp_path / "exp.toml", tmp_path / "design.toml"
    exp.write_text(EXPERIMENT)
    design.write_text(DESIGN)
    out = tmp_path / "out"
    store = out / "store.zarr"
    args = ["run", str(exp), "--out", str(out), "--design", str(design), "--jobs", "1"]

    seen = []
    for header, sig, done in PHASES:
        code, output = _run(args, header, sig)
        assert "stage at 3 seeds" in output, output
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL, output
        else:  # one line of what is kept and the command that resumes, exit 130 as a shell's
            assert code == 130, output
            # one line of its own (a library's warnings at exit, e.g. an unawaited coroutine of a
            # thread the interrupt stopped, may follow it on stderr)
            assert ("layerstate: interrupted: what was written before it is kept (trained runs and their "
                    "checkpoints, captured blocks, stored results); the same command resumes from there: layerstate "
                    + " ".join(args)) in output.splitlines(), output
        assert "stage 2 (3 seeds)" not in output, output  # stopped before it decided the stage
        said = _cli("sequential", exp, "--store", store, "--design", design)
        plan = _cli("plan", exp, "--store", store, "--design", design)
        report = report_sequential(take_snapshot(Store.open(str(store))))
        seen.append((done, said, plan, report))

    code, output = _run(args)  # resumed to the end
    assert code == 0, output
    final = _cli("sequential", exp, "--store", store, "--design", design)
    decided = _decisions(final, 2)
    assert len(decided) == 2 and "is incomplete" not in final, final

    first = _decisions(seen[0][1], 1)
    assert len(first) == 2
    for done, said, plan, report in seen:
        assert _decisions(said, 1) == first, (done, said)  # stage 1 was decided and stays so
        looks = next((t.data for t in report.tables if t.name == "sequential_looks"), None)
        shown = [] if looks is None else sorted(set(looks["stage"].astype(int)))
        assert shown in ([], [1]), (done, shown)  # the report shows no decision of stage 2
        if done == "probes analysed":
            # every result the claims read holds the stage's seeds: its decision may be made,
            # and is the one the finished run makes
            assert _decisions(said, 2) in ([], decided), (done, said)
            continue
        assert not _decisions(said, 2), (done, said)
        assert "stage 2 (3 seeds) is incomplete" in said, (done, said)
        assert "the design is complete" not in said and "decided by its design" not in plan, (done, plan)
