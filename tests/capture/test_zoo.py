"""The retrieval zoo (Based, BaseConv, H3, Hyena, DeltaNet): fast forms equal to their
sequential references, the model interface, recurrent-state sites, no_conv, parameter
matching, and training / capture / interventions end to end on associative recall."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from capture.models import ZOO_ARCHS, ModelConfig, build_model, count_parameters, parameter_table
from capture.models import make_conv_identity as model_conv_identity
from capture.models.based import (
    SlidingWindowAttention,
    taylor_attention,
    taylor_features,
    taylor_recurrence,
)
from capture.models.deltanet import delta_rule_chunked, delta_rule_recurrent
from capture.models.h3 import DiagSSM, ShiftSSM, shift_register
from capture.models.longconv import LongConv, direct_causal_conv, fft_causal_conv
from capture.models.zoo import causal_conv, short_conv

VOCAB, CLASSES, BATCH, LENGTH = 10, 3, 3, 12
TINY = {"d_model": 16, "n_layers": 2}
ATOL = 1e-5
CONV_SITES = {  # per arch: (short conv site, the site holding the conv's input)
    "based": ("mixer.conv1d", "norm1"),
    "baseconv": ("mixer.conv1d", "norm1"),
    "h3": ("mixer.shift_ssm", "mixer.k_proj"),
    "hyena": ("mixer.conv1d", "mixer.in_proj"),
    "deltanet": ("mixer.q_conv1d", "mixer.q_proj"),
}


def tiny(arch: str, seed: int = 0, **kwargs):
    return build_model(ModelConfig(arch=arch, **TINY, **kwargs), VOCAB, CLASSES, seed=seed)


def tokens(seed: int = 0, length: int = LENGTH) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, length), generator=torch.Generator().manual_seed(seed))


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def close(a, b, atol=ATOL) -> bool:
    return torch.allclose(a, b, atol=atol, rtol=0)


def close_scaled(a, b, atol=ATOL) -> bool:
    """`close` relative to the largest magnitude once it exceeds 1 (float32 rounding)."""
    return close(a, b, atol * max(1.0, b.abs().max().item()))


def grads_of(fn, inputs, seed=1):
    out = fn(*inputs)
    weights = randn(*out.shape, seed=seed, dtype=out.dtype)
    return out, torch.autograd.grad((out * weights).sum(), inputs)


def assert_same_outputs_and_grads(fast, reference, inputs, atol=ATOL):
    out_f, g_f = grads_of(fast, inputs)
    out_r, g_r = grads_of(reference, inputs)
    assert close(out_f, out_r, atol), (out_f - out_r).abs().max()
    for index, (a, b) in enumerate(zip(g_f, g_r, strict=True)):
        assert close(a, b, atol), f"gradient {index}: {(a - b).abs().max()}"


def energise_filters(model) -> None:
    """Zoology's init leaves implicit filters near zero; make them matter for the tests."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LongConv):
                for linear in [*module.filter.linears, module.filter.project]:
                    linear.weight.normal_(0, 0.7, generator=torch.Generator().manual_seed(5))


# -- fast forms against their references, function by function ----------------------------


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, ATOL)])
def test_taylor_attention_quadratic_equals_the_recurrent_view(dtype, atol):
    q, k, v = (randn(2, 2, 9, w, seed=s, dtype=dtype).requires_grad_() for s, w in
               ((0, 4), (1, 4), (2, 5)))
    assert_same_outputs_and_grads(taylor_attention, taylor_recurrence, [q, k, v], atol)


def test_taylor_features_give_the_kernel_of_exp_to_second_order():
    x, y = randn(7, 5, seed=0), randn(7, 5, seed=1)
    s = (x * y).sum(-1) / math.sqrt(5)
    assert taylor_features(x).shape == (7, 1 + 5 + 15)
    assert close((taylor_features(x) * taylor_features(y)).sum(-1), 1 + s + s * s / 2)


