"""Every stage on a GPU (marked ``gpu``: skipped without CUDA, not part of ``make test``).

Run on a GPU machine with ``bench/gpu_check.sh`` (docs/gpu.md). A tiny grid of all ten
architectures goes through ``layerstate run`` (train, capture, probe, ablate, patch,
claims, report) on the GPU; the same trained weights captured on the CPU and on the GPU
store hidden states equal within float16 rounding, and the probes and claims computed from
the two stores agree; a training run killed part-way on the GPU resumes to the same weights.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from capture.models import BUILTIN_ARCHS as ARCHS
from store import Store

#: ``LAYERSTATE_GPU_DEVICE=cpu`` runs the module's logic on a CPU (a dry run of the tests
#: themselves, not a GPU result); ``LAYERSTATE_GPU_ARCHS=lstm,gru`` narrows the grid.
DEVICE = os.environ.get("LAYERSTATE_GPU_DEVICE", "cuda")
GRID_ARCHS = tuple(a for a in os.environ.get("LAYERSTATE_GPU_ARCHS", ",".join(ARCHS)).split(",") if a)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE != "cpu" and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

EXPERIMENT = """
[experiment]
name = "gpu-check"
title = "every stage on a GPU: ten architectures, tiny"

[grid]
tasks = ["parity"]
archs = {archs}
seeds = [0, 1]

[train]
length = 12
steps = 30
batch_size = 32
eval_every = 10
n_eval = 64
eval_lengths = [12, 24]
n_test = 64

[capture]
lengths = [12]
n_sequences = 96
counterfactual_pairs = 32
counterfactual_lengths = [12]

[analysis]
probe = true
probe_positions = "pooled"
probe_train_length = 12
probe_folds = 3
ablate = true
ablate_settings = ["probe"]
ablate_lengths = [12]
patch = true
patch_length = 12
patch_positions = [0, 5, 11]

{models}

[[claims]]
id = "lstm-vs-transformer"
statement = "The LSTM is more accurate than the Transformer on Parity at length 24"
kind = "difference"
task = "parity"
compare = "arch"
treatment = "lstm"
reference = "transformer"
direction = "greater"
margin = 0.05
length = 24
"""


def _experiment(path: Path) -> Path:
    models = "\n".join(f"[models.{a}]\nd_model = 16\nn_layers = 2" for a in GRID_ARCHS)
    path.write_text(EXPERIMENT.format(archs=list(GRID_ARCHS), models=models).replace("'", '"'))
    return path


def _layerstate(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "layerstate.cli", *args], capture_output=True,
                         text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The grid trained once on the CPU, then run end to end from two copies of that store:
    ``cpu`` (capture and the rest on the CPU) and ``gpu`` (capture on the GPU)."""
    root = tmp_path_factory.mktemp("gpu")
    exp = _experiment(root / "exp.toml")
    _layerstate("train", str(exp), "--store", str(root / "trained.zarr"), "--jobs", "4")
    out = {}
    for name, device in (("cpu", "cpu"), ("gpu", DEVICE)):
        shutil.copytree(root / "trained.zarr", root / f"{name}.zarr")
        _layerstate("run", str(exp), "--out", str(root / name), "--store", str(root / f"{name}.zarr"),
                    "--device", device)
        out[name] = root / f"{name}.zarr"
    return exp, root, out


def _f16_close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Equal within float16 rounding: at most two float16 steps apart (the float32 values
    before the cast differ by float32 rounding, which can move the cast one step)."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    step = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float16)).astype(np.float32)
    bad = np.abs(a32 - b32) > 2 * step + 1e-6
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} values differ by more than 2 float16 steps"


def test_the_whole_grid_runs_on_the_gpu_and_records_its_device(runs):
    exp, root, stores = runs
    gpu = Store.open(str(stores["gpu"]))
    assert len(gpu.run_ids()) == 2 * len(GRID_ARCHS)
    for rid in gpu.run_ids():
        assert DEVICE in gpu.run_group(rid)["len_012"].attrs["devices"]
    assert (root / "gpu" / "report.html").exists() or any((root / "gpu").rglob("*.html"))


def test_gpu_capture_equals_the_cpu_capture_within_float16_rounding(runs):
    _, _, stores = runs
    cpu, gpu = Store.open(str(stores["cpu"])), Store.open(str(stores["gpu"]))
    for rid in cpu.run_ids():
        for kind, L in (("len", 12), ("cfclean", 12), ("cfcorrupt", 12)):
            a, b = cpu.open_length(rid, L, kind=kind), gpu.open_length(rid, L, kind=kind)
            assert np.array_equal(a.tokens.values, b.tokens.values)
            _f16_close(a.hidden.values, b.hidden.values, f"{rid} {kind}_{L} hidden")
            _f16_close(a.logits.values, b.logits.values, f"{rid} {kind}_{L} logits")


