"""The fused CPU kernels for Mamba and Mamba-2 (numba, ``[train] fused_kernels``): Mamba-1's
scan, Mamba-2's one-block weights and the depthwise Conv1D, held to their references, deterministic, opt-in and recorded,
resumable bit for bit; without the kernels, the torch paths after one warning."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import capture.models
from capture.experiment import TrainConfig
from capture.models import ModelConfig, build_model, fused_ops, scan, ssd
from capture.models import mamba as mamba_paths
from capture.models.scan import selective_scan, selective_scan_reference
from capture.train import check_trained_with, train_run, training_forward
from store import RunConflictError, Store
from tests.capture.compile_helpers import TRAIN, parity_model, parity_tokens
from tests.capture.test_train import _every_eval, _Stop, _stop_at, tiny_experiment

pytest.importorskip("numba")


def _inputs(dtype, batch=3, length=13, d_inner=5, d_state=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, length, d_inner, generator=g, dtype=dtype)
    delta = F.softplus(torch.randn(batch, length, d_inner, generator=g, dtype=dtype))
    A = -2 * torch.rand(d_inner, d_state, generator=g, dtype=dtype)
    B = torch.randn(batch, length, d_state, generator=g, dtype=dtype)
    C = torch.randn(batch, length, d_state, generator=g, dtype=dtype)
    D = torch.randn(d_inner, generator=g, dtype=dtype)
    z = torch.randn(batch, length, d_inner, generator=g, dtype=dtype)
    return [x.requires_grad_() for x in (u, delta, A, B, C, D, z)]


def _output_and_grads(function, inputs, **kwargs):
    out = function(*inputs, **kwargs)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    return out, torch.autograd.grad((out * weights).sum(), inputs)


# d_inner 5 (under one lane block), 37 (two blocks and a ragged rest); a single step
@pytest.mark.parametrize(("length", "d_inner", "d_state"), [(13, 5, 4), (9, 37, 16), (1, 20, 3)])
def test_fused_scan_matches_reference_loop_outputs_and_gradients(length, d_inner, d_state):
    inputs = _inputs(torch.float32, length=length, d_inner=d_inner, d_state=d_state)
    fused, grads = _output_and_grads(selective_scan, inputs, fused=True)
    reference, grads_ref = _output_and_grads(selective_scan_reference, inputs)
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=0)
    for name, a, b in zip("u delta A B C D z".split(), grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=0, msg=name)


def test_fused_scan_in_float64_agrees_with_the_chunked_scan_to_float64_rounding():
    inputs = _inputs(torch.float64, length=11, d_inner=19, d_state=5)
    fused, grads = _output_and_grads(selective_scan, inputs, fused=True)
    chunked, grads_chunked = _output_and_grads(selective_scan, inputs)
    torch.testing.assert_close(fused, chunked, atol=1e-12, rtol=1e-12)
    for a, b in zip(grads, grads_chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-11)


@pytest.mark.parametrize("fma", [False, True])
def test_fused_backward_is_the_exact_gradient(fma):
    inputs = _inputs(torch.float64, length=6, d_inner=18, d_state=3)[:5]
    assert torch.autograd.gradcheck(lambda *x: fused_ops.fused_scan(*x, fma), inputs)


@pytest.mark.parametrize("fma", [False, True])
def test_fused_scan_is_deterministic_bit_for_bit(fma):
    inputs = _inputs(torch.float32, batch=4, length=20, d_inner=48, d_state=16, seed=2)
    first, grads = _output_and_grads(selective_scan, inputs, fused=True, fma=fma)
    again, grads_again = _output_and_grads(selective_scan, inputs, fused=True, fma=fma)
    assert torch.equal(first, again)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_again, strict=True))


@pytest.mark.parametrize(("length", "d_inner", "d_state"), [(13, 5, 4), (9, 37, 16)])
def test_the_fma_scan_matches_the_reference_and_rounds_differently(length, d_inner, d_state):
    """The kernels' twins with fused multiply-adds compute the same function (held to the
    reference loop as the kernels are) with another rounding: were the flag lost, the option
    would record a rounding that did not happen."""
    inputs = _inputs(torch.float32, batch=8, length=length, d_inner=d_inner, d_state=d_state, seed=3)
    fma, grads = _output_and_grads(selective_scan, inputs, fused=True, fma=True)
    reference, grads_ref = _output_and_grads(selective_scan_reference, inputs)
    torch.testing.assert_close(fma, reference, atol=1e-5, rtol=0)
    for name, a, b in zip("u delta A B C D z".split(), grads, grads_ref, strict=True):
        # A's gradient, summed over batch and positions, reaches ~180, where float32's spacing
        # is 1.5e-5: a few roundings apart there (as the kernels without fma are) is 1.3e-6 of it
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1.3e-6, msg=name)
    exact, grads_exact = _output_and_grads(selective_scan, inputs, fused=True)
    assert not torch.equal(fma, exact)
    assert not all(torch.equal(a, b) for a, b in zip(grads, grads_exact, strict=True))


def test_fused_scan_applies_only_to_cpu_float32_and_float64():
    u = torch.zeros(2, 3, 4)
    assert scan.fused_usable(u, u)
    assert not scan.fused_usable(u.half(), u.half())
    assert not scan.fused_usable(u.to("meta"), u.to("meta"))  # any other device: the torch scan
    half = [x.detach().half() for x in _inputs(torch.float32)]  # promoted to float32 first
    torch.testing.assert_close(selective_scan(*half, fused=True), selective_scan(*half), atol=1e-5, rtol=0)


def _block_inputs(dtype, batch=3, length=11, heads=4, head_dim=5, groups=2, d_state=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads, head_dim, generator=g, dtype=dtype)
    dt = torch.randn(batch, length, heads, generator=g, dtype=dtype)  # before bias and softplus
    A = -3 * torch.rand(heads, generator=g, dtype=dtype)
    B = torch.randn(batch, length, groups, d_state, generator=g, dtype=dtype)
    C = torch.randn(batch, length, groups, d_state, generator=g, dtype=dtype)
    D = torch.randn(heads, generator=g, dtype=dtype)
    bias = torch.randn(heads, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (x, dt, A, B, C, D, bias)]


def _block(*inputs, fused):
    x, dt, A, B, C, D, bias = inputs
    return ssd.ssd_block(x, dt, A, B, C, D=D, dt_bias=bias, dt_softplus=True, fused=fused)


# one group and several, a single position, and the Jiang layer's shapes (16 heads of 32)
@pytest.mark.parametrize(("length", "heads", "head_dim", "groups", "d_state"),
                         [(11, 4, 5, 2, 3), (17, 3, 8, 1, 16), (1, 2, 3, 1, 2), (40, 16, 32, 1, 16)])
def test_fused_block_matches_the_torch_block_outputs_and_gradients(length, heads, head_dim, groups, d_state):
    inputs = _block_inputs(torch.float32, length=length, heads=heads, head_dim=head_dim,
                           groups=groups, d_state=d_state)
    fused, grads = _output_and_grads(_block, inputs, fused=True)
    torch_block, grads_torch = _output_and_grads(_block, inputs, fused=False)
    assert fused.dtype == torch.float32
    top = torch_block.abs().max().item()  # float rounding of sums of up to `length` terms
    torch.testing.assert_close(fused / top, torch_block / top, atol=1e-6, rtol=0)
    for name, a, b in zip("x dt A B C D bias".split(), grads, grads_torch, strict=True):
        scale = b.abs().max().item() or 1.0  # A's gradient is exactly 0 at one position
        torch.testing.assert_close(a / scale, b / scale, atol=2e-6, rtol=0, msg=name)


def test_fused_block_backward_is_the_exact_gradient():
    x, dt, A, B, C, _, _ = _block_inputs(torch.float64, length=7, heads=4, head_dim=3, groups=2, d_state=2)
    dt = F.softplus(dt.detach()).requires_grad_()  # the kernels take dt after softplus
    xh = x.detach().transpose(1, 2).contiguous().requires_grad_()  # the block's (b, h, l, d) layout
    assert torch.autograd.gradcheck(fused_ops.fused_block, (xh, dt, A, B, C))


def test_fused_block_is_deterministic_and_free_of_subnormal_products():
    # decays of exp(-60) and below: the backward's products of them must still be exact
    # zeros above the diagonal and reproducible bit for bit
    inputs = _block_inputs(torch.float32, batch=2, length=30, heads=4, head_dim=8, groups=1,
                           d_state=4, seed=3)
    with torch.no_grad():
        inputs[1].add_(4.0)  # dt ~ softplus(4) ~ 4 per step against |A| up to 3: steep decays
    first, grads = _output_and_grads(_block, inputs, fused=True)
    again, grads_again = _output_and_grads(_block, inputs, fused=True)
    assert torch.equal(first, again)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_again, strict=True))
    reference, grads_torch = _output_and_grads(_block, inputs, fused=False)
    torch.testing.assert_close(first, reference, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, grads_torch, strict=True):
        assert torch.isfinite(a).all()
        scale = b.abs().max().item() or 1.0
        torch.testing.assert_close(a / scale, b / scale, atol=5e-6, rtol=0)


def test_the_fused_block_applies_only_on_the_cpu_in_float32():
    x = torch.zeros(1, 2, 2, 2)
    assert ssd.fused_block_usable(x, x)
    assert not ssd.fused_block_usable(x, x.double())
    assert not ssd.fused_block_usable(x, x.to("meta"))


def _tiny(arch):
    return build_model(ModelConfig(arch=arch, d_model=16, n_layers=2), vocab_size=5, n_classes=3, seed=0)


def _logits_and_grads(model, tokens, module=None):
    logits = model(tokens)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
    owner = module if module is not None else model
    params = [p for p in owner.parameters() if p.requires_grad]  # no_conv freezes the Conv1D
    return logits, torch.autograd.grad((logits * weights).sum(), params)


def test_a_mamba_model_on_the_fused_path_matches_the_reference_path():
    model, tokens = _tiny("mamba").train(), torch.randint(0, 5, (4, 12), generator=torch.Generator().manual_seed(0))
    assert model.implementation == "torch-fast-scan"  # off unless asked for
    assert mamba_paths.set_fused_path(model, True) == 2
    assert model.implementation == "torch-fused-scan"
    logits, grads = _logits_and_grads(model, tokens)
    model.set_reference_path(True)
    logits_ref, grads_ref = _logits_and_grads(model, tokens)
    torch.testing.assert_close(logits, logits_ref, atol=1e-5, rtol=0)
    for a, b in zip(grads, grads_ref, strict=True):  # float32 sums of a few hundred terms
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert mamba_paths.set_fused_path(model, False) == 2
    assert model.implementation == "torch-reference"
    model.set_reference_path(False)
    assert model.implementation == "torch-fast-scan"
    assert all("forward" not in m.conv1d.__dict__ for m in model._mixers())  # the module's own again


@pytest.mark.parametrize("variant", [{}, {"variant": "no_conv"}, {"conv_kernel": 1}, {"conv_kernel": 2}])
def test_a_mamba2_model_on_the_fused_path_matches_the_reference_path(variant):
    model = build_model(ModelConfig(arch="mamba2", d_model=16, n_layers=2, **variant), vocab_size=5,
                        n_classes=3, seed=0).train()
    tokens = torch.randint(0, 5, (4, 12), generator=torch.Generator().manual_seed(0))
    mamba_paths.set_fused_path(model, True)
    assert model.implementation == "torch-ssd-fused"
    seen = []
    hook = model._mixers()[0].conv1d.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    logits, grads = _logits_and_grads(model, tokens)
    hook.remove()
    assert len(seen) == 1  # the Conv1D is still called as a module: hooks see it
    model.set_reference_path(True)
    logits_ref, grads_ref = _logits_and_grads(model, tokens)
    torch.testing.assert_close(logits, logits_ref, atol=1e-5, rtol=0)
    for a, b in zip(grads, grads_ref, strict=True):  # float32 sums of a few hundred terms
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_fused_conv_equals_the_module_outputs_and_gradients(k):
    g = torch.Generator().manual_seed(k)
    conv = torch.nn.Conv1d(21, 21, k, groups=21, padding=k - 1).double()
    x = torch.randn(3, 21, 9, generator=g, dtype=torch.float64, requires_grad=True)
    fused = mamba_paths._fused_conv_forward(conv, x)  # the Conv1D's forward on the fused path
    assert fused.shape == conv(x).shape == (3, 21, 9 + k - 1)
    inputs = [x, conv.weight, conv.bias]
    weights = torch.randn(fused.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((fused * weights).sum(), inputs)
    grads_ref = torch.autograd.grad((conv(x) * weights).sum(), inputs)
    torch.testing.assert_close(fused, conv(x), atol=1e-12, rtol=0)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(
        lambda x, w, b: fused_ops.fused_depthwise_conv(x.transpose(1, 2), w, b, 9 + k - 1), inputs)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_fused_causal_conv_is_the_modules_causal_outputs(k):
    g = torch.Generator().manual_seed(k)
    conv = torch.nn.Conv1d(21, 21, k, groups=21, padding=k - 1).double()
    wide = torch.randn(3, 9, 30, generator=g, dtype=torch.float64)
    x = wide[..., 4:25].requires_grad_()  # a slice of a wider tensor, as in_proj's output is
    fused = fused_ops.fused_depthwise_conv(x, conv.weight, conv.bias, 9)
    reference = conv(x.transpose(1, 2))[..., :9].transpose(1, 2)
    torch.testing.assert_close(fused, reference, atol=1e-12, rtol=0)
    inputs = [x, conv.weight, conv.bias]
    weights = torch.randn(fused.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((fused * weights).sum(), inputs)
    for a, b in zip(grads, torch.autograd.grad((reference * weights).sum(), inputs), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(lambda *a: fused_ops.fused_depthwise_conv(*a, 9), inputs)


@pytest.mark.parametrize("arch", ["mamba", "mamba2"])
def test_training_without_hooks_takes_the_causal_conv_with_the_same_bits(arch, monkeypatch):
    # the fused path's training call (no hooks: the causal outputs straight from the kernels)
    # gives the bits of the call through the module (a hook on it: what capture does)
    model = build_model(ModelConfig(arch=arch, d_model=32, n_layers=2), vocab_size=5,
                        n_classes=3, seed=0).train()
    mamba_paths.set_fused_path(model, True)
    tokens = torch.randint(0, 5, (4, 40), generator=torch.Generator().manual_seed(0))
    calls: list[str] = []
    original = mamba_paths.fused_depthwise_conv
    monkeypatch.setattr(mamba_paths, "fused_depthwise_conv",  # (x, weight, bias, outputs)
                        lambda *a: calls.append("causal" if a[3] == a[0].shape[1] else "module") or original(*a))
    logits, grads = _logits_and_grads(model, tokens)
    assert calls == ["causal"] * 2  # one per layer, no module call
    seen = []
    hooks = [m.conv1d.register_forward_hook(lambda m, i, o: seen.append(o.shape)) for m in model._mixers()]
    logits_hooked, grads_hooked = _logits_and_grads(model, tokens)
    for hook in hooks:
        hook.remove()
    assert len(seen) == 2 and calls == ["causal"] * 2 + ["module"] * 2  # hooked: through the module
    assert torch.equal(logits, logits_hooked)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_hooked, strict=True))


def test_without_the_kernels_the_torch_scan_runs_after_one_warning(monkeypatch):
    inputs = [x.detach() for x in _inputs(torch.float32)]
    monkeypatch.delattr(capture.models, "scan_kernels", raising=False)
    monkeypatch.setitem(sys.modules, "capture.models.scan_kernels", None)  # the import fails
    fused_ops.fused_kernels.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"fused CPU kernels unavailable .*install numba") as caught:
            out = selective_scan(*inputs, fused=True)
            selective_scan(*inputs, fused=True)
        assert len(caught) == 1 and "\n" not in str(caught[0].message)
        assert torch.equal(out, selective_scan(*inputs))
        model = _tiny("mamba")
        mamba_paths.set_fused_path(model, True)
        assert model.implementation == "torch-fast-scan"  # what actually runs is recorded
    finally:
        fused_ops.fused_kernels.cache_clear()


def test_the_train_option_is_off_unless_set_and_recorded_when_set(tmp_path):
    model = _tiny("mamba")
    training_forward(model, TrainConfig())
    assert model.implementation == "torch-fast-scan"
    training_forward(model, TrainConfig(fused_kernels=True))
    assert model.implementation == "torch-fused-scan"
    st = Store.create(str(tmp_path / "a.zarr"))
    spec = tiny_experiment(arch="mamba", steps=10).runs()[0]
    train_run(st, spec)
    attrs = st.run_attrs(spec.run_id)
    assert "fused_kernels" not in attrs["train_config"] and attrs["implementation"] == "torch-fast-scan"
    on = tiny_experiment(arch="mamba", steps=10, train={**spec.train.model_dump(), "fused_kernels": True})
    with pytest.raises(RunConflictError, match="fused_kernels: False stored, True now"):
        check_trained_with(st, spec.run_id, on.runs()[0].train)
    assert not {"fused_kernels_fma", "fused_adamw"} & set(attrs["train_config"])
    for option in ("fused_kernels_fma", "fused_adamw"):
        on = tiny_experiment(arch="mamba", steps=10,
                             train={**spec.train.model_dump(), "fused_kernels": True, option: True})
        with pytest.raises(RunConflictError, match=f"{option}: False stored, True now"):
            check_trained_with(st, spec.run_id, on.runs()[0].train)
    training_forward(model, TrainConfig(fused_kernels=True, fused_kernels_fma=True))
    assert model.implementation == "torch-fused-scan-fma"


def test_fma_without_the_fused_kernels_is_refused_in_one_line():
    with pytest.raises(ValueError, match="fused_kernels_fma = true needs fused_kernels = true"):
        TrainConfig(fused_kernels_fma=True)


@pytest.mark.parametrize(("arch", "path", "more"), [
    ("mamba", "torch-fused-scan", {}), ("mamba2", "torch-ssd-fused", {}),
    ("mamba", "torch-fused-scan-fma", {"fused_kernels_fma": True, "fused_adamw": True}),
    # Mamba's options in bench.training's after setting; Mamba-2's, compiled through the
    # kernels, are the SIGKILL test's (test_fused_ops). Compiled at the shapes of the test below,
    # whose kernels inductor then has in its cache
    ("mamba", "torch-fused-scan-fma", {"fused_kernels_fma": True, "compile": True, "compile_through_kernels": True,
                                       "fused_adamw": True}),
])
def test_fused_training_is_deterministic_and_resumes_bit_for_bit(tmp_path, arch, path, more):
    options = {**TRAIN, "fused_kernels": True, **more}
    base = tiny_experiment(arch=arch, steps=TRAIN["steps"], train=options)
    whole, again = Store.create(str(tmp_path / "whole.zarr")), Store.create(str(tmp_path / "again.zarr"))
    train_run(whole, base.runs()[0])
    train_run(again, base.runs()[0])

    spec = _every_eval(base).runs()[0]
    st = Store.create(str(tmp_path / "cut.zarr"))
    with pytest.raises(_Stop):  # killed at the evaluation of step 15: last checkpoint is 10
        train_run(st, spec, progress=_stop_at(15))
    assert st.read_checkpoint(spec.run_id).step == 10
    assert train_run(st, spec).resumed_at == (10,)
    ws = [s.read_weights(spec.run_id) for s in (whole, again, st)]
    assert all(list(w) == list(ws[0]) and all(np.array_equal(w[k], ws[0][k]) for k in w) for w in ws)
    metrics = [s.run_attrs(spec.run_id)["metrics"] for s in (whole, again, st)]
    assert all(m["curve"] == metrics[0]["curve"] and m["accuracy"] == metrics[0]["accuracy"] for m in metrics)
    assert [p["step"] for p in metrics[0]["curve"]] == [5, 10, 15, 20]
    attrs = whole.run_attrs(spec.run_id)
    assert attrs["train_config"]["fused_kernels"] is True and attrs["implementation"] == path
    assert all(attrs["train_config"][k] is True for k in more)


# the model and batch shape of a parity run (tests.capture.compile_helpers): Mamba's kernels
# are the run's above, Mamba-2's through the kernels the SIGKILL test's (test_fused_ops)
@pytest.mark.parametrize(("arch", "through"), [("mamba2", False), ("mamba2", True), ("mamba", True)])
def test_the_fused_kernels_run_under_compile_and_agree_with_eager(arch, through):
    model, tokens = parity_model(arch), parity_tokens()
    eager = training_forward(model, TrainConfig(fused_kernels=True))
    logits, grads = _logits_and_grads(eager, tokens, model)
    compiled = training_forward(model, TrainConfig(fused_kernels=True, compile=True, compile_through_kernels=through))
    logits_c, grads_c = _logits_and_grads(compiled, tokens, model)
    assert model.implementation == {"mamba2": "torch-ssd-fused", "mamba": "torch-fused-scan"}[arch]
    torch.testing.assert_close(logits_c, logits, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_c, grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