def test_sliding_window_banded_mask_equals_the_loop():
    for window in (1, 3, 20):
        attention = SlidingWindowAttention(8, 2, window)
        x = randn(2, 11, 8).requires_grad_()

        def run(x, reference, attention=attention):
            attention.reference = reference
            return attention(x)

        assert_same_outputs_and_grads(lambda x: run(x, False), lambda x: run(x, True), [x])
    # window 1: each position attends only to itself, so its output is its own value
    attention.window, attention.reference = 1, False
    q, k, v = attention.Wqkv(x).chunk(3, dim=-1)
    assert close(attention(x), attention.out_proj(v))


@pytest.mark.parametrize("shape", [(2, 13, 6), (2, 9, 2, 3, 6)])
def test_fft_long_convolution_equals_the_direct_sum(shape):
    u = randn(*shape, seed=0).requires_grad_()
    k = randn(shape[-1], shape[1] + 3, seed=1).requires_grad_()  # longer filters: cut
    assert_same_outputs_and_grads(fft_causal_conv, direct_causal_conv, [u, k])
    y = direct_causal_conv(u, k)
    assert close(y[:, 0], u[:, 0] * k[:, 0])  # lag 0 only at the first step


@pytest.mark.parametrize("chunk", [1, 4, 5, 32])
@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, ATOL)])
def test_chunked_delta_rule_equals_the_recurrence(chunk, dtype, atol):
    g = torch.Generator().manual_seed(0)
    shape = (2, 2, 13, 4)  # 13: a ragged last chunk for every chunk size but 1
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(2, 2, 13, 3, generator=g, dtype=dtype)
    beta = torch.rand(2, 2, 13, generator=g, dtype=dtype)
    inputs = [x.requires_grad_() for x in (q, k, v, beta)]
    assert_same_outputs_and_grads(
        lambda *x: delta_rule_chunked(*x, chunk=chunk), delta_rule_recurrent, inputs, atol
    )


def test_delta_rule_stores_a_key_value_pair_exactly_with_beta_one():
    k = torch.nn.functional.normalize(randn(1, 1, 2, 4, seed=0), dim=-1)
    v = randn(1, 1, 2, 3, seed=1)
    q = k.clone()
    out, states = delta_rule_recurrent(q, k, v, torch.ones(1, 1, 2), keep_states=True)
    assert close(out[0, 0, 0], v[0, 0, 0])  # reading with the stored key gives its value
    assert close(k[0, 0, 1] @ states[0, 0, 1], v[0, 0, 1])  # overwritten, not summed


def test_h3_fft_kernel_equals_both_recurrences():
    with torch.random.fork_rng(devices=[]):  # DiagSSM draws dt and C from the global RNG
        torch.manual_seed(0)
        ssm = DiagSSM(heads=3, state_size=6)
    x = randn(2, 10, 3, 2, 2, seed=1).requires_grad_()  # (batch, position, head, i, j)
    assert_same_outputs_and_grads(
        lambda x: fft_causal_conv(x, ssm.kernel(x.shape[1])[:, None, None]), ssm.recurrence, [x]
    )
    shift = ShiftSSM(5, 4)
    u = randn(2, 10, 5, seed=2).requires_grad_()
    assert_same_outputs_and_grads(shift, lambda u: shift_register(shift.weight, u), [u])
    # the same kernel as a depthwise nn.Conv1d in its own layout
    conv = short_conv(5, 4, bias=False)
    with torch.no_grad():
        conv.weight.copy_(shift.weight)
    assert close(shift(u), causal_conv(conv, u))


# -- whole models: fast form = reference, interface, sites ---------------------------------


