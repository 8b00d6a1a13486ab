"""``--device`` is resolved once, where the command line is read, and reaches every unit that
runs a model: training, capture and, under ``layerstate run``, the analyses that rebuild the
runs' models (ablation, patching, interchange)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import capture.device
from capture.device import CPU, Device, DeviceError, as_device, parse_device
from layerstate.cli import main
from layerstate.executor import Executor
from layerstate.experiment import parse_experiment
from layerstate.work import work_list

TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["parity"]
archs = ["lstm"]
seeds = [0]

[train]
length = 12
steps = 2
batch_size = 8
eval_every = 2
n_eval = 8
eval_lengths = [12]
n_test = 8
warmup = 1

[capture]
lengths = [12]
n_sequences = 16
counterfactual_pairs = 8
counterfactual_lengths = [12]

[analysis]
probe = false
ablate = true
ablate_settings = ["random:1"]
ablate_refit_rows = 200
patch = true
patch_length = 12
patch_positions = [0, 11]

[models.lstm]
d_model = 8
n_layers = 1
"""


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(("device", "message"), [
    ("tpu", "unknown device 'tpu'; use cpu or cuda[:N]"),
    ("cuda:x", "unknown device 'cuda:x'; use cpu or cuda[:N]"),
    ("meta", "unknown device 'meta'; use cpu or cuda[:N]"),
    ("cuda", "device 'cuda': no CUDA GPU is available here; use cpu (--device cpu)"),
])
@pytest.mark.parametrize("command", ["run", "train", "capture", "ablate", "patch"])
def test_a_bad_device_is_one_line_before_anything_is_read_or_created(tmp_path, monkeypatch, command,
                                                                       device, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    out = tmp_path / "out"
    args = {
        "run": ["run", str(exp), "--out", str(out)],
        "train": ["train", str(exp), "--store", str(out)],
        "capture": ["capture", str(exp), "--store", str(out)],
        "ablate": ["ablate", str(out)],  # no store there: the device is refused first
        "patch": ["patch", str(out)],
    }[command]
    res = CliRunner().invoke(main, [*args, "--device", device])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"layerstate: error: {message}"]
    assert not out.exists()


def test_a_gpu_the_machine_lacks_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DeviceError, match=r"device 'cuda:2': this machine has 2 CUDA GPU\(s\), cuda:0..cuda:1; name one"):
        parse_device("cuda:2")
    assert parse_device("cuda:1").name == "cuda:1"  # one of several: recorded with its index
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert parse_device("cuda:0").name == "cuda"  # the one GPU, as `--device cuda` records it


def test_a_resolved_device_is_not_parsed_again(monkeypatch):
    calls: list[str] = []
    real = capture.device.parse_device
    monkeypatch.setattr(capture.device, "parse_device", lambda text: calls.append(text) or real(text))
    where = as_device("cpu")
    assert as_device(where) is where and calls == ["cpu"]
    assert where == CPU and where.on_host and not where.pinned


def test_only_units_that_run_models_get_the_commands_device(tmp_path):
    gpu = Device(torch.device("cuda"))  # never used to compute here
    ex = Executor("threads", str(tmp_path), device=gpu)
    exp = parse_experiment({**_toml(), "analysis": {**_toml()["analysis"], "probe": True}})
    where = {w.key: ex.device_for(w) for w in work_list(exp)}
    assert where == {
        "train parity-lstm-default-s0": gpu,
        "capture parity-lstm-default-s0 len_12": gpu,
        "capture parity-lstm-default-s0 cf_12": gpu,
        "behaviour/parity": CPU, "probes/parity": CPU, "pairs/parity": CPU,
        "ablation/parity": gpu, "patching/parity": gpu,
        "claims": CPU, "report": CPU,
    }


def _toml() -> dict:
    import tomllib

    return tomllib.loads(TINY)


@pytest.mark.slow
def test_run_device_reaches_the_analyses_that_rebuild_models_and_is_parsed_once(tmp_path, monkeypatch):
    """``layerstate run --device cuda`` on a machine made to look like it has one GPU, over a
    store trained and captured on the CPU: every model rebuilt (capture's, the analyses') is
    asked for ``cuda`` (and built on the CPU instead), and the results record it."""
    import analysis.interventions._common as common
    import capture.rebuild
    import layerstate.cli.base
    from layerstate.pipeline import capture_experiment, train_experiment
    from store import Store

    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    store = tmp_path / "s.zarr"
    plan = parse_experiment(_toml()).plan
    Store.create(str(store))
    list(train_experiment(plan, str(store), scheduler="sync"))
    capture_experiment(plan, str(store), scheduler="sync")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    parsed: list[str] = []
    real_parse = capture.device.parse_device
    # patched where the command line reads it (its module imports the name)
    monkeypatch.setattr(layerstate.cli.base, "parse_device", lambda text: parsed.append(text) or real_parse(text))
    asked: list[tuple[str, str]] = []  # (who rebuilt it, the device asked for) per model

    def on_the_cpu(who: str, real):
        def model_from(attrs, weights, device):
            asked.append((who, device.name))
            return real(attrs, weights, CPU)
        return model_from

    monkeypatch.setattr(capture.rebuild, "model_from", on_the_cpu("capture", capture.rebuild.model_from))
    monkeypatch.setattr(common, "model_from", on_the_cpu("analysis", common.model_from))
    res = _invoke("run", str(exp), "--out", str(tmp_path / "out"), "--store", str(store),
                  "--device", "cuda", "--jobs", "1", "--scheduler", "sync")
    assert res.exit_code == 0, res.output
    assert parsed == ["cuda"]  # at the command line's edge only
    assert {who for who, _ in asked} == {"capture", "analysis"}  # ablation's and patching's models
    assert {name for _, name in asked} == {"cuda"}
    st = Store.open(str(store))
    for name in ("ablation/parity", "patching/parity"):
        assert st.read_result(name).attrs["device"] == "cuda", name
