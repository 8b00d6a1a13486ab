"""TransformerLens: an ``ActivationCache`` (what ``run_with_cache`` returns) into a store.

The residual stream becomes ``hidden``: ``embed`` is ``hook_embed`` (+ ``hook_pos_embed``
where the model has one; rotary models do not) and ``L<i>`` is ``blocks.<i>.hook_resid_post``
(:func:`~capture.importers.common.transformer_lens_plan`). Other hooks are stored as named
sites when asked (``sites=["blocks.*.hook_mlp_out"]`` -> ``L0.hook_mlp_out``, …); their
position axis must be the second (attention patterns are ``(batch, head, query, key)`` and
are refused). Tokens come from ``tokens=`` or from the cache's ``embed.hook_in``
(TransformerLens 4's bridge records them there).

A cache is one batch; pass a list of caches (or a generator, with ``n_sequences``) for more.
Works on a plain mapping of hook name -> tensor too, e.g. a cache saved with
``safetensors.torch.save_file(dict(cache.items()), path)`` and read back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from store import InvalidArrayError, MissingError, Store

from .common import (
    Batches,
    ImportOptions,
    ImportResult,
    RunInfo,
    as_run,
    transformer_lens_plan,
    write,
)
from .files import SafetensorsSource, import_safetensors, safetensors_files
from .registry import register_format


def import_transformer_lens(
    store: Store | str,
    run: RunInfo | str,
    caches: Mapping[str, Any] | Iterable[Mapping[str, Any]],
    *,
    labels: Any = None,
    tokens: Any = None,
    mask: Any = None,
    logits: Any = None,
    sites: Sequence[str] | None = None,
    n_sequences: int | None = None,
    dtype: str = "float16",
    block_size: int | None = None,
    **run_fields: Any,
) -> ImportResult:
    """Write TransformerLens caches (one per batch, in order) as one run and length.

    ``run`` is a run id (``task=``, ``arch=``, ``seed=``, … as keywords) or a
    :class:`~capture.importers.common.RunInfo`. ``labels``: name -> ``(sequence, position)``
    ints for all sequences, or a CSV/Parquet table path. ``logits``: the logits
    ``run_with_cache`` returned (one array for all sequences, or one per cache).
    """
    batches: Any = [caches] if _is_cache(caches) else caches
    if logits is not None:
        batches = _with("logits", batches, logits)
    seq = batches if isinstance(batches, Sequence) else None
    names = list(_keys(seq[0] if seq else None)) if seq else None
    if names is None:  # a generator: plan from the first batch
        it = iter(batches)
        head = next(it, None)
        if head is None:
            raise MissingError("no TransformerLens caches given")
        names = list(_keys(head))
        batches = _chain(head, it)
    plan = transformer_lens_plan(names, sites)
    if plan is None:
        raise MissingError("the cache holds no residual-stream hook (hook_embed, blocks.<i>.hook_resid_post); "
                           f"its hooks: {', '.join(names[:10])}{', …' if len(names) > 10 else ''}")
    return write(store, as_run(run, {"arch": "transformer-lens", **run_fields}),
                 Batches("the TransformerLens caches", batches, n_sequences), plan, labels=labels,
                 tokens=tokens, mask=mask, dtype=dtype, block_size=block_size, fmt="transformer-lens")


def _is_cache(obj: Any) -> bool:
    return isinstance(obj, Mapping) or (hasattr(obj, "keys") and hasattr(obj, "__getitem__")
                                        and not isinstance(obj, Sequence))


def _keys(cache: Any) -> Iterable[str]:
    return [str(k) for k in cache.keys()]


def _chain(head: Any, rest: Iterable[Any]) -> Iterable[Any]:
    yield head
    yield from rest


class _Plus(Mapping[str, Any]):
    """A cache with one more entry (the logits of its batch)."""

    def __init__(self, cache: Any, key: str, value: Any) -> None:
        self.cache, self.key, self.value = cache, key, value

    def __getitem__(self, k: str) -> Any:
        return self.value if k == self.key else self.cache[k]

    def __iter__(self):
        yield from self.cache.keys()
        yield self.key

    def __len__(self) -> int:
        return len(list(self.cache.keys())) + 1


def _with(key: str, batches: Iterable[Any], values: Any) -> Any:
    """Attach per-batch ``values`` (a list, one per batch; or one array split by batch sizes)."""
    if isinstance(values, list | tuple):
        return [_Plus(c, key, v) for c, v in zip(batches, values, strict=True)]
    seq = list(batches)
    out, start = [], 0
    for c in seq:
        m = int(next(iter(c[k] for k in c.keys() if hasattr(c[k], "shape") and len(c[k].shape) >= 3)).shape[0])
        out.append(_Plus(c, key, values[start:start + m]))
        start += m
    return out


@register_format("transformer-lens", "safetensors files of a TransformerLens cache (hook name -> tensor) per batch")
def read_transformer_lens(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
                          options: ImportOptions) -> ImportResult:
    """The ``transformer-lens`` format: the residual-stream hooks make the layers (other hooks
    given by ``sites`` are stored as sites); the run's ``arch`` defaults to the format's name."""
    names = SafetensorsSource(safetensors_files(source), str(source)).names
    plan = transformer_lens_plan(names, options.get("sites"))
    if plan is None:
        raise InvalidArrayError(f"{source} holds no TransformerLens residual-stream hook "
                                "(hook_embed, blocks.<i>.hook_resid_post)")
    given = ImportOptions(**options)
    given.setdefault("arch", "transformer-lens")
    given["plan"] = plan
    return import_safetensors(store, run, source, fmt="transformer-lens", **given)