@pytest.mark.parametrize("arch", ZOO_ARCHS)
@pytest.mark.parametrize("variant", [{}, {"variant": "no_conv"}, {"conv_kernel": 1}])
def test_model_fast_form_matches_reference_outputs_and_gradients(arch, variant):
    extra = {"l_max": 8} if arch in ("hyena", "baseconv") else {}  # sequences past l_max work
    model, tok = tiny(arch, **variant, **extra).train(), tokens()
    energise_filters(model)
    fast_name = model.implementation
    assert fast_name != "torch-reference"
    params = [p for p in model.parameters() if p.requires_grad]

    def run():
        logits = model(tok)
        weights = randn(*logits.shape, seed=3)
        return logits, torch.autograd.grad((logits * weights).sum(), params)

    logits, grads = run()
    model.set_reference_path(True)
    assert model.implementation == "torch-reference"
    logits_ref, grads_ref = run()
    model.set_reference_path(False)
    assert model.implementation == fast_name
    assert close_scaled(logits, logits_ref)
    for p, a, b in zip(params, grads, grads_ref, strict=True):
        assert close_scaled(a, b), (p.shape, (a - b).abs().max(), b.abs().max())


@pytest.mark.parametrize("arch", ZOO_ARCHS)
@torch.no_grad()
def test_resuming_from_every_layer_reproduces_forward_and_outputs_are_causal(arch):
    model, tok = tiny(arch), tokens()
    energise_filters(model)
    logits, hidden = model.forward_with_hidden(tok)
    assert hidden.shape == (BATCH, LENGTH, 3, 16) and model.layer_names == ["embed", "L0", "L1"]
    for index, name in enumerate(model.layer_names):
        assert close(model.forward_from(name, hidden[:, :, index]), logits), name
    # a prefix gives the same outputs as the longer sequence (no look-ahead, and filters and
    # chunk padding do not depend on the length)
    assert close(model(tok[:, :7]), logits[:, :7])


