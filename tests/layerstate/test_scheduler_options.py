"""One --scheduler and one -S on every command that does work on a store: same forms, same
errors, checked before anything is created; -S reaches the store for analyses too."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
from click.testing import CliRunner

from layerstate.cli import main
from tests.conftest import synthetic_arrays

COMMANDS = ("run", "train", "capture", "probe", "ablate", "patch", "stats", "report")

TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["parity"]
archs = ["lstm"]

[train]
length = 8
steps = 4

[capture]
lengths = [8]
n_sequences = 8

[models.lstm]
d_model = 8
n_layers = 1
"""


CLAIMS = """
[[claims]]
id = "readable"
statement = "parity is readable at L0"
kind = "readable_by"
metric = "probe_accuracy"
task = "parity"
arch = "lstm"
layer = "L0"
threshold = 0.4
length = 12
"""


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _args(command: str, tmp_path) -> list:
    """The command's required arguments, pointing at paths that do not exist yet (an
    experiment file where one is needed)."""
    exp, claims = tmp_path / "tiny.toml", tmp_path / "claims.toml"
    exp.write_text(TINY)
    claims.write_text(CLAIMS)
    store, out = tmp_path / "s.zarr", tmp_path / "out"
    return {
        "run": [exp, "--out", out],
        "train": [exp, "--store", store],
        "capture": [exp, "--store", store],
        "stats": [store, "--claims", claims],
        "report": [store, "--out", out],
    }.get(command, [store])


@pytest.fixture
def closed_port() -> str:
    """An address on 127.0.0.1 where nobody listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_same_scheduler_and_storage_options(command):
    params = {p.name: p for p in main.commands[command].params}
    assert params["scheduler"].default == "auto"
    help_text = params["scheduler"].help
    assert all(word in help_text for word in ("auto", "processes", "threads", "local:N"))
    assert "-S" in params["storage_options"].opts and params["storage_options"].multiple


@pytest.mark.timeout(60)  # a refused address is named at once, a silent one within 5 s
@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreachable_scheduler_is_one_line_exit_2_before_anything_is_made(command, tmp_path,
                                                                            closed_port):
    res = cli(command, *_args(command, tmp_path), "--scheduler", closed_port)
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"layerstate: error: could not connect to a dask scheduler at '{closed_port}'")
    assert "dask scheduler" in line and "'threads'" in line  # the fix
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("scheduler", ["process", "local:0", "local:two"])
def test_a_scheduler_of_no_accepted_form_is_refused_as_the_line_is_read(scheduler, tmp_path):
    res = cli("train", *_args("train", tmp_path), "--scheduler", scheduler)
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"layerstate: error: --scheduler: scheduler {scheduler!r}")
    assert "local:" in line
    assert not (tmp_path / "s.zarr").exists()


def test_stats_and_report_only_check_a_local_cluster_request(tmp_path):
    """Their work is not split into tasks: local:N starts nothing (and a missing store is
    still the error reported)."""
    for command in ("stats", "report"):
        res = cli(command, *_args(command, tmp_path), "--scheduler", "local:2")
        assert res.exit_code == 2 and "s.zarr does not exist" in res.output, res.output
        assert "local cluster" not in res.output


@pytest.mark.parametrize("command", ["probe", "ablate", "patch", "stats", "report"])
def test_storage_options_open_the_store_and_its_results_store(command, tmp_path, monkeypatch):
    """-S KEY=VALUE (JSON where it parses) is what the store is opened with, and the results
    store given by --results."""
    import layerstate.cli.base
    import layerstate.cli.claims_commands
    import layerstate.cli.store_commands
    from store import MissingError

    seen = {}

    def spy(url, **kwargs):
        seen.update(url=url, **kwargs)
        raise MissingError("opened")

    # patched in each command module that opens stores (each imports the name)
    for module in (layerstate.cli.base, layerstate.cli.claims_commands, layerstate.cli.store_commands):
        monkeypatch.setattr(module, "open_analysis", spy)
    res = cli(command, *_args(command, tmp_path), "--results", "s3://bucket/results.zarr",
              "-S", "anon=true", "-S", 'client_kwargs={"endpoint_url": "http://127.0.0.1:9"}')
    assert res.exit_code == 2 and res.output.strip() == "layerstate: error: opened", res.output
    want = {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    assert seen["url"] == str(tmp_path / "s.zarr") and seen["results"] == "s3://bucket/results.zarr"
    assert seen["storage_options"] == want and seen["results_options"] == want


def test_probe_on_an_object_store_known_only_through_storage_options(s3_server):
    """A store on a local S3 server whose endpoint and keys are given only by -S: probe reads
    it and writes its results there."""
    from store import Store

    url = "s3://layerstate-test/options.zarr"
    st = Store.create(url, title="options", storage_options=s3_server)
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    st.write_length("r0", 12, **synthetic_arrays(np.random.default_rng(0), n=32, n_layers=1),
                    block_size=16)
    opts = [f"-S{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in s3_server.items()]
    res = cli("probe", url, "--target", "parity", "--positions", "pooled", "--folds", "2",
              "--scheduler", "sync", *opts)
    assert res.exit_code == 0, res.output
    assert "stored results/probes/parity" in res.output
    assert "probes/parity" in Store.open(url, storage_options=s3_server).results()
