"""H3: a shift SSM and a diagonal SSM with multiplicative gating (Fu et al. 2023).

As Zoology's ``H3`` (``zoology/mixers/h3/h3.py``; its names, ``ssm_k_kernel`` ->
``shift_ssm``, ``ssm_k_D`` -> ``shift_skip``, ``kernel`` -> ``diag_ssm``). With heads of
width p (``head_dim``, 2 in Zoology's MQAR configs) and H = d_model / p::

    q, k, v = q_proj(u), k_proj(u), v_proj(u)                      # with biases
    k  = shift_ssm(k) + shift_skip * k                             # per channel
    kv[t, h, i, j] = k[t, h, i] * v[t, h, j]                       # p x p per head
    y  = diag_ssm_h(kv) + D_h * kv                                 # one SSM per head h
    out[t, h, j] = sum_i q[t, h, i] * y[t, h, i, j];  output_linear(out)

**Shift SSM**: A the shift matrix and B = e_1, so its state is the last N inputs and its
output the causal convolution of k with C (length N, ``conv_kernel``, default the state size
as in Zoology). Here it *is* that convolution (`ShiftSSM`: a depthwise convolution weight in
``nn.Conv1d``'s layout, with the initialisation Zoology gives C, applied through an FFT), so
variant ``no_conv`` and ``conv_kernel`` apply to it as to the other short convolutions.
**Ours**: Zoology also
trains B, which makes the kernel the cross-correlation of B and C (still length N); we keep
B = e_1 as in the H3 paper.

**Diagonal SSM**: S4D-Lin (Zoology's default ``measure="diag-lin"``), N/2 complex modes per
head, A_n = -1/2 + i pi n (real part stored as log 0.5), B = 1, C ~ complex N(0, 1),
dt log-uniform in [1e-3, 1e-1], bilinear discretisation::

    s_t = dA s_{t-1} + dB x_t,  y_t = 2 Re(sum_n C_n s_t,n),
    dA = (1 + dt A / 2) / (1 - dt A / 2),  dB = B dt / (1 - dt A / 2)

The fast form builds the kernel K[l] = 2 Re(sum_n C_n dB_n dA_n^l) and convolves through an
FFT; `set_reference_path` runs the two recurrences step by step (the shift register and s_t).
The ``(d h)`` output order of Zoology is ``(h d)`` here, a fixed permutation of
``output_linear``'s inputs.

**Sites**: ``q_proj``, ``k_proj``, ``v_proj``, ``shift_ssm`` (the convolution's output),
``output_linear``, and the recurrent state ``ssm_state``: s_t per position, flattened as
(head, i, j, mode, real/imaginary), d_model x p x N values (8,192 at d 128, p 2, N 32).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from capture.models.base import Extractor, output_extractor
from capture.models.config import ModelConfig
from capture.models.longconv import fft_causal_conv
from capture.models.zoo import register_zoo, state_extractor

DT_MIN, DT_MAX = 1e-3, 1e-1


class DiagSSM(nn.Module):
    """S4D-Lin with bilinear discretisation: `heads` independent SSMs of N/2 complex modes."""

    def __init__(self, heads: int, state_size: int):
        super().__init__()
        modes = state_size // 2
        log_dt = torch.rand(heads) * (math.log(DT_MAX) - math.log(DT_MIN)) + math.log(DT_MIN)
        self.log_dt = nn.Parameter(log_dt)
        self.inv_A_real = nn.Parameter(torch.full((heads, modes), math.log(0.5)))
        self.A_imag = nn.Parameter(math.pi * torch.arange(modes).float().repeat(heads, 1))
        self.B = nn.Parameter(torch.view_as_real(torch.ones(heads, modes, dtype=torch.cfloat)))
        self.C = nn.Parameter(torch.view_as_real(torch.randn(heads, modes, dtype=torch.cfloat)))

    def discretised(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dA, dB, C: (heads, modes) complex each."""
        dt = torch.exp(self.log_dt)[:, None]
        dtA = (-torch.exp(self.inv_A_real) + 1j * self.A_imag) * dt
        dA = (1 + dtA / 2) / (1 - dtA / 2)
        dB = torch.view_as_complex(self.B) * dt / (1 - dtA / 2)
        return dA, dB, torch.view_as_complex(self.C)

    def kernel(self, length: int) -> torch.Tensor:
        """(heads, length): K[l] = 2 Re(sum_n C_n dB_n dA_n^l)."""
        dA, dB, C = self.discretised()
        lags = torch.arange(length, device=dA.device)
        powers = torch.exp(torch.log(dA)[..., None] * lags)  # (heads, modes, length)
        return 2 * torch.einsum("hn,hnl->hl", C * dB, powers).real

    def recurrence(self, x: torch.Tensor, keep_states: bool = False):
        """The SSM step by step: x (batch, position, heads, ...) -> y like x (the reference).

        With ``keep_states``, also s_t: (batch, position, heads, ..., modes) complex.
        """
        dA, dB, C = self.discretised()
        shape = (dA.shape[0], *[1] * (x.dim() - 3), dA.shape[1])  # heads, (1, ...), modes
        dA, dB, C = dA.view(shape), dB.view(shape), C.view(shape)
        state = torch.zeros(*x[:, 0].shape, shape[-1], dtype=dA.dtype, device=x.device)
        ys, states = [], []
        for t in range(x.shape[1]):
            state = dA * state + dB * x[:, t, ..., None]
            ys.append(2 * (C * state).sum(-1).real)
            if keep_states:
                states.append(state)
        y = torch.stack(ys, dim=1)
        return (y, torch.stack(states, dim=1)) if keep_states else y


