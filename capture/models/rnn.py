"""LSTM and GRU, one ``nn.LSTM`` / ``nn.GRU`` module per layer.

One module per layer (rather than ``num_layers=n``) makes every layer's output a module
output, so it can be captured, edited and resumed from. Layout: embedding (at the recurrent
width) -> n recurrent layers -> LayerNorm (``norm``) -> head. No residual connections: the plain
stacked recurrent baseline.

An LSTM layer carries two states: its output h (the stored layer) and its cell state c (site
``"L{i}.cell"``). Editing a layer's output does not edit its cell state: `forward_from`
feeds the edited h to the layers above, which recompute their own h and c; the cell state
of the edited layer itself is whatever produced the original h.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from capture.models.base import Extractor, LayerStack
from capture.models.config import ModelConfig
from capture.models.registry import Architecture, register_architecture


def lstm_cell_states(lstm: Any, inputs: torch.Tensor) -> torch.Tensor:
    """The cell state c[t] of a one-layer LSTM at every position.

    ``nn.LSTM`` returns only the last cell state, so this recomputes the recurrence from
    the module's weights (PyTorch's gate order i, f, g, o).

    Parameters
    ----------
    lstm : nn.LSTM
        One layer, ``batch_first=True``, unidirectional.
    inputs : Tensor, (batch, position, input_size)

    Returns
    -------
    Tensor, (batch, position, hidden_size)
    """
    # (batch, position, 4 * hidden): the input part of every gate, for all steps at once
    gate_inputs = inputs @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0
    h = inputs.new_zeros(inputs.shape[0], lstm.hidden_size)
    c = torch.zeros_like(h)
    cells = []
    for t in range(inputs.shape[1]):
        gates = gate_inputs[:, t] + h @ lstm.weight_hh_l0.T
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        cells.append(c)
    return torch.stack(cells, dim=1)


def _cell_extractor(module: nn.Module, inputs: tuple, output, length: int) -> torch.Tensor:
    return lstm_cell_states(module, inputs[0])


class RecurrentModel(LayerStack):
    """A stack of one-layer LSTMs or GRUs with a task head."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, n_classes: int):
        width = cfg.sizes()["hidden_size"]
        super().__init__(cfg.arch, width, cfg.n_layers, cfg)
        cell = {"lstm": nn.LSTM, "gru": nn.GRU}[cfg.arch]
        self.embed_tokens = nn.Embedding(vocab_size, width)
        self.layers = nn.ModuleList(cell(width, width, batch_first=True) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def run_block(self, index, hidden, context):
        output, _ = self.layers[index](hidden)  # (batch, position, hidden_size)
        return output

    def block_sites(self) -> dict[str, tuple[str, Extractor]]:
        # The cell state: read from the layer's input by rerunning its recurrence.
        return {"cell": ("", _cell_extractor)} if self.arch == "lstm" else {}


# The hidden width is parameter-matched to a GPT-NeoX layer (capture.models.config): an LSTM
# layer of width H has 8 H^2 weights, a GRU layer 6 H^2, against the Transformer's 12.5 d^2.
register_architecture(Architecture(
    "lstm", "stacked one-layer LSTMs (the cell state is a site: cell)", RecurrentModel,
    sizes=("hidden_size",), defaults=lambda d, given: {"hidden_size": round(1.25 * d)}))
register_architecture(Architecture(
    "gru", "stacked one-layer GRUs", RecurrentModel,
    sizes=("hidden_size",), defaults=lambda d, given: {"hidden_size": round(math.sqrt(12.5 / 6) * d)}))
