"""Analysing a store that cannot be written: results beside it (a sidecar or --results).

A tiny experiment (LSTM and GRU, two seeds, counterfactual twins) is trained, captured and
packed once; then every analysis runs on the zip (results in the sidecar, the zip unchanged)
and over HTTP from a static server without directory listings (results in a local store).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import re
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from store import (
    PairedStore,
    ReadOnlyStoreError,
    ResultsMismatchError,
    Store,
    open_analysis,
    pack,
)

TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["parity"]
archs = ["lstm", "gru"]
seeds = [0, 1]

[train]
length = 12
steps = 6
batch_size = 8
eval_every = 6
n_eval = 16
eval_lengths = [12]
n_test = 16
warmup = 1

[capture]
lengths = [12]
n_sequences = 24
counterfactual_pairs = 8
counterfactual_lengths = [12]

[models.lstm]
d_model = 8
n_layers = 1
[models.gru]
d_model = 8
n_layers = 1

[[claims]]
id = "lstm-vs-gru"
statement = "The LSTM and the GRU differ on Parity"
kind = "difference"
task = "parity"
compare = "arch"
treatment = "lstm"
reference = "gru"
length = 12

[[claims]]
id = "lstm-readable-L0"
statement = "The LSTM's parity state is readable by L0"
kind = "readable_by"
metric = "probe_accuracy"
task = "parity"
arch = "lstm"
layer = "L0"
threshold = 0.5
length = 12
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, Path]:
    """``store.zarr`` (trained and captured), its pack ``store.zip`` and the experiment file,
    as a receiver gets them."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import capture_experiment, train_experiment

    tmp = tmp_path_factory.mktemp("shared")
    exp_file = tmp / "tiny.toml"
    exp_file.write_text(TINY)
    exp = load_experiment(exp_file)
    src = tmp / "store.zarr"
    Store.create(str(src), title="tiny")
    list(train_experiment(exp, str(src)))
    capture_experiment(exp.plan, str(src))
    inbox = tmp_path_factory.mktemp("inbox")
    zipped = pack(Store.open(str(src)), inbox / "store.zip")
    shutil.copy(exp_file, inbox / "tiny.toml")
    return {"dir": src, "zip": zipped, "experiment": inbox / "tiny.toml"}


def cli(*args: str):
    from layerstate.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


ANALYSES = [
    ("probe", "--positions", "pooled", "--folds", "2"),
    ("ablate", "--settings", "probe"),
    ("patch", "--length", "12"),
]


@pytest.mark.slow
def test_every_analysis_runs_on_a_zip_with_results_beside_it(shared, tmp_path):
    work = tmp_path / "inbox"
    shutil.copytree(shared["zip"].parent, work)
    zipped, sidecar = work / "store.zip", work / "store.results.zarr"
    before = _sha(zipped)
    for cmd, *opts in ANALYSES:
        res = cli(cmd, zipped, *opts)
        assert res.exit_code == 0, res.output
        assert f"{zipped} is a packed store: results go to {sidecar} beside it" in res.output
    res = cli("stats", zipped, "--claims", work / "tiny.toml")
    assert res.exit_code == 0 and "lstm-readable-L0:" in res.output, res.output
    res = cli("report", zipped, "--out", tmp_path / "report")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert "probes/parity" in md or "Probe" in md
    assert _sha(zipped) == before  # the source is never written
    res = cli("inspect", zipped)
    line = next(ln for ln in res.output.splitlines() if ln.startswith("results  "))
    # each result with runs says how many it holds, from the results store beside the zip
    assert re.fullmatch(r"results  ablation/default \(\d+ runs\), claims, patching/default \(\d+ runs\), "
                        r"probes/parity \(\d+ runs\), seed_plan  \(results store .*\)", line), line
    paired = open_analysis(str(zipped), write=False)
    assert isinstance(paired, PairedStore) and paired.results_store.results() == [
        "ablation/default", "claims", "patching/default", "probes/parity", "seed_plan"]
    # a results store copied elsewhere still reads (and reports) against its source
    moved = tmp_path / "elsewhere" / "mine.zarr"
    shutil.copytree(sidecar, moved)
    res = cli("inspect", zipped, "--results", moved)
    assert res.exit_code == 0 and re.search(r"claims, patching/default \(\d+ runs\), probes/parity", res.output)
    res = cli("inspect", moved, "--detail")  # the results store alone: its recorded source is found
    assert res.exit_code == 0 and "parity-lstm-default-s1" in res.output and "probes/parity" in res.output
    assert _sha(zipped) == before