class ShiftSSM(nn.Module):
    """The shift SSM: a causal depthwise convolution with kernel C of length N, no bias.

    ``weight`` has ``nn.Conv1d``'s layout and initialisation, (channel, 1, N), its last tap
    on the current step (C[l] = weight[:, 0, N - 1 - l]), so `capture.models.zoo`'s
    ``no_conv`` applies unchanged. Fast form: an FFT convolution (a depthwise ``nn.Conv1d``
    of this length is slow on the CPU); reference: the shift register.
    """

    def __init__(self, channels: int, length: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, length))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # as nn.Conv1d
        self.bias = None
        self.reference = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, position, channel) -> same."""
        if self.reference:
            return shift_register(self.weight, x)
        return fft_causal_conv(x, self.weight[:, 0].flip(-1)).to(x.dtype)


def shift_register(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The shift SSM step by step (state = the last N inputs), for a (channel, 1, N) kernel."""
    kernel = weight[:, 0].flip(-1)  # (channel, N): C[c, l] multiplies x[t - l]
    register = x.new_zeros(x.shape[0], x.shape[2], kernel.shape[-1])
    out = []
    for t in range(x.shape[1]):
        register = torch.cat([x[:, t, :, None], register[..., :-1]], dim=-1)
        out.append((register * kernel).sum(-1))
    return torch.stack(out, dim=1)


