"""Fused CPU loops for the Mamba mixers, compiled by numba: Mamba-1's selective scan, the
weights of Mamba-2's one-block scan (`ssd_weights`) and the depthwise causal convolution both
Mamba and Mamba-2 apply before their scans, each with its hand-written backward.

The same recurrence as `capture.models.scan` (``h[t] = exp(delta[t] A) h[t-1] +
delta[t] u[t] B[t]``, ``y[t] = h[t] . C[t]``), but one pass per batch row over time with the
row's whole state, (d_state, d_inner), held in a small buffer that stays in cache: the
decay's exponential, the state update and the contraction with ``C`` happen in the same loop,
so no (length, batch, d_inner, d_state) tensor is ever written. The innermost loops run over
``d_inner`` (contiguous in memory), which the compiler turns into vector instructions.

The backward pass recomputes a batch row's states and decays (forward in time, into two
(length, d_state, d_inner) buffers reused for every row), then walks back in time with the
state gradient ``G[t] = gy[t] C[t] + exp(delta[t+1] A) G[t+1]`` and accumulates every input's
gradient from it. Nothing is kept between the forward and the backward pass but the inputs.

Numerics: no ``fastmath``, no threads, every sum in a fixed order, so a call's result depends
only on its inputs (bit for bit, run to run). The exponential in float32 is the classic
Cephes polynomial (range reduction by ln 2, degree-6 polynomial, exponent set from the bits),
inlined so that it vectorises: measured over [-87.3, 0] its error stays under 1 ulp (0.97 at
most, 0.27 on average; torch's ``exp`` 0.56 and 0.25). Below -87.3 it returns exp(-87.3)
~ 1e-38 rather than a subnormal. Float64 uses ``math.exp``. No fused multiply-adds (not
without ``fastmath``), so the vector width the compiler picks does not change a result. Sums
over ``d_inner`` (the gradients of B and C) are accumulated in ``LANES`` interleaved partial
sums, then added in order.

The convolution (`conv_forward`, `conv_backward`) is `torch.nn.Conv1d` with one filter per
channel and k - 1 zeros of padding on each side, computed in (batch, position, channel) layout
so that its inner loops run over channels; mkldnn's depthwise backward took 2.5-3x its time
(docs/measured.md, "Training speed"). Given an output of only the first ``length`` positions
(the causal ones a mixer keeps), it computes just those, with the same bits.

Compiled on first import, for float32 and float64, with ``cache=True``: numba writes the
machine code next to this file (``__pycache__``) or, where that is read-only, to its user
cache directory (``NUMBA_CACHE_DIR`` overrides both), and later imports load it (measured:
about 8 s to compile, 1.4 s to load from the cache; with no writable cache anywhere it
compiles in every process). `capture.models.scan` imports this module only when the fused
path is asked for.
"""

from __future__ import annotations

import functools
import math
from types import FunctionType
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

#: Interleaved partial sums for the reductions over d_inner (one AVX-512 float32 vector).
LANES = 16


@intrinsic
def _float32_from_bits(_typingctx, bits):
    """The float32 whose IEEE bits are the low 32 bits of an integer (a free reinterpret)."""
    sig = types.float32(types.int64)

    def codegen(_context, builder, _signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return sig, codegen


def _exp(x):  # pragma: no cover - only its numba overload runs
    return math.exp(x)


@overload(_exp, inline="always")
def _exp_overload(x):
    if x == types.float32:
        lo, hi = np.float32(-87.3), np.float32(88.3)
        log2e, half, one = np.float32(1.44269504088896341), np.float32(0.5), np.float32(1.0)
        ln2_hi, ln2_lo = np.float32(0.693359375), np.float32(-2.12194440e-4)
        p0, p1, p2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
        p3, p4, p5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)

        def exp32(x):
            # clamped so that the exponent field stays normal (exp(-87.3) ~ 1.2e-38)
            x = lo if x < lo else (hi if x > hi else x)
            k = np.floor(x * log2e + half)
            r = x - k * ln2_hi - k * ln2_lo  # k * ln2_hi is exact: ln2_hi has 9 bits
            p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
            p = p * (r * r) + r + one
            return p * _float32_from_bits((np.int64(k) + 127) << 23)

        return exp32
    return lambda x: math.exp(x)


