"""The fused kernels as torch operators (`capture.models.fused_ops`): registered correctly
(torch's own operator checks), traced by ``torch.compile`` into one graph with
``[train] compile_through_kernels`` and split around as before without it, the option refused
without its bases, recorded only when set, and a run with it killed with SIGKILL resumed bit
for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from capture.experiment import TrainConfig
from capture.models import ModelConfig, build_model
from capture.models import mamba as mamba_paths
from capture.train import check_trained_with, train_run, training_forward
from store import RunConflictError, Store
from tests.capture.compile_helpers import Graphs, compile_with
from tests.capture.test_train import tiny_experiment

pytest.importorskip("numba")


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _operator_cases():
    u, delta, B, C = _randn(2, 6, 5), F.softplus(_randn(2, 6, 5, seed=1)), _randn(2, 6, 3, seed=2), _randn(2, 6, 3, seed=3)
    At = -2 * torch.rand(3, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    ops = torch.ops.layerstate
    yield "scan", ops.selective_scan.default, (u, delta, At, B, C, False)
    yield "scan-fma", ops.selective_scan.default, (u, delta, At, B, C, True)
    x, Wt, bias = _randn(2, 7, 4), _randn(3, 4, seed=5), _randn(4, seed=6)
    yield "conv-causal", ops.depthwise_conv.default, (x, Wt, bias, 7)
    yield "conv-full", ops.depthwise_conv.default, (x, Wt, bias, 9)
    xh, dth = _randn(2, 4, 6, 3), F.softplus(_randn(2, 4, 6, seed=7))
    A = -torch.rand(4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    Bg, Cg = _randn(2, 2, 6, 3, seed=9), _randn(2, 2, 6, 3, seed=10)
    yield "block", ops.ssd_block.default, (xh, dth, A, Bg, Cg)


@pytest.mark.parametrize(("op", "args"), [pytest.param(op, args, id=name) for name, op, args in _operator_cases()])
def test_each_operator_passes_torchs_operator_checks(op, args):
    # schema, fake (shape-only) implementation, autograd registration, and AOTAutograd's
    # tracing of forward and backward, each against the real kernels' outputs
    args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("arch", ["mamba", "mamba2"])
def test_compile_traces_through_the_kernels_only_when_asked(arch):
    model = build_model(ModelConfig(arch=arch, d_model=16, n_layers=2), vocab_size=5, n_classes=3, seed=0).train()
    tokens = torch.randint(0, 5, (3, 12), generator=torch.Generator().manual_seed(0))
    weights = torch.randn(3, 12, 3, generator=torch.Generator().manual_seed(1))

    def run(forward):
        logits = forward(tokens)
        return [logits, *torch.autograd.grad((logits * weights).sum(), list(model.parameters()))]

    mamba_paths.set_fused_path(model, True)
    eager = run(model)
    counts = {}
    for traced in (False, True):
        mamba_paths.set_fused_path(model, True, traced=traced)
        torch._dynamo.reset()
        graphs = Graphs()
        out = run(torch.compile(model, backend=graphs, dynamic=False))
        counts[traced] = graphs.count
        assert all(torch.equal(a, b) for a, b in zip(out, eager, strict=True))  # the same operations
    # traced: the whole forward one graph; otherwise split at each layer's Conv1D and scan
    assert counts == {True: 1, False: counts[False]} and counts[False] > 2
    torch._dynamo.reset()


def test_a_compiled_run_does_not_depend_on_what_the_process_compiled_before(monkeypatch):
    # a worker trains run after run: a model compiled through the kernels after one compiled
    # around them reused the latter's frames (dynamo guarded only the flag's type), ran as
    # 2 graphs instead of 1, and under inductor its gradients moved by 1e-5. Where dynamo
    # splits a step is the backend's input, not its doing: counted here with one counting
    # backend for the three compiles, as one inductor serves a worker's runs
    graphs = Graphs()
    compile_with(monkeypatch, graphs)
    tokens = torch.randint(0, 5, (8, 8), generator=torch.Generator().manual_seed(0))

    def gradients(through):
        model = build_model(ModelConfig(arch="mamba2", d_model=16, n_layers=2), vocab_size=5, n_classes=3,
                            seed=0).train()
        forward = training_forward(model, TrainConfig(fused_kernels=True, compile=True,
                                                      compile_through_kernels=through))
        runs = graphs.runs
        grads = torch.autograd.grad(forward(tokens).square().sum(), list(model.parameters()))
        return grads, graphs.runs - runs

    first, first_graphs = gradients(True)
    _, around_graphs = gradients(False)
    again, again_graphs = gradients(True)
    torch._dynamo.reset()
    assert first_graphs == 1 and around_graphs > 2  # through the kernels, the step is one graph
    assert again_graphs == first_graphs
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_the_option_needs_compile_and_the_kernels_and_says_so_in_one_line():
    for options in ({}, {"compile": True}, {"fused_kernels": True}):
        with pytest.raises(ValueError, match="compile_through_kernels = true needs compile = true and "
                                             "fused_kernels = true") as caught:
            TrainConfig(compile_through_kernels=True, **options)
        assert "\n" not in str(caught.value).split("\n  ")[0]
    assert TrainConfig(compile=True, fused_kernels=True, compile_through_kernels=True).compile_through_kernels


def test_the_option_is_recorded_only_when_set(tmp_path, monkeypatch):
    compile_with(monkeypatch, "eager")  # what is recorded, not what inductor makes of it
    st = Store.create(str(tmp_path / "a.zarr"))
    train = {"steps": 6, "batch_size": 8, "eval_every": 3, "n_eval": 16, "eval_lengths": [8], "n_test": 16,
             "length": 8, "warmup": 1, "checkpoint_seconds": 0, "fused_kernels": True, "compile": True}
    spec = tiny_experiment(arch="mamba2", steps=6, train=train).runs()[0]
    train_run(st, spec)
    assert "compile_through_kernels" not in st.run_attrs(spec.run_id)["train_config"]
    on = tiny_experiment(arch="mamba2", steps=6, train={**train, "compile_through_kernels": True}).runs()[0]
    with pytest.raises(RunConflictError, match="compile_through_kernels: False stored, True now"):
        check_trained_with(st, spec.run_id, on.train)


_TRAIN = """
import json, sys
from capture.experiment import parse_plan
from capture.train import train_run
from store import Store
train_run(Store.open(sys.argv[1], mode="r+"), parse_plan(json.loads(sys.argv[2])).runs()[0])
"""


def _checkpoint_step(path) -> int | None:
    try:
        checkpoint = Store.open(str(path)).read_checkpoint("parity-mamba2-default-s0")
    except Exception:  # the store is being written
        return None
    return None if checkpoint is None else checkpoint.step


@pytest.mark.slow
def test_a_run_compiled_through_the_kernels_killed_with_sigkill_resumes_bit_for_bit(tmp_path):
    # Mamba-2's options in bench.training's after setting (test_fused_scan's in-process resume
    # test takes Mamba's); batches of 8 sequences of 8 tokens, as the compiled tests there
    train = {"steps": 200, "batch_size": 8, "eval_every": 50, "n_eval": 16, "eval_lengths": [8], "n_test": 16,
             "length": 8, "warmup": 2, "patience": 100, "checkpoint_seconds": 0.5, "fused_kernels": True,
             "compile": True, "compile_through_kernels": True, "fused_adamw": True}
    data = {"experiment": {"name": "tiny"}, "grid": {"tasks": ["parity"], "archs": ["mamba2"], "seeds": [0]},
            "train": train, "models": {"mamba2": {"d_model": 16, "n_layers": 2}}}
    spec = tiny_experiment(arch="mamba2", train=train).runs()[0]
    whole = Store.create(str(tmp_path / "whole.zarr"))
    train_run(whole, spec)

    path = tmp_path / "killed.zarr"
    Store.create(str(path))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-c", _TRAIN, str(path), json.dumps(data)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while _checkpoint_step(path) is None and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert p.poll() is None, p.communicate()[1].decode()[-2000:]  # still training
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    step = _checkpoint_step(path)
    assert step is not None and 0 < step < 200, step
    st = Store.open(str(path), mode="r+")
    assert train_run(st, spec).resumed_at[0] == step
    a, b = whole.read_weights(spec.run_id), st.read_weights(spec.run_id)
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    attrs = st.run_attrs(spec.run_id)
    assert attrs["metrics"]["curve"] == whole.run_attrs(spec.run_id)["metrics"]["curve"]
    assert attrs["implementation"] == "torch-ssd-fused"
    assert all(attrs["train_config"][k] is True for k in ("fused_kernels", "compile", "compile_through_kernels",
                                                           "fused_adamw"))
