"""`layerstate probe` says on stderr how much work it is about to do, then its progress and a
final line (--quiet: none of it); the results stay on stdout. A stored result's settings read
``none`` where no training length was used, never the stored ``-1``."""

from __future__ import annotations

import re

from click.testing import CliRunner

import analysis.probes.progress as progress
from layerstate.cli import main


def probe(store, *args: str):
    return CliRunner().invoke(main, ["probe", str(store.location), "--scheduler", "sync", "--folds", "2", *args])


def test_probe_announces_its_cells_then_reports_progress_and_a_final_line(make_store, monkeypatch):
    monkeypatch.setattr(progress, "EVERY_S", 0.0)  # a line per finished task, not one per 10 s
    st = make_store(runs=("r0", "r1"), n=40)  # layers embed, L0, L1; length 12, every position labelled
    res = probe(st, "--target", "parity")
    assert res.exit_code == 0, res.output
    err = res.stderr.splitlines()
    assert err[0].startswith("probe: 2 runs × 1 length (12) × up to 3 layers × every position = "
                             "72 probe cells, each cross-validated over 2 folds (C chosen from 5 values); roughly ")
    interim = [tuple(map(int, m.groups())) for m in (re.match(r"probe: (\d+) of (\d+) cells \(", x) for x in err) if m]
    assert len(interim) >= 2 and all(total == 72 for _, total in interim)
    assert [d for d, _ in interim] == sorted({d for d, _ in interim}) and interim[-1][0] < 72
    assert re.fullmatch(r"probe: 72 cells done in \d+ s", err[-1])
    assert "cells" not in res.stdout and "stored results/probes/parity" in res.stdout


def test_quiet_probe_prints_no_progress(make_store):
    st = make_store(n=40)
    res = probe(st, "--target", "parity", "--positions", "last", "--quiet")
    assert res.exit_code == 0, res.output
    assert "cells" not in res.output and "stored results/probes/parity" in res.stdout


def test_a_short_sweep_says_its_size_and_its_end_only(make_store):
    st = make_store(n=40)
    res = probe(st, "--target", "parity", "--positions", "last")
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("probe: 1 run × 1 length (12) × up to 3 layers × the last labelled position "
                               "= 3 probe cells")
    assert re.fullmatch(r"probe: 3 cells done in \d+ s", lines[1])


def test_no_training_length_reads_none_not_the_stored_sentinel(make_store):
    st = make_store(n=40, lengths=(12, 16))
    first = probe(st, "--target", "parity", "--positions", "last", "--train-length", "12", "--quiet")
    assert first.exit_code == 0, first.output
    again = probe(st, "--target", "parity", "--positions", "last", "--quiet")
    assert again.exit_code == 0, again.output
    note = next(line for line in again.stdout.splitlines() if "already holds probes" in line)
    assert "train_length 12 -> none" in note and "-> -1" not in note
    assert "stored results/probes/parity-2" in again.stdout