def test_probes_and_claims_from_the_two_stores_agree(runs):
    _, _, stores = runs
    cpu, gpu = Store.open(str(stores["cpu"])), Store.open(str(stores["gpu"]))
    probes = [r for r in cpu.results() if r.startswith("probes/")]
    assert probes
    for name in probes:
        a, b = cpu.read_result(name), gpu.read_result(name)
        for var in a.data_vars:
            if np.issubdtype(a[var].dtype, np.floating):
                np.testing.assert_allclose(a[var].values, b[var].values, atol=0.02, equal_nan=True,
                                           err_msg=f"{name} {var}")
    claims = [r for r in cpu.results() if r.startswith("claims")]
    assert claims
    for name in claims:
        a, b = cpu.read_result(name), gpu.read_result(name)
        for var in a.data_vars:
            if a[var].dtype.kind in "OUSb":
                assert (a[var].values == b[var].values).all(), f"{name} {var}"


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "deltanet"])
def test_a_killed_gpu_training_resumes_to_the_same_weights(tmp_path, arch):
    from capture.train import train_run
    from tests.capture.test_train import _every_eval, _Stop, _stop_at, tiny_experiment

    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        base = tiny_experiment(arch=arch, steps=40, train={
            "steps": 40, "batch_size": 16, "eval_every": 10, "n_eval": 32, "eval_lengths": [12],
            "n_test": 32, "length": 12, "warmup": 2, "patience": 10, "checkpoint_seconds": 0})
        whole = Store.create(str(tmp_path / "whole.zarr"))
        train_run(whole, base.runs()[0], device=DEVICE)
        spec = _every_eval(base).runs()[0]
        st = Store.create(str(tmp_path / "cut.zarr"))
        with pytest.raises(_Stop):
            train_run(st, spec, device=DEVICE, progress=_stop_at(30))
        resumed = train_run(st, spec, device=DEVICE)
        assert resumed.resumed_at == (20,)
        wa, wb = whole.read_weights(spec.run_id), st.read_weights(spec.run_id)
        assert all(np.array_equal(wa[k], wb[k]) for k in wa), "resumed weights differ"
        assert st.run_attrs(spec.run_id)["device"] == DEVICE
    finally:
        torch.use_deterministic_algorithms(False)


def test_interventions_on_the_gpu_match_the_cpu(runs):
    import xarray as xr

    from analysis.interventions import rebuild
    from analysis.interventions.patch_kernels import patched_logits, patched_logits_reference

    _, _, stores = runs
    st = Store.open(str(stores["cpu"]))
    for rid in st.run_ids()[:: 2]:
        clean = st.open_length(rid, 12, kind="cfclean")
        bad = st.open_length(rid, 12, kind="cfcorrupt")
        patch = xr.DataArray(np.ones((clean.sizes["sequence"], 12), bool), dims=("sequence", "position"))
        on_cpu = rebuild(st, rid, "cpu")
        on_gpu = rebuild(st, rid, DEVICE)
        for fn in (patched_logits, patched_logits_reference):
            a = fn(on_cpu, clean, bad, "L0", patch).values
            b = fn(on_gpu, clean, bad, "L0", patch).values
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=f"{rid} {fn.__name__}")


def test_capture_batches_several_blocks_and_resumes_on_the_gpu(runs, tmp_path):
    from capture.record import capture_length

    _, root, _ = runs
    rid = Store.open(str(root / "trained.zarr")).run_ids()[0]
    for name in ("whole", "cut"):
        shutil.copytree(root / "trained.zarr", tmp_path / f"{name}.zarr")
    whole = Store.open(str(tmp_path / "whole.zarr"), mode="r+")
    cut = Store.open(str(tmp_path / "cut.zarr"), mode="r+")
    kw = dict(n_sequences=200, block_size=16, blocks_per_pass=4, device=DEVICE)
    capture_length(whole, rid, 12, **kw)
    seen = []

    def stop(n):
        seen.append(n)
        if len(seen) == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture_length(cut, rid, 12, progress=stop, **kw)
    capture_length(cut, rid, 12, **kw)
    a, b = whole.open_length(rid, 12), cut.open_length(rid, 12)
    assert a.hidden.values.tobytes() == b.hidden.values.tobytes()
