"""nnsight: the saved outputs of a trace (module path -> tensor) into a store.

:func:`nnsight_outputs` runs one trace and saves the outputs of the modules named (in the
order the forward pass finishes them, which nnsight requires); :func:`import_nnsight` writes
one mapping per batch. Layers are the block outputs (``….h.<i>``, ``….layers.<i>``,
``….blocks.<i>`` -> ``L<i>``) after the embedding's output (``embed=``, or the one path ending
in ``wte``, ``embed_tokens``, ``embeddings``, ``drop``, …), or exactly ``layers=[…]``; every
other path is a site (``transformer.h.0.mlp`` -> ``L0.mlp``). A block that returns a tuple
contributes its first element (the hidden state).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from store import MissingError, Store

from .common import (
    Batches,
    ImportOptions,
    ImportResult,
    RunInfo,
    as_run,
    first_tensor,
    module_plan,
    require,
    write,
)
from .files import SafetensorsSource, import_safetensors, safetensors_files
from .registry import register_format


def nnsight_outputs(model: Any, inputs: Any, paths: Sequence[str]) -> dict[str, torch.Tensor]:
    """Run one nnsight trace of ``model`` (a torch module or an ``nnsight.NNsight``) on
    ``inputs`` and return ``{path: output}`` for each module path (e.g. ``transformer.h.0``)."""
    nnsight = require("nnsight", "tracing with nnsight")
    traced = model if isinstance(model, nnsight.NNsight) else nnsight.NNsight(model)
    module = traced._module
    order = _finish_order(module)
    unknown = [p for p in paths if p not in order]
    if unknown:
        raise MissingError(f"module {unknown[0]!r} is not in the model; modules: "
                           f"{', '.join(list(order)[:12])}, …")
    saved: dict[str, Any] = {}
    with torch.no_grad(), traced.trace(inputs):
        for p in sorted(paths, key=order.__getitem__):
            saved[p] = _envoy(traced, p).output.save()
    return {p: first_tensor(saved[p]) for p in paths}


def _finish_order(module: torch.nn.Module) -> dict[str, int]:
    """Module paths in the order their forward calls return (children before parents)."""
    out: dict[str, int] = {}

    def visit(mod: torch.nn.Module, prefix: str) -> None:
        for name, child in mod.named_children():
            visit(child, f"{prefix}.{name}" if prefix else name)
        if prefix:
            out[prefix] = len(out)

    visit(module, "")
    return out


def _envoy(traced: Any, path: str) -> Any:
    node = traced
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


def import_nnsight(
    store: Store | str,
    run: RunInfo | str,
    outputs: Mapping[str, Any] | Iterable[Mapping[str, Any]],
    *,
    layers: Sequence[str] | Mapping[str, str] | None = None,
    embed: str | None = None,
    sites: Sequence[str] | None = None,
    labels: Any = None,
    tokens: Any = None,
    mask: Any = None,
    n_sequences: int | None = None,
    dtype: str = "float16",
    block_size: int | None = None,
    **run_fields: Any,
) -> ImportResult:
    """Write nnsight trace outputs (one mapping module path -> tensor per batch) as one run
    and length (see the module's docs for how paths become layers and sites)."""
    batches: Any = [outputs] if isinstance(outputs, Mapping) else outputs
    if isinstance(batches, Sequence):
        if not batches:
            raise MissingError("no nnsight outputs given")
        names = [str(k) for k in batches[0].keys()]
    else:
        it = iter(batches)
        head = next(it, None)
        if head is None:
            raise MissingError("no nnsight outputs given")
        names = [str(k) for k in head.keys()]
        batches = _chain(head, it)
    plan = module_plan(names, layers=layers, embed=embed, sites=sites)
    return write(store, as_run(run, {"arch": "nnsight", **run_fields}),
                 Batches("the nnsight outputs", batches, n_sequences), plan, labels=labels,
                 tokens=tokens, mask=mask, dtype=dtype, block_size=block_size, fmt="nnsight")


def _chain(head: Any, rest: Iterable[Any]) -> Iterable[Any]:
    yield head
    yield from rest


@register_format("nnsight", "safetensors files of nnsight trace outputs (module path -> tensor) per batch")
def read_nnsight(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
                 options: ImportOptions) -> ImportResult:
    """The ``nnsight`` format: the module outputs ``layers`` names (or that the names suggest)
    make the layers; the run's ``arch`` defaults to the format's name."""
    names = SafetensorsSource(safetensors_files(source), str(source)).names
    given = ImportOptions(**options)
    given.setdefault("arch", "nnsight")
    given["plan"] = module_plan(names, layers=options.get("layers"), sites=options.get("sites"))
    return import_safetensors(store, run, source, fmt="nnsight", **given)