class _NoListing(http.server.SimpleHTTPRequestHandler):
    """A static server that serves files but never lists a directory (like most CDNs)."""

    def log_message(self, *args) -> None:
        pass

    def list_directory(self, path):
        self.send_error(404, "no listing")


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # clients closing early
        pass


@pytest.fixture
def served(shared):
    srv = _Server(("127.0.0.1", 0), functools.partial(_NoListing, directory=str(shared["dir"])))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    thread.join()


@pytest.mark.slow
def test_a_store_served_over_http_is_analysed_into_a_local_results_store(shared, served, tmp_path):
    pytest.importorskip("aiohttp")  # fsspec's HTTP filesystem (fsspec[http])
    res = cli("probe", served, "--positions", "pooled", "--folds", "2")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "cannot be written (a read-only URL): give --results DIR|URL" in res.output
    results = tmp_path / "results.zarr"
    res = cli("probe", served, "--positions", "pooled", "--folds", "2", "--results", results)
    assert res.exit_code == 0 and f"results go to {results}" in res.output, res.output
    res = cli("stats", served, "--claims", shared["experiment"], "--results", results)
    assert res.exit_code == 0 and "lstm-readable-L0:" in res.output, res.output
    res = cli("report", served, "--results", results, "--out", tmp_path / "report", "--no-chunk-check")
    assert res.exit_code == 0, res.output
    assert Store.open(str(results)).results() == ["claims", "probes/parity", "seed_plan"]
    assert cli("validate", served).exit_code == 0


def test_a_results_store_paired_with_another_store_is_refused(shared, make_store, tmp_path):
    results = tmp_path / "r.zarr"
    st = open_analysis(str(shared["zip"]), results=str(results))
    assert isinstance(st, PairedStore) and st.run_ids()
    other = make_store()
    res = cli("probe", other.location, "--results", results)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert f"results store {results} belongs to {shared['zip']}" in res.output
    assert f"not to {other.location}" in res.output
    with pytest.raises(ResultsMismatchError):
        open_analysis(str(other.location), results=str(results), write=False)


def test_read_only_stores_opened_for_writing_say_so(shared):
    with pytest.raises(ReadOnlyStoreError, match=r"packed \(zip\) store, which cannot be written.*--results"):
        Store.open(str(shared["zip"]), mode="r+")
    res = cli("capture", shared["experiment"], "--store", shared["zip"])
    assert res.exit_code == 2 and "cannot be written" in res.output and "not a layerstate store" not in res.output


def test_python_api_results_beside_a_zip(shared, tmp_path):
    from analysis.probes import probe

    zipped = tmp_path / "s.zip"
    shutil.copy(shared["zip"], zipped)
    before = _sha(zipped)
    probe(str(zipped), positions="pooled", folds=2, lengths=[12], runs=["parity-lstm-default-s0"], save=True)
    assert Store.open(str(tmp_path / "s.results.zarr")).results() == ["probes/parity"]
    mine = tmp_path / "mine.zarr"
    probe(open_analysis(str(zipped), results=str(mine)), positions="pooled", folds=2,
          runs=["parity-gru-default-s0"], save=True)
    assert Store.open(str(mine)).results() == ["probes/parity"]
    assert _sha(zipped) == before


def test_the_source_identity_follows_activations_not_results(make_store, tmp_path):
    import numpy as np
    import xarray as xr
    import zarr

    from store.access.pairing import source_identity

    st = make_store(n=32, block_size=16)
    before = source_identity(Store.open(str(st.location)).root)
    st.write_result("probes/x", xr.Dataset({"a": ("k", np.arange(3.0))}))
    assert source_identity(Store.open(str(st.location)).root) == before
    copy = tmp_path / "copy.zarr"
    shutil.copytree(str(st.location), copy)
    assert source_identity(Store.open(str(copy)).root) == before
    logits = zarr.open_array(copy / "runs" / "r0" / "len_012" / "logits", mode="r+")
    logits[:16] = logits[:16] + 1  # other activations, same metadata
    assert source_identity(Store.open(str(copy)).root) != before
    st.add_run("r1", task="parity", arch="gru", seed=0)
    assert source_identity(Store.open(str(st.location)).root) != before
