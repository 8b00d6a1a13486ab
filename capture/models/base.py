"""`SequenceModel`: the one interface every architecture offers.

A model is an embedding, a stack of blocks, a final norm and an untied per-position task
head. Its *layers* are the embedding output and each block's raw output (before the final
norm), in that order: ``layer_names = ["embed", "L0", ..., "L{n-1}"]``. The forward pass is
an explicit loop over the blocks, so the same code serves the plain forward, the capture of
every layer, and resuming from any layer (`forward_from`).

*Sites* are further activations, named by module path inside a block ("L2.mixer",
"L2.mixer.conv1d", "L0.attention") from one small table per architecture, plus derived ones
such as "L1.cell" (an LSTM's cell state). They are read with forward hooks, selected by
fnmatch-style patterns.
"""

from __future__ import annotations

import abc
import fnmatch
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn

from store.errors import InvalidArgumentError

# Reads one site from a hook call: (module, positional inputs, output, length) ->
# (batch, position, feature).
Extractor = Callable[[nn.Module, tuple, Any, int], torch.Tensor]


def output_extractor(module: nn.Module, inputs: tuple, output: Any, length: int) -> torch.Tensor:
    """A module's output, (batch, position, feature); tuples give their first element."""
    value = output[0] if isinstance(output, tuple) else output
    if value.dim() != 3 or value.shape[1] != length:
        raise ValueError(
            f"{type(module).__name__} returned shape {tuple(value.shape)}, not "
            f"(batch, {length}, feature); it cannot serve as a site"
        )
    return value


def conv_extractor(module: nn.Module, inputs: tuple, output: Any, length: int) -> torch.Tensor:
    """A causal ``nn.Conv1d`` (padded by k-1 both sides): (batch, channel, length + k - 1) ->
    its first `length` steps, (batch, position, channel), before any activation."""
    return output[..., :length].transpose(1, 2)