class H3Mixer(nn.Module):
    """H3: (batch, position, d_model) -> same (see module doc)."""

    fast_path = "torch-fft"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, sizes = cfg.d_model, cfg.sizes()
        self.head_dim = sizes["head_dim"]
        self.heads = d // self.head_dim
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, d) for _ in range(3))
        self.shift_ssm = ShiftSSM(d, sizes["conv_kernel"])
        self.shift_skip = nn.Parameter(torch.randn(d))
        self.diag_ssm = DiagSSM(self.heads, sizes["state_size"])
        self.D = nn.Parameter(torch.randn(self.heads))
        self.output_linear = nn.Linear(d, d)
        self.reference = False

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.heads, self.head_dim)

    def _shifted_k(self, u: torch.Tensor) -> torch.Tensor:
        k = self.k_proj(u)
        return self.shift_ssm(k) + self.shift_skip * k

    def _kv(self, u: torch.Tensor) -> torch.Tensor:
        """(batch, position, head, i, j): the gated products the diagonal SSM reads."""
        return self._heads(self._shifted_k(u))[..., :, None] * self._heads(self.v_proj(u))[..., None, :]

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        if not self.reference:
            return self.output_linear(self._fast(u))
        kv = self._kv(u)
        y = self.diag_ssm.recurrence(kv) + self.D[:, None, None] * kv
        out = (y * self._heads(self.q_proj(u))[..., None]).sum(-2)  # (batch, position, head, j)
        return self.output_linear(out.flatten(2))

    def _fast(self, u: torch.Tensor) -> torch.Tensor:
        """The gated SSM through FFTs, one row i of k v^T at a time, time as the last axis
        (measured ~2x faster on the CPU than one FFT over (batch, position, head, i, j))."""
        batch, length, _ = u.shape

        def heads_first(x: torch.Tensor) -> torch.Tensor:  # -> (batch, head, p, position)
            return x.transpose(1, 2).reshape(batch, self.heads, self.head_dim, length)

        q, k, v = heads_first(self.q_proj(u)), heads_first(self._shifted_k(u)), heads_first(self.v_proj(u))
        n = 2 * length  # no wrap-around
        kernel_f = torch.fft.rfft(self.diag_ssm.kernel(length), n=n)[:, None]  # (head, 1, freq)
        out = torch.zeros_like(v)
        for i in range(self.head_dim):
            kv = k[:, :, i : i + 1] * v  # row i of k v^T: (batch, head, j, position)
            y = torch.fft.irfft(torch.fft.rfft(kv, n=n) * kernel_f, n=n)[..., :length]
            out = out + q[:, :, i : i + 1] * (y + self.D[:, None, None] * kv)
        return out.reshape(batch, -1, length).transpose(1, 2)  # (batch, position, (head j))

    def states(self, u: torch.Tensor) -> torch.Tensor:
        """s_t per position: (batch, position, heads * p * p * modes * 2)."""
        _, states = self.diag_ssm.recurrence(self._kv(u), keep_states=True)
        return torch.view_as_real(states).flatten(2)  # (head, i, j, mode, re/im)

    def short_convs(self) -> list[nn.Module]:
        return [self.shift_ssm]

    def sites(self) -> dict[str, tuple[str, Extractor]]:
        sites: dict[str, tuple[str, Extractor]] = {
            name: (name, output_extractor) for name in ("q_proj", "k_proj", "v_proj")
        }
        sites["shift_ssm"] = ("shift_ssm", output_extractor)
        sites["output_linear"] = ("output_linear", output_extractor)
        sites["ssm_state"] = ("", state_extractor("states"))
        return sites


def _check(cfg: ModelConfig) -> None:
    sizes = cfg.sizes()
    if cfg.d_model % sizes["head_dim"]:
        raise ValueError(f"head_dim={sizes['head_dim']} must divide d_model={cfg.d_model}")
    if sizes["state_size"] % 2:
        raise ValueError(f"h3 state_size={sizes['state_size']} must be even (complex modes)")


def _parameters(d: int, sizes: dict[str, int]) -> int:
    """One mixer's parameters: q/k/v/out projections, the shift SSM, the diagonal SSM."""
    heads, n, k = d // sizes["head_dim"], sizes["state_size"], sizes["conv_kernel"]
    diag = heads * (1 + 3 * n)  # log_dt, then per mode A (2), B (2), C (2)
    return 4 * (d * d + d) + d * k + d + diag + heads


def _sizes(d: int) -> dict[str, int]:
    state = 2 * max(1, d // 8)  # d_model / 4, even (N/2 complex modes)
    return {"head_dim": 2, "state_size": state, "conv_kernel": state}


register_zoo("h3", "H3: shift SSM and diagonal SSM around k v^T", H3Mixer, _sizes, _parameters, check=_check)