@pytest.mark.parametrize("arch", ZOO_ARCHS)
@torch.no_grad()
def test_every_site_is_per_position_and_state_sites_have_their_documented_width(arch):
    model, tok = tiny(arch), tokens()
    logits, acts = model.forward_with_sites(tok, ["*"])
    assert list(acts) == model.sites() and close(logits, model(tok))
    for name, value in acts.items():
        assert value.shape[:2] == (BATCH, LENGTH), name
    d, sizes = 16, model.config.sizes()
    if arch == "based":  # (1 + f + f(f+1)/2) x d_model, f = 16, one head
        assert acts["L1.mixer.linear_attention.state"].shape[-1] == (1 + 16 + 16 * 17 // 2) * d
        assert acts["L1.mixer.linear_attention.normalizer"].shape[-1] == 1 + 16 + 16 * 17 // 2
    if arch == "h3":
        assert acts["L1.mixer.ssm_state"].shape[-1] == d * sizes["head_dim"] * sizes["state_size"]
    if arch == "deltanet":
        assert acts["L1.mixer.state"].shape[-1] == d * d // sizes["n_heads"]
    if arch in ("hyena", "baseconv"):  # no finite recurrent state
        assert not [name for name in acts if "state" in name]


@torch.no_grad()
def test_deltanet_state_site_reads_out_the_mixer_output():
    model, tok = tiny("deltanet"), tokens()
    _, acts = model.forward_with_sites(tok, ["L1.norm1", "L1.mixer.state"])
    mixer = model.blocks[1].mixer
    q, k, v, beta = mixer._qkvb(acts["L1.norm1"])
    heads, d_k = q.shape[1], q.shape[-1]
    states = acts["L1.mixer.state"].view(BATCH, LENGTH, heads, d_k, -1)
    read = torch.einsum("bthk,bthkv->bhtv", q.transpose(1, 2), states)
    assert close(read, delta_rule_chunked(q, k, v, beta))


@torch.no_grad()
def test_based_state_and_normalizer_sites_give_the_attention_output():
    model, tok = tiny("based"), tokens()
    sites = ["L0.mixer.linear_attention.state", "L0.mixer.linear_attention.normalizer"]
    _, acts = model.forward_with_sites(tok, ["L0.norm1", *sites])
    mixer = model.blocks[0].mixer
    u = acts["L0.norm1"]
    h = causal_conv(mixer.conv1d, u) * mixer.gate(u) + u
    q, k, v = mixer.linear_attention._qkv(h)
    fq = taylor_features(q[:, 0])  # one head: (batch, position, features)
    state = acts[sites[0]].view(BATCH, LENGTH, fq.shape[-1], -1)
    norm = acts[sites[1]]
    y = torch.einsum("btf,btfv->btv", fq, state) / ((fq * norm).sum(-1, keepdim=True) + 1e-12)
    assert close(y, taylor_attention(q, k, v)[:, 0], atol=1e-4)


@torch.no_grad()
def test_h3_state_site_reads_out_the_diagonal_ssm():
    model, tok = tiny("h3"), tokens()
    _, acts = model.forward_with_sites(tok, ["L0.norm1", "L0.mixer.ssm_state"])
    mixer = model.blocks[0].mixer
    kv = mixer._kv(acts["L0.norm1"])  # (batch, position, head, i, j)
    _, _, C = mixer.diag_ssm.discretised()
    states = torch.view_as_complex(acts["L0.mixer.ssm_state"].view(
        BATCH, LENGTH, mixer.heads, mixer.head_dim, mixer.head_dim, -1, 2))
    y = 2 * (states * C[:, None, None]).sum(-1).real
    assert close(y, fft_causal_conv(kv, mixer.diag_ssm.kernel(LENGTH)[:, None, None]))


# -- short convolutions: no_conv, conv_kernel ----------------------------------------------


@pytest.mark.parametrize("arch", ZOO_ARCHS)
def test_no_conv_freezes_every_short_conv_as_the_identity(arch):
    model, tok = tiny(arch, variant="no_conv").train(), tokens()
    convs = [c for block in model.blocks for c in block.mixer.short_convs()]
    for conv in convs:
        assert torch.count_nonzero(conv.weight) == conv.weight.shape[0]
        assert torch.equal(conv.weight[:, 0, -1], torch.ones(conv.weight.shape[0]))
        assert not any(p.requires_grad for p in conv.parameters())
    frozen = sum(p.numel() for c in convs for p in c.parameters())
    assert count_parameters(model, trainable_only=True) == count_parameters(model) - frozen
    conv_site, input_site = CONV_SITES[arch]
    _, acts = model.forward_with_sites(tok, [f"L1.{conv_site}", f"L1.{input_site}"])
    assert close(acts[f"L1.{conv_site}"], acts[f"L1.{input_site}"])
    before = convs[0].weight.clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    model(tok).square().mean().backward()
    optimizer.step()
    assert torch.equal(convs[0].weight, before)
    # applying it to a built model is the same as building the variant
    plain = tiny(arch)
    model_conv_identity(plain)
    with torch.no_grad():
        assert torch.equal(plain(tok), tiny(arch, variant="no_conv")(tok))


@pytest.mark.parametrize("arch", ZOO_ARCHS)
def test_conv_kernel_sets_the_short_conv_width(arch):
    model = tiny(arch, conv_kernel=2)
    assert {c.weight.shape[-1] for c in model.blocks[0].mixer.short_convs()} == {2}


def test_configs_fill_zoology_sizes_and_refuse_bad_ones():
    assert ModelConfig(arch="h3", d_model=64).sizes()["state_size"] == 16
    assert ModelConfig(arch="h3", d_model=64).conv_kernel == 16  # the shift SSM's length
    assert ModelConfig(arch="hyena", d_model=16).filter_order == 8
    assert ModelConfig(arch="hyena", d_model=256).filter_order == 64
    # a changed size re-matches the MLP: dropping the sliding window frees 4 d^2 for it
    assert ModelConfig(arch="based", window=0).intermediate_size > ModelConfig(
        arch="based").intermediate_size
    assert ModelConfig(arch="based", window=0).window == 0
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=16"):
        ModelConfig(arch="deltanet", d_model=16, n_heads=3)
    with pytest.raises(ValueError, match="must be even"):
        ModelConfig(arch="h3", state_size=5)
    with pytest.raises(ValueError, match="feature_dim do\\(es\\) not apply to arch 'hyena'"):
        ModelConfig(arch="hyena", feature_dim=4)
    with pytest.raises(ValueError, match="applies to .*deltanet only, not 'gru'"):
        ModelConfig(arch="gru", variant="no_conv")


def test_parameters_match_gpt_neox_at_arora_et_al_widths():
    for d_model in (16, 32, 64, 128, 256):
        rows = parameter_table(archs=("transformer", *ZOO_ARCHS), d_model=d_model, n_layers=2)
        counts = {row["arch"]: row["parameters"] for row in rows}
        for arch in ZOO_ARCHS:
            assert abs(counts[arch] / counts["transformer"] - 1) < 0.01, (d_model, arch, counts)


# -- end to end on associative recall: train, capture, interventions -----------------------


@pytest.fixture(scope="module")
def trained_ar(tmp_path_factory):
    """One store with a tiny DeltaNet and a tiny Hyena trained a few steps on AR."""
    from capture.record import capture_counterfactuals, capture_length
    from capture.train import train_run
    from store import Store
    from tests.capture.test_train import tiny_experiment

    st = Store.create(str(tmp_path_factory.mktemp("zoo") / "s.zarr"))
    exp = tiny_experiment(
        task="assoc_recall", arch="deltanet", steps=6,
        grid={"tasks": ["assoc_recall"], "archs": ["deltanet", "hyena"], "seeds": [0]},
        models={arch: TINY for arch in ("deltanet", "hyena")},
        tasks={"assoc_recall": {"n_keys": 8, "n_values": 8}},
    )
    runs = [train_run(st, spec) for spec in exp.runs()]
    for result in runs:
        capture_length(st, result.run_id, 12, n_sequences=16, sites=["L*.mixer.state"]
                       if "deltanet" in result.run_id else ["L1.mixer.long_conv"])
        capture_counterfactuals(st, result.run_id, 12, n_pairs=12)
    return st, [result.run_id for result in runs]


@torch.no_grad()
def test_trained_runs_rebuild_and_their_captures_are_the_models_own(trained_ar):
    from capture.record import site_var
    from capture.train import rebuild_model
    from store import validate

    st, run_ids = trained_ar
    for rid in run_ids:
        model = rebuild_model(st, rid)
        assert model.arch in ("deltanet", "hyena") and model.implementation != "torch-reference"
        ds = st.load_length(rid, 12)
        tok = torch.as_tensor(ds.tokens.values[:4].astype("int64"))
        logits, hidden = model.forward_with_hidden(tok)
        np.testing.assert_allclose(ds.hidden.values[:4], hidden.numpy(), atol=2e-2, rtol=1e-2)
        site = "L0.mixer.state" if model.arch == "deltanet" else "L1.mixer.long_conv"
        _, acts = model.forward_with_sites(tok, [site])
        stored = ds[site_var(site)].values[:4]
        np.testing.assert_allclose(stored, acts[site].numpy(), atol=2e-2, rtol=1e-2)
    assert validate(st).ok


def test_patching_interchange_and_ablation_run_on_zoo_models(trained_ar, tmp_path):
    import shutil

    from analysis.interventions import run_ablation, run_interchange, run_patching
    from store import Store

    st0, run_ids = trained_ar
    shutil.copytree(st0.location.url, tmp_path / "c.zarr")
    st = Store.open(str(tmp_path / "c.zarr"), mode="r+")
    patched = run_patching(st, 12, "zoo")
    assert set(patched.run.values) == set(run_ids)
    recovery = patched.recovered.sel(position=0).values  # BOS precedes every edit
    np.testing.assert_allclose(recovery, 0, atol=1e-5)
    inter = run_interchange(st, 12, "zoo")
    for rid in run_ids:
        r = inter.restoration.sel(run=rid, layer="embed", site="key")
        assert float(r) == pytest.approx(1.0, abs=1e-4)  # the edited token itself
        assert str(inter.mechanism.sel(run=rid).values) in ("induction", "direct retrieval", "none")
    ablated = run_ablation(st, "zoo", runs=run_ids, lengths=[12], settings=["pca:1"],
                           layers=["L0"], refit=False)
    assert np.isfinite(ablated.accuracy_drop.values).all()
