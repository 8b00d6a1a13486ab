"""Training-step speed of every architecture, and each fast path against its reference.

Prints one JSON line. Everything is measured side by side in this process, one thread,
round-robin over the architectures so that load from other processes falls on all of them
alike; trust the ratios more than the absolute times.

- ``step_seconds``: median AdamW training step (forward, cross-entropy on every position,
  backward, update) at batch 64, L = 40 and L = 120, default configs (4 layers, d 128) of
  the five core architectures; ``sequences_per_second`` = 64 / step.
- ``ratio_to_transformer``: each architecture's step time over GPT-NeoX's (goal for Mamba:
  within 3x).
- ``mamba_scan``: the same Mamba-1 model trained through the fast CPU scan and through
  `transformers`' torch path (``set_reference_path``). The reference is quadratic in
  length (~1 min per step at batch 64, L = 120), so L = 120 is measured at batch 8.
- ``mamba2_scan``: the same Mamba-2 model trained with its scan as one masked block
  (`capture.models.ssd`, the CPU path up to ``ssd.BLOCK_MAX`` positions) and through
  `transformers`' torch chunked scan, at L = 40 and at the limit (64), batch 64.
- ``mamba_fused_scan``: the selective scan alone, the chunked torch scan
  (`capture.models.scan`) against the fused numba kernels (`capture.models.scan_kernels`,
  ``[train] fused_kernels``), forward and backward timed apart, at the Jiang Mamba layer's
  shapes (batch 64, d_inner 256, d_state 16) and L = 40 and 120, float32; and the largest
  difference between the two paths' outputs and gradients. ``--only fused`` runs this alone
  (about 10 s).
- ``mamba2_fused_block``: Mamba-2's one-block scan alone (`capture.models.ssd.ssd_block`,
  with its bias, softplus and skip) at the Jiang Mamba-2 layer's shapes (batch 64, L = 40, 16
  heads of 32, one group, state 16): the torch block eager, the torch block through
  ``torch.compile`` (what ``[train] compile`` gave it) and the fused weights
  (``fused=True``), interleaved, forward and backward apart; with ``--only fused``.
- ``zoo``: the same for Based, BaseConv, H3, Hyena and DeltaNet against GPT-NeoX of the same
  width (default configs: 4 layers, d 128, parameter-matched), batch 64, L = 40 and 160
  (goal: within 3x).
- ``zoo_reference``: each zoo model trained through its fast form and through its plain
  sequential reference (``set_reference_path``), same weights and data, at L = 40 (batch
  64) and L = 160 (batch 8: Based's reference keeps a 153 x 128 state per position for
  autograd).

Run: ``OMP_NUM_THREADS=1 python -m bench.models`` (about 6 minutes; ``--only core`` or
``--only zoo`` for one half, ``--only fused`` for the fused scan).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from capture.models import CORE_ARCHS, ZOO_ARCHS, ModelConfig, build_model, count_parameters, ssd
from capture.models.hf import MambaFamilyModel
from capture.models.zoo import ZooModel

VOCAB, CLASSES, BATCH = 16, 16, 64
LENGTHS = (40, 120)
ZOO_LENGTHS = (40, 160)
ROUNDS = 4


def _trainer(model, batch: int, length: int, seed: int):
    """A closure running one timed training step on fixed random data."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (batch, length), generator=generator)
    labels = torch.randint(0, CLASSES, (batch, length), generator=generator)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()

    def step() -> float:
        start = time.perf_counter()
        logits = model(tokens)  # (batch, position, class)
        loss = F.cross_entropy(logits.reshape(-1, CLASSES), labels.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start

    return step


def _round_robin(steps: dict, rounds: int, warmup: int = 1) -> dict[str, float]:
    """Median step time of each closure, interleaved round by round."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(step())
    return {name: statistics.median(values) for name, values in times.items()}


def architectures(archs=CORE_ARCHS, lengths=LENGTHS) -> dict:
    """Step times of default architectures at each length, with ratios to GPT-NeoX."""
    models = {arch: build_model(ModelConfig(arch=arch), VOCAB, CLASSES, seed=0) for arch in archs}
    result: dict = {"step_seconds": {}, "sequences_per_second": {}, "ratio_to_transformer": {}}
    for length in lengths:
        steps = {arch: _trainer(m, BATCH, length, seed=1) for arch, m in models.items()}
        median = _round_robin(steps, ROUNDS)
        key = f"L{length}"
        result["step_seconds"][key] = {a: round(t, 4) for a, t in median.items()}
        result["sequences_per_second"][key] = {a: round(BATCH / t, 1) for a, t in median.items()}
        result["ratio_to_transformer"][key] = {
            a: round(t / median["transformer"], 2) for a, t in median.items() if a != "transformer"
        }
    result["implementation"] = {a: m.implementation for a, m in models.items()}
    result["parameters"] = {a: count_parameters(m) for a, m in models.items()}
    return result


def zoo_reference() -> dict:
    """Each zoo model's fast form against its sequential reference, same weights and data."""
    out: dict = {}
    for arch in ZOO_ARCHS:
        out[arch] = {}
        for length, batch in ((40, BATCH), (160, 8)):
            fast = build_model(ModelConfig(arch=arch), VOCAB, CLASSES, seed=0)
            reference = build_model(ModelConfig(arch=arch), VOCAB, CLASSES, seed=0)
            assert isinstance(reference, ZooModel)
            reference.set_reference_path(True)
            steps = {
                "fast": _trainer(fast, batch, length, seed=2),
                "reference": _trainer(reference, batch, length, seed=2),
            }
            median = _round_robin(steps, rounds=2, warmup=0)
            out[arch][f"L{length}_batch{batch}"] = {
                "fast": fast.implementation,
                "fast_seconds": round(median["fast"], 4),
                "reference_seconds": round(median["reference"], 3),
                "speedup": round(median["reference"] / median["fast"], 1),
            }
    return out


def mamba_scan() -> dict:
    """The fast scan against transformers' torch path, same weights and data."""
    out = {}
    for length, batch in ((40, BATCH), (120, 8)):
        fast = build_model(ModelConfig(arch="mamba"), VOCAB, CLASSES, seed=0)
        reference = build_model(ModelConfig(arch="mamba"), VOCAB, CLASSES, seed=0)
        assert isinstance(reference, MambaFamilyModel)
        reference.set_reference_path(True)
        steps = {
            "fast": _trainer(fast, batch, length, seed=2),
            "reference": _trainer(reference, batch, length, seed=2),
        }
        # one reference step takes seconds: no warm-up, two rounds
        median = _round_robin(steps, rounds=2, warmup=0)
        out[f"L{length}_batch{batch}"] = {
            "fast_seconds": round(median["fast"], 4),
            "reference_seconds": round(median["reference"], 3),
            "speedup": round(median["reference"] / median["fast"], 1),
        }
    return out


def mamba2_scan() -> dict:
    """Mamba-2's one-block scan against transformers' chunked scan, same weights and data."""
    out = {}
    for length in (40, ssd.BLOCK_MAX):
        models = {name: build_model(ModelConfig(arch="mamba2"), VOCAB, CLASSES, seed=0)
                  for name in ("block", "chunked")}
        trainers = {name: _trainer(m, BATCH, length, seed=2) for name, m in models.items()}

        def with_limit(step, limit):
            def run() -> float:
                saved, ssd.BLOCK_MAX = ssd.BLOCK_MAX, limit
                try:
                    return step()
                finally:
                    ssd.BLOCK_MAX = saved
            return run

        steps = {"block": with_limit(trainers["block"], length),
                 "chunked": with_limit(trainers["chunked"], 0)}
        median = _round_robin(steps, ROUNDS)
        out[f"L{length}_batch{BATCH}"] = {
            "block_seconds": round(median["block"], 4),
            "chunked_seconds": round(median["chunked"], 4),
            "speedup": round(median["chunked"] / median["block"], 2),
        }
    return out


def mamba_fused_scan(rounds: int = 7) -> dict:
    """The scan alone: the chunked torch function against the fused kernels, interleaved."""
    from capture.models.fused_ops import fused_scan
    from capture.models.scan import _SelectiveScan

    out: dict = {}
    for length in (40, 120):
        g = torch.Generator().manual_seed(0)
        batch, d_inner, d_state = BATCH, 256, 16
        u = torch.randn(batch, length, d_inner, generator=g)
        delta = F.softplus(torch.randn(batch, length, d_inner, generator=g) - 2)
        A = -torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)  # S4D-real init
        B, C = (torch.randn(batch, length, d_state, generator=g) for _ in range(2))
        grad_y = torch.randn(batch, length, d_inner, generator=g)
        inputs = [x.requires_grad_() for x in (u, delta, A, B, C)]
        paths = {"torch": lambda *x: _SelectiveScan.apply(*x, 8), "fused": lambda *x: fused_scan(*x, False)}
        times: dict[str, dict[str, list[float]]] = {p: {"forward": [], "backward": []} for p in paths}
        results = {}
        for i in range(rounds + 1):  # the first round warms up
            for name, function in paths.items():
                start = time.perf_counter()
                y = function(*inputs)
                middle = time.perf_counter()
                grads = torch.autograd.grad(y, inputs, grad_y)
                end = time.perf_counter()
                if i:
                    times[name]["forward"].append(middle - start)
                    times[name]["backward"].append(end - middle)
                results[name] = (y.detach(), *grads)
        ms = {p: {k: round(1000 * statistics.median(v), 2) for k, v in t.items()} for p, t in times.items()}
        total = {p: m["forward"] + m["backward"] for p, m in ms.items()}
        out[f"L{length}_batch{batch}"] = {
            "ms": ms,
            "fused_over_torch": {"forward": round(ms["fused"]["forward"] / ms["torch"]["forward"], 2),
                                 "backward": round(ms["fused"]["backward"] / ms["torch"]["backward"], 2),
                                 "both": round(total["fused"] / total["torch"], 2)},
            "max_relative_difference": {
                name: float(f"{((a - b).abs().max() / b.abs().max()).item():.2g}")
                for name, a, b in zip(("y", "u", "delta", "A", "B", "C"), results["fused"], results["torch"],
                                      strict=True)},
        }
    return out