class SequenceModel(nn.Module, abc.ABC):
    """Embedding, blocks, final norm, per-position task head.

    Subclasses build the modules (the task head as ``head``) and implement `blocks`,
    `embedding`, `final_norm`, `run_block`, `block_sites`, and optionally `embed` and
    `block_context`.

    Attributes
    ----------
    arch : str
        One of `capture.models.registry.names()`.
    layer_names : list of str
        ``["embed", "L0", ..., "L{n-1}"]``: the layers of `forward_with_hidden`.
    hidden_size : int
        Feature width of every stored layer.
    config : ModelConfig or None
        The config it was built from (None for pretrained checkpoints).
    """

    arch: str
    head: nn.Linear

    def __init__(self, arch: str, hidden_size: int, n_layers: int, config=None):
        super().__init__()
        self.arch = arch
        self.hidden_size = hidden_size
        self.layer_names = ["embed"] + [f"L{i}" for i in range(n_layers)]
        self.config = config

    # -- what each architecture provides ------------------------------------------------
    @property
    @abc.abstractmethod
    def blocks(self) -> Sequence[nn.Module]:
        """The blocks, in order; block i produces layer ``L{i}``."""

    @property
    @abc.abstractmethod
    def embedding(self) -> nn.Module:
        """The token embedding module (its output is layer "embed")."""

    @property
    @abc.abstractmethod
    def final_norm(self) -> nn.Module:
        """The norm between the last block and the head."""

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, position) token ids -> (batch, position, hidden_size)."""
        return self.embedding(tokens)

    def block_context(self, hidden: torch.Tensor) -> dict[str, Any]:
        """Whatever every block needs besides the hidden states (rotary tables, masks)."""
        return {}

    @abc.abstractmethod
    def run_block(self, index: int, hidden: torch.Tensor, context: dict[str, Any]) -> torch.Tensor:
        """Block `index`: (batch, position, feature) -> (batch, position, feature)."""

    def block_sites(self) -> dict[str, tuple[str, Extractor]]:
        """Site name inside a block -> (module path inside the block, extractor)."""
        return {}

    @property
    def implementation(self) -> str:
        """Which code computes the forward pass (recorded with captured runs)."""
        return "torch"

    @property
    def hf_config_dict(self) -> dict | None:
        """The `transformers` config as a JSON-able dict, for rebuilding; None if not HF."""
        return None

    # -- the forward passes ---------------------------------------------------------------
    def _run_blocks(self, start: int, hidden: torch.Tensor, keep: bool):
        context = self.block_context(hidden)
        states = [hidden] if keep else []
        for index in range(start, len(self.blocks)):
            hidden = self.run_block(index, hidden, context)
            if keep:
                states.append(hidden)
        return self.head(self.final_norm(hidden)), states

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of the task head.

        Parameters
        ----------
        tokens : LongTensor, (batch, position)

        Returns
        -------
        Tensor, (batch, position, n_classes)
        """
        logits, _ = self._run_blocks(0, self.embed(_check_tokens(tokens)), keep=False)
        return logits

    def forward_with_hidden(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and every layer's hidden states.

        Parameters
        ----------
        tokens : LongTensor, (batch, position)

        Returns
        -------
        logits : Tensor, (batch, position, n_classes)
        hidden : Tensor, (batch, position, layer, feature)
            Layer 0 is the embedding output, layer i + 1 the raw output of block i (the
            last one before the final norm), as named by `layer_names`.
        """
        logits, states = self._run_blocks(0, self.embed(_check_tokens(tokens)), keep=True)
        return logits, torch.stack(states, dim=2)

    def forward_from(self, layer: int | str, hidden: torch.Tensor) -> torch.Tensor:
        """Resume the forward pass from the states at one layer.

        Parameters
        ----------
        layer : int or str
            Index into `layer_names`, or the name itself ("embed", "L2").
        hidden : Tensor, (batch, position, feature)
            The (possibly edited) states at that layer. For an LSTM, only the layer's
            output h is replaced; its cell state is recomputed by the layers above from h,
            and the cell state *inside* the edited layer is not edited.

        Returns
        -------
        Tensor, (batch, position, n_classes)
            Logits; equal to `forward` when `hidden` is unchanged.
        """
        index = self.layer_index(layer)
        if hidden.dim() != 3 or hidden.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden must be (batch, position, {self.hidden_size}); got {tuple(hidden.shape)}"
            )
        logits, _ = self._run_blocks(index, hidden, keep=False)
        return logits

    def layer_index(self, layer: int | str) -> int:
        """Position of `layer` (an index or a name) in `layer_names`."""
        if isinstance(layer, str):
            if layer not in self.layer_names:
                raise KeyError(
                    f"unknown layer {layer!r}; expected one of {', '.join(self.layer_names)}"
                )
            return self.layer_names.index(layer)
        if not 0 <= layer < len(self.layer_names):
            raise IndexError(
                f"layer index {layer} out of range 0..{len(self.layer_names) - 1} "
                f"({', '.join(self.layer_names)})"
            )
        return int(layer)

    # -- sites ------------------------------------------------------------------------------
    def sites(self) -> list[str]:
        """Every named activation site: the layers, named modules inside each block, and
        "final_norm". Each is (batch, position, feature) in `forward_with_sites`."""
        names = ["embed"]
        for block_name in self.layer_names[1:]:
            names.append(block_name)
            names += [f"{block_name}.{site}" for site in self.block_sites()]
        return names + ["final_norm"]

    def match_sites(self, patterns: Sequence[str]) -> list[str]:
        """Sites matching any of the fnmatch-style `patterns` ("L*.mixer", "L1.cell")."""
        if isinstance(patterns, str):
            patterns = [patterns]
        available = self.sites()
        chosen = set()
        for pattern in patterns:
            found = fnmatch.filter(available, pattern)
            if not found:
                raise InvalidArgumentError(
                    f"site pattern {pattern!r} matches no site of this {self.arch}; "
                    f"sites are: {', '.join(available)}"
                )
            chosen.update(found)
        return [name for name in available if name in chosen]

    def _site_reader(self, name: str) -> tuple[nn.Module, Extractor]:
        if name == "embed":
            return self.embedding, output_extractor
        if name == "final_norm":
            return self.final_norm, output_extractor
        block_name, _, inner = name.partition(".")
        block = self.blocks[self.layer_names.index(block_name) - 1]
        if not inner:
            return block, output_extractor
        path, extractor = self.block_sites()[inner]
        return (block.get_submodule(path) if path else block), extractor

    def forward_with_sites(
        self, tokens: torch.Tensor, patterns: Sequence[str]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits and the activations at every site matching `patterns`.

        Parameters
        ----------
        tokens : LongTensor, (batch, position)
        patterns : list of str
            fnmatch-style globs over `sites()`; a pattern matching nothing is a ValueError
            that lists the sites.

        Returns
        -------
        logits : Tensor, (batch, position, n_classes)
        activations : dict of str to Tensor, each (batch, position, feature)
            In `sites()` order.
        """
        names = self.match_sites(patterns)
        length = _check_tokens(tokens).shape[1]
        captured: dict[str, torch.Tensor] = {}
        handles = []
        for name in names:
            module, extractor = self._site_reader(name)

            def hook(mod, inputs, output, name=name, extractor=extractor):
                captured[name] = extractor(mod, inputs, output, length)

            handles.append(module.register_forward_hook(hook))
        try:
            logits = self.forward(tokens)
        finally:
            for handle in handles:
                handle.remove()
        missing = [name for name in names if name not in captured]
        if missing:
            raise ValueError(
                f"sites {', '.join(missing)} are not computed as modules by the "
                f"{self.implementation!r} implementation; on the CPU path every site is"
            )
        return logits, {name: captured[name] for name in names}  # in `sites()` order


def _check_tokens(tokens: torch.Tensor) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise TypeError(f"tokens must be an integer tensor (batch, position); got {shape}")
    return tokens


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (all, or only those with ``requires_grad``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


class LayerStack(SequenceModel):
    """A model built here from its parts: blocks in ``self.layers``, the token embedding in
    ``self.embed_tokens`` and the final norm in ``self.norm`` (the recurrent models and the
    retrieval zoo; the Hugging Face models keep theirs where ``transformers`` puts them)."""

    @property
    def blocks(self) -> Sequence[nn.Module]:
        return cast("Sequence[nn.Module]", self.layers)

    @property
    def embedding(self) -> nn.Module:
        return cast(nn.Module, self.embed_tokens)

    @property
    def final_norm(self) -> nn.Module:
        return cast(nn.Module, self.norm)