_SIG_FWD = [
    types.void(*([types.Array(dt, 3, "C")] * 2), types.Array(dt, 2, "C"),
               *([types.Array(dt, 3, "C")] * 2), types.Array(dt, 3, "C"))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def scan_forward(u, delta, At, B, C, y):  # pragma: no cover - compiled
    """y[b, t] = sum_n h[b, t, n, :] C[b, t, n] for the recurrence above, written into ``y``.

    u, delta, y: (batch, length, d_inner); At: (d_state, d_inner), A transposed;
    B, C: (batch, length, d_state). All C-contiguous, one dtype.
    """
    batch, length, d_inner = u.shape
    d_state = At.shape[0]
    h = np.empty((d_state, d_inner), u.dtype)
    du = np.empty(d_inner, u.dtype)
    for b in range(batch):
        h[:] = 0
        for t in range(length):
            for i in range(d_inner):
                du[i] = delta[b, t, i] * u[b, t, i]
                y[b, t, i] = 0
            for n in range(d_state):
                bn, cn = B[b, t, n], C[b, t, n]
                for i in range(d_inner):
                    h[n, i] = _exp(delta[b, t, i] * At[n, i]) * h[n, i] + du[i] * bn
                for i in range(d_inner):
                    y[b, t, i] += h[n, i] * cn


_SIG_BWD = [
    types.void(*([types.Array(dt, 3, "C")] * 2), types.Array(dt, 2, "C"),
               *([types.Array(dt, 3, "C")] * 3),
               types.Array(dt, 3, "C"), types.Array(dt, 3, "C"), types.Array(dt, 2, "C"),
               types.Array(dt, 3, "C"), types.Array(dt, 3, "C"))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def scan_backward(u, delta, At, B, C, gy, grad_u, grad_delta, grad_At, grad_B, grad_C):  # pragma: no cover
    """The gradients of ``sum(gy * y)`` for `scan_forward`'s y, written into the ``grad_*``.

    Shapes as in `scan_forward`; gy like y; each grad_* like its input (grad_At like At).
    """
    batch, length, d_inner = u.shape
    d_state = At.shape[0]
    dtype = u.dtype
    states = np.empty((length + 1, d_state, d_inner), dtype)  # states[t + 1] = h[t]
    decays = np.empty((length, d_state, d_inner), dtype)
    G = np.empty((d_state, d_inner), dtype)  # dL/dh[t], then carried back to t - 1
    du = np.empty(d_inner, dtype)
    g_du = np.empty(d_inner, dtype)  # dL/d(delta u) at t
    g_log = np.empty(d_inner, dtype)  # sum_n dL/d(delta A)[n] A[n] at t
    lanes_b = np.empty(LANES, dtype)
    lanes_c = np.empty(LANES, dtype)
    whole = d_inner - d_inner % LANES
    grad_At[:] = 0
    for b in range(batch):
        states[0] = 0
        for t in range(length):
            for i in range(d_inner):
                du[i] = delta[b, t, i] * u[b, t, i]
            for n in range(d_state):
                bn = B[b, t, n]
                for i in range(d_inner):
                    d = _exp(delta[b, t, i] * At[n, i])
                    decays[t, n, i] = d
                    states[t + 1, n, i] = d * states[t, n, i] + du[i] * bn
        G[:] = 0
        for t in range(length - 1, -1, -1):
            for i in range(d_inner):
                du[i] = delta[b, t, i] * u[b, t, i]
                g_du[i] = 0
                g_log[i] = 0
            for n in range(d_state):
                bn, cn = B[b, t, n], C[b, t, n]
                # one pass over d_inner per (t, n), LANES at a time, for every term:
                # G[t] = gy[t] C[t] + (the carry from t + 1, already through its decay);
                # grad_C[t, n] = sum_i gy[t, i] h[t, i, n]; grad_B[t, n] = sum_i G[t, i, n] du[t, i];
                # dL/d(delta A)[i, n] = G h[t-1] exp(delta A); G carried back through the decay
                lanes_b[:] = 0
                lanes_c[:] = 0
                for i0 in range(0, whole, LANES):
                    for k in range(LANES):
                        i = i0 + k
                        g = G[n, i] + gy[b, t, i] * cn
                        g_du[i] += g * bn
                        lanes_c[k] += gy[b, t, i] * states[t + 1, n, i]
                        lanes_b[k] += g * du[i]
                        x = g * states[t, n, i] * decays[t, n, i]
                        g_log[i] += x * At[n, i]
                        G[n, i] = g * decays[t, n, i]
                        grad_At[n, i] += x * delta[b, t, i]
                total_b, total_c = lanes_b[0], lanes_c[0]
                for k in range(1, LANES):
                    total_b += lanes_b[k]
                    total_c += lanes_c[k]
                for i in range(whole, d_inner):  # the ragged rest, added after the lanes
                    g = G[n, i] + gy[b, t, i] * cn
                    g_du[i] += g * bn
                    total_c += gy[b, t, i] * states[t + 1, n, i]
                    total_b += g * du[i]
                    x = g * states[t, n, i] * decays[t, n, i]
                    g_log[i] += x * At[n, i]
                    G[n, i] = g * decays[t, n, i]
                    grad_At[n, i] += x * delta[b, t, i]
                grad_B[b, t, n] = total_b
                grad_C[b, t, n] = total_c
            for i in range(d_inner):
                grad_u[b, t, i] = g_du[i] * delta[b, t, i]
                grad_delta[b, t, i] = g_du[i] * u[b, t, i] + g_log[i]


# -- the depthwise causal convolution before the scan ------------------------------------------

_SIG_CONV = [
    types.void(types.Array(dt, 3, "C"), types.Array(dt, 2, "C"), types.Array(dt, 1, "C"),
               types.Array(dt, 3, "C"))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def conv_forward(x, Wt, bias, y):  # pragma: no cover - compiled
    """Depthwise convolution with k - 1 zeros on both sides, as `torch.nn.Conv1d` with
    ``groups = channels, padding = k - 1`` computes it, in (batch, position, channel) layout.

    x: (batch, length, channels); Wt: (k, channels), the weight transposed; bias:
    (channels,); y: (batch, length + k - 1, channels), y[b, t] = bias + sum_j Wt[j]
    x[b, t + j - (k - 1)] over the positions inside x, j ascending. A shorter y gets the
    first y.shape[1] of those outputs (the causal ones: y.shape[1] = length), each computed
    exactly as in the full output.
    """
    batch, length, channels = x.shape
    k = Wt.shape[0]
    for b in range(batch):
        for t in range(y.shape[1]):
            for c in range(channels):
                y[b, t, c] = bias[c]
            for j in range(k):
                s = t + j - (k - 1)
                if 0 <= s < length:
                    for c in range(channels):
                        y[b, t, c] += Wt[j, c] * x[b, s, c]


_SIG_CONV_BWD = [
    types.void(types.Array(dt, 3, "C"), types.Array(dt, 2, "C"), types.Array(dt, 3, "C"),
               types.Array(dt, 3, "C"), types.Array(dt, 2, "C"), types.Array(dt, 1, "C"))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def conv_backward(x, Wt, gy, grad_x, grad_Wt, grad_bias):  # pragma: no cover - compiled
    """The gradients of ``sum(gy * y)`` for `conv_forward`'s y, written into the ``grad_*``
    (shapes of x, Wt and bias); sums over batch rows and positions in ascending order. gy may
    be shorter, as y may: the outputs past it count as having gradient 0, so the terms they
    would add (each an exact 0) are left out and the sums keep their bits."""
    batch, length, channels = x.shape
    k = Wt.shape[0]
    outputs = gy.shape[1]
    grad_Wt[:] = 0
    grad_bias[:] = 0
    for b in range(batch):
        for t in range(outputs):
            for c in range(channels):
                grad_bias[c] += gy[b, t, c]
        for s in range(length):
            for c in range(channels):
                grad_x[b, s, c] = 0
            for j in range(k):
                t = s + (k - 1) - j  # the output position x[s] meets tap j at
                if t >= outputs:
                    continue
                for c in range(channels):
                    grad_x[b, s, c] += Wt[j, c] * gy[b, t, c]
                for c in range(channels):
                    grad_Wt[j, c] += gy[b, t, c] * x[b, s, c]


# -- Mamba-2's one-block scan (state-space duality), its weights -----------------------------
#
# ``capture.models.ssd.ssd_block`` computes y[t] = sum_{s <= t} W[t, s] x[s] per head with
# W[t, s] = exp(cum[t] - cum[s]) (C[t] . B[s]) dt[s], cum the running sum of dt A (in float64).
# Built from torch's element-wise operations, W and its gradients pass through a dozen
# (batch, heads, length, length) temporaries; here one pass writes W, and one pass turns the
# gradient of W into those of dt, A, B and C. The products with x stay batched matrix
# products in torch (BLAS). Each (batch row, head) is worked as one flat length x length
# block, so that the loops are long enough to vectorise; above the diagonal the decay is
# multiplied by an exact 0 (``keep``), never left a tiny exponential: products of a 1e-38
# decay are subnormal floats, whose arithmetic cost this kernel 2-3x its time when they did.


@njit(cache=True)
def _ssd_group_scores(B, C, b, g, scores):  # pragma: no cover - compiled
    """scores[t, s] = C[b, g, t] . B[b, g, s] for s <= t, 0 above the diagonal (m ascending)."""
    length, d_state = B.shape[2], B.shape[3]
    for t in range(length):
        for s in range(length):
            scores[t, s] = 0
        for m in range(d_state):
            c = C[b, g, t, m]
            for s in range(t + 1):
                scores[t, s] += c * B[b, g, s, m]


@njit(cache=True)
def _ssd_head_terms(dt, A, b, h, keep, cum, decay, source):  # pragma: no cover - compiled
    """One head's flat (t, s) terms: decay = exp(cum[t] - cum[s]) on and below the diagonal,
    exactly 0 above it; source = dt[s]. cum: float64 running sum of the float32 dt A."""
    length = dt.shape[2]
    a = A[h]
    total = 0.0
    for t in range(length):
        total += np.float64(dt[b, h, t] * a)
        cum[t] = total
    for t in range(length):
        row = t * length
        for s in range(length):
            d = cum[t] - cum[s]
            decay[row + s] = d if s <= t else 0.0  # the exponent stays finite above the diagonal
            source[row + s] = dt[b, h, s]
    for i in range(length * length):
        decay[i] = _exp(decay[i]) * keep[i]


@njit(cache=True)
def _ssd_keep(length, dtype_like):  # pragma: no cover - compiled
    keep = np.zeros(length * length, dtype_like.dtype)
    for t in range(length):
        for s in range(t + 1):
            keep[t * length + s] = 1
    return keep


_SIG_SSD = [
    types.void(types.Array(dt, 3, "C"), types.Array(dt, 1, "C"), *([types.Array(dt, 4, "C")] * 3))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def ssd_weights(dt, A, B, C, W):  # pragma: no cover - compiled
    """W[b, h, t, s] = exp(cum[t] - cum[s]) (C[b, g, t] . B[b, g, s]) dt[b, h, s] for s <= t,
    0 above; cum[t] = sum_{j <= t} dt[b, h, j] A[h] in float64, g = h // (heads // groups).

    dt: (batch, heads, length), after bias, softplus and clamp; A: (heads,); B, C: (batch,
    groups, length, d_state); W: (batch, heads, length, length). One dtype, C-contiguous.
    """
    batch, heads, length = dt.shape
    groups = B.shape[1]
    per = heads // groups
    block = length * length
    scores = np.empty((length, length), W.dtype)
    flat_scores = scores.reshape(block)
    keep = _ssd_keep(length, W)
    cum = np.empty(length, np.float64)
    decay = np.empty(block, W.dtype)
    source = np.empty(block, W.dtype)
    for b in range(batch):
        for g in range(groups):
            _ssd_group_scores(B, C, b, g, scores)
            for h in range(g * per, (g + 1) * per):
                _ssd_head_terms(dt, A, b, h, keep, cum, decay, source)
                w = W[b, h].reshape(block)
                for i in range(block):
                    w[i] = decay[i] * flat_scores[i] * source[i]


_SIG_SSD_BWD = [
    types.void(types.Array(dt, 3, "C"), types.Array(dt, 1, "C"), *([types.Array(dt, 4, "C")] * 3),
               types.Array(dt, 3, "C"), types.Array(dt, 1, "C"), *([types.Array(dt, 4, "C")] * 2))
    for dt in (types.float32, types.float64)
]


@njit(cache=True)
def ssd_weights_backward(dt, A, B, C, GW, grad_dt, grad_A, grad_B, grad_C):  # pragma: no cover
    """The gradients of ``sum(GW * W)`` for `ssd_weights`' W, written into the ``grad_*``
    (shapes of dt, A, B, C). GW: (batch, heads, length, length), the gradient of W.

    With W = (decay scores) source: source's gradient is GW decay scores, the scores'
    GW source decay (summed over a group's heads), the log-decay's GW source scores decay;
    a log-decay cum[t] - cum[s] passes it to cum[t] and, negated, to cum[s] (float64), and
    cum's gradient reaches each dt A as the sum over later positions.
    """
    batch, heads, length = dt.shape
    groups, d_state = B.shape[1], B.shape[3]
    per = heads // groups
    block = length * length
    dtype = GW.dtype
    scores = np.empty((length, length), dtype)
    flat_scores = scores.reshape(block)
    g_scores = np.empty((length, length), dtype)
    flat_g_scores = g_scores.reshape(block)
    keep = _ssd_keep(length, GW)
    cum = np.empty(length, np.float64)
    g_cum = np.empty(length, np.float64)
    decay = np.empty(block, dtype)
    source = np.empty(block, dtype)
    g_source = np.empty((length, length), dtype)
    flat_g_source = g_source.reshape(block)
    g_ws = np.empty(block, dtype)  # GW source
    g_log = np.empty((length, length), dtype)
    flat_g_log = g_log.reshape(block)
    g_dt = np.empty(length, dtype)
    grad_A[:] = 0
    for b in range(batch):
        for g in range(groups):
            _ssd_group_scores(B, C, b, g, scores)
            flat_g_scores[:] = 0
            for h in range(g * per, (g + 1) * per):
                _ssd_head_terms(dt, A, b, h, keep, cum, decay, source)
                gw = GW[b, h].reshape(block)
                for i in range(block):
                    flat_g_source[i] = gw[i] * (decay[i] * flat_scores[i])
                for i in range(block):
                    g_ws[i] = gw[i] * source[i]
                for i in range(block):
                    flat_g_scores[i] += g_ws[i] * decay[i]
                for i in range(block):
                    flat_g_log[i] = (g_ws[i] * flat_scores[i]) * decay[i]
                # column sums (over t) give the source's and -cum[s]'s gradients, row sums
                # (over s) cum[t]'s; both in ascending order
                g_dt[:] = 0
                g_cum[:] = 0
                for t in range(length):
                    for s in range(length):
                        g_dt[s] += g_source[t, s]
                    for s in range(length):
                        g_cum[s] -= g_log[t, s]
                for t in range(length):
                    row = 0.0
                    for s in range(t + 1):
                        row += g_log[t, s]
                    g_cum[t] += row
                a = A[h]
                later = 0.0
                for k in range(length - 1, -1, -1):
                    later += g_cum[k]
                    grad_dt[b, h, k] = g_dt[k] + later * a
                    grad_A[h] += later * dt[b, h, k]
            for t in range(length):
                for m in range(d_state):
                    grad_C[b, g, t, m] = 0
                    grad_B[b, g, t, m] = 0
            for t in range(length):
                for s in range(t + 1):
                    v = g_scores[t, s]
                    for m in range(d_state):
                        grad_C[b, g, t, m] += v * B[b, g, s, m]
                        grad_B[b, g, s, m] += v * C[b, g, t, m]


def _compile(scans, convs=()) -> None:
    """Compile (or load from numba's cache) each ``(kernel, (float32, float64 signature))`` for
    both signatures, then allow no others (a call with other types is a TypeError, not a compile).

    The scans' float32 code is compiled with LLVM's loop vectoriser held to 16 lanes (one 512-bit
    register of float32): on AVX-512 CPUs LLVM otherwise prefers 256-bit vectors, and the
    16-lane code took 0.6x the forward's time and 0.85x the backward's (measured side by
    side). It computes the same bits: without fastmath the vectoriser reorders no arithmetic.
    The setting is process-wide in LLVM, so it is set just for these compilations and put
    back to 0 (no forced width) after them; everything else is compiled before it is set
    (loops that cannot be vectorised, such as float64's ``math.exp`` calls, are reported on
    stderr by LLVM under a forced width).
    """
    for kernel, (_, float64) in (*scans, *convs):
        kernel.compile(float64)
    for kernel, (float32, _) in convs:  # a loop of conv_backward's would be reported too
        kernel.compile(float32)
    try:
        llvm.set_option("", "--force-vector-width=16")
        for kernel, (float32, _) in scans:
            kernel.compile(float32)
    finally:
        llvm.set_option("", "--force-vector-width=0")
    for kernel, _ in (*scans, *convs):
        kernel.disable_compile()


_compile(scans=((scan_forward, _SIG_FWD), (scan_backward, _SIG_BWD),
                (ssd_weights, _SIG_SSD), (ssd_weights_backward, _SIG_SSD_BWD)),
         convs=((conv_forward, _SIG_CONV), (conv_backward, _SIG_CONV_BWD)))


# -- Mamba-1's scan with fused multiply-adds (the ``[train] fused_kernels_fma`` option) --------


@functools.cache
def contracted_scan() -> tuple[Any, Any]:
    """`scan_forward` and `scan_backward` compiled with fused multiply-adds: the same loops
    under numba's ``fastmath={"contract"}`` (and no other fastmath flag), so each ``a * b + c``
    in them may become one instruction, rounded once instead of twice. No sum is reordered and
    the result is still fixed by the inputs, on a given CPU; but it is another rounding than
    the kernels above (~1e-7 relative), so it is its own option, recorded. Measured at the
    Jiang shapes (batch 64, L = 40, d_inner 256, d_state 16): forward 0.7x, backward 0.8x of
    the kernels above (docs/measured.md). Mamba-2's kernels gained at most 0.3 ms a layer
    this way and are left as they are.

    Compiled on first call (about 4 s; loaded from numba's cache later), in separate cache
    files (their own names), for float32 and float64."""
    pair = (_contracted(scan_forward), _contracted(scan_backward))
    _compile(scans=((pair[0], _SIG_FWD), (pair[1], _SIG_BWD)))
    return pair


def _contracted(kernel):
    """A twin of a kernel, compiled with ``fastmath={"contract"}`` under the name
    ``<name>_fma`` (numba keys its cache files by name, not by compile flags)."""
    f = kernel.py_func
    twin = FunctionType(f.__code__, f.__globals__, f.__name__ + "_fma", f.__defaults__, f.__closure__)
    twin.__qualname__ = f.__qualname__ + "_fma"
    twin.__doc__ = f.__doc__
    return njit(cache=True, fastmath={"contract"})(twin)