def mamba2_fused_block(rounds: int = 9) -> dict:
    """Mamba-2's one-block scan alone: the torch block eager and compiled against the fused
    weights, interleaved, with the largest relative differences from the eager block."""
    from capture.models import ssd

    g = torch.Generator().manual_seed(0)
    batch, length, heads, head_dim, d_state = BATCH, 40, 16, 32, 16
    x = torch.randn(batch, length, heads, head_dim, generator=g)
    dt = torch.randn(batch, length, heads, generator=g) - 2
    A = -torch.arange(1, heads + 1, dtype=torch.float32)  # transformers' A_log init: log(1..heads)
    B, C = (torch.randn(batch, length, 1, d_state, generator=g) for _ in range(2))
    D, bias = torch.ones(heads), torch.randn(heads, generator=g)
    grad_y = torch.randn(batch, length, heads, head_dim, generator=g)
    inputs = [t.requires_grad_() for t in (x, dt, A, B, C, D, bias)]

    def block(fused):
        return lambda x, dt, A, B, C, D, bias: ssd.ssd_block(x, dt, A, B, C, D=D, dt_bias=bias,
                                                            dt_softplus=True, fused=fused)

    paths = {"torch": block(False), "compiled": torch.compile(block(False)), "fused": block(True)}
    times: dict[str, dict[str, list[float]]] = {p: {"forward": [], "backward": []} for p in paths}
    results = {}
    for i in range(rounds + 2):  # two rounds warm up (and compile)
        for name, function in paths.items():
            start = time.perf_counter()
            y = function(*inputs)
            middle = time.perf_counter()
            grads = torch.autograd.grad(y, inputs, grad_y)
            end = time.perf_counter()
            if i > 1:
                times[name]["forward"].append(middle - start)
                times[name]["backward"].append(end - middle)
            results[name] = (y.detach(), *grads)
    ms = {p: {k: round(1000 * statistics.median(v), 2) for k, v in t.items()} for p, t in times.items()}
    total = {p: m["forward"] + m["backward"] for p, m in ms.items()}
    return {
        f"L{length}_batch{batch}": {
            "ms": ms,
            "fused_over_torch": round(total["fused"] / total["torch"], 2),
            "fused_over_compiled": round(total["fused"] / total["compiled"], 2),
            "max_relative_difference": {
                name: float(f"{((a - b).abs().max() / b.abs().max()).item():.2g}")
                for name, a, b in zip(("y", "x", "dt", "A", "B", "C", "D", "dt_bias"), results["fused"],
                                      results["torch"], strict=True)},
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Training-step speed of the architectures.")
    parser.add_argument("--only", choices=("core", "zoo", "fused"), help="measure one part only")
    only = parser.parse_args().only
    torch.set_num_threads(1)
    start = time.perf_counter()
    result: dict = {"bench": "models", "threads": 1, "batch": BATCH, "rounds": ROUNDS}
    if only in (None, "core"):
        result.update(architectures())
        result["mamba_scan"] = mamba_scan()
        result["mamba2_scan"] = mamba2_scan()
    if only in (None, "core", "fused"):
        result["mamba_fused_scan"] = mamba_fused_scan()
        result["mamba2_fused_block"] = mamba2_fused_block()
    if only in (None, "zoo"):
        result["zoo"] = architectures(("transformer", *ZOO_ARCHS), ZOO_LENGTHS)
        result["zoo_reference"] = zoo_reference()
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
