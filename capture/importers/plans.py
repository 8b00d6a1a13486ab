"""Which run an import writes, and which of a source's names make which stored variable.

A :class:`ImportPlan` says which names make ``hidden`` (in layer order; several names are summed,
e.g. TransformerLens' ``hook_embed`` + ``hook_pos_embed``), which are extra sites, which are
tokens and logits. The plans are built from a tool's own naming: TransformerLens hook names
(:func:`transformer_lens_plan`), module paths (:func:`module_plan`, nnsight), or plain array
names in layer order (:func:`named_plan`, files).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from store import InvalidArrayError, MissingError
from store.schema import layer_names


# ---------------------------------------------------------------------- the run
@dataclass
class RunInfo:
    """The run the imported activations belong to (its identity, docs/store-format.md S9)."""

    run_id: str
    task: str = "imported"
    arch: str = "unknown"
    seed: int = 0
    variant: str = "default"
    model_config: Mapping[str, Any] | None = None
    task_config: Mapping[str, Any] | None = None


def as_run(run: RunInfo | str, fields: Mapping[str, Any]) -> RunInfo:
    """``run`` itself, or a run id made a :class:`RunInfo` with ``fields``."""
    return run if isinstance(run, RunInfo) else RunInfo(run, **fields)


# ---------------------------------------------------------------------- naming
@dataclass
class ImportPlan:
    """Which source names make which stored variable."""

    layers: list[tuple[str, tuple[str, ...]]]         # layer name -> source names summed
    sites: list[tuple[str, str]] = field(default_factory=list)  # site name -> source name
    tokens: str | None = None
    logits: str | None = None

    def activation_names(self) -> list[str]:
        names = [n for _lay, src in self.layers for n in src] + [s for _n, s in self.sites]
        return list(dict.fromkeys(names))

    def names(self) -> list[str]:
        extra = [n for n in (self.tokens, self.logits) if n is not None]
        return self.activation_names() + extra


def site_var(site: str) -> str:
    """Store variable of a site (the convention of ``capture.record``): ``L1.cell`` -> ``site_L1_cell``."""
    return "site_" + re.sub(r"[^A-Za-z0-9]+", "_", site).strip("_")


def natural(name: str) -> tuple[Any, ...]:
    """Sort key that puts ``L2`` before ``L10``."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name) if t)


TOKEN_NAMES = ("tokens", "token_ids", "input_ids", "embed.hook_in", "hook_tokens")
LOGIT_NAMES = ("logits",)

_TL_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def select(names: Iterable[str], patterns: Sequence[str] | None, what: str) -> list[str]:
    """The names matching any of ``patterns`` (globs), in order; a pattern matching nothing
    is an error naming what there is."""
    names = list(names)
    if not patterns:
        return []
    out: list[str] = []
    for pat in patterns:
        hit = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            raise MissingError(f"{what}: no hook/array matches {pat!r}; there are: {some_names(names)}")
        out += [n for n in hit if n not in out]
    return out


def transformer_lens_plan(names: Sequence[str], sites: Sequence[str] | None = None) -> ImportPlan | None:
    """The residual stream of a TransformerLens cache: ``embed`` = ``hook_embed`` (+
    ``hook_pos_embed``) or ``blocks.0.hook_resid_pre``; ``L<i>`` = ``blocks.<i>.hook_resid_post``
    (or ``blocks.<i+1>.hook_resid_pre``). None if ``names`` hold no residual-stream hook.
    ``sites`` (globs) pick other hooks, stored as sites ``L<i>.<hook>`` (``blocks.<i>.`` renamed)."""
    have = set(names)
    post = {int(m[1]) for n in names if (m := _TL_BLOCK.match(n)) and m[2] == "hook_resid_post"}
    pre = {int(m[1]) for n in names if (m := _TL_BLOCK.match(n)) and m[2] == "hook_resid_pre"}
    if not post and not pre and "hook_embed" not in have:
        return None
    layers: list[tuple[str, tuple[str, ...]]] = []
    if "hook_embed" in have:
        layers.append(("embed", ("hook_embed",) + (("hook_pos_embed",) if "hook_pos_embed" in have else ())))
    elif 0 in pre:
        layers.append(("embed", ("blocks.0.hook_resid_pre",)))
    top = max(post | {i - 1 for i in pre}, default=-1)
    for i in range(top + 1):
        if i in post:
            layers.append((f"L{i}", (f"blocks.{i}.hook_resid_post",)))
        elif i + 1 in pre:
            layers.append((f"L{i}", (f"blocks.{i + 1}.hook_resid_pre",)))
        else:
            raise MissingError(f"hook 'blocks.{i}.hook_resid_post' is missing: the residual stream "
                               f"has blocks {sorted(post)} (resid_post) and {sorted(pre)} (resid_pre)")
    used = {n for _lay, src in layers for n in src}
    chosen = select([n for n in names if n not in used], sites, "sites")
    return ImportPlan(layers, [(_tl_site(n), n) for n in chosen], _first(names, TOKEN_NAMES),
                _first(names, LOGIT_NAMES))


def _tl_site(name: str) -> str:
    m = _TL_BLOCK.match(name)
    return f"L{m[1]}.{m[2]}" if m else name


_MODULE_BLOCK = re.compile(r"^(?P<stack>(?:.*\.)?(?:h|layers|blocks|layer|block))\.(?P<i>\d+)$")
_EMBED_ENDS = ("embed", "wte", "embed_tokens", "embed_in", "embeddings", "embedding",
               "word_embeddings", "drop", "emb")


def module_plan(names: Sequence[str], *, layers: Sequence[str] | Mapping[str, str] | None = None,
                embed: str | None = None, sites: Sequence[str] | None = None) -> ImportPlan:
    """Layers from module paths (nnsight): ``layers`` given (a list, the first being the
    embedding's output, or a mapping layer name -> path), or found: ``….h.<i>`` /
    ``….layers.<i>`` / ``….blocks.<i>`` are blocks ``L<i>``, and ``embed`` (or the one path
    ending in ``wte``, ``embed_tokens``, ``embeddings``, ``drop``, …) is ``embed``. The other
    paths are sites (all of them unless ``sites`` picks some), named with ``L<i>.`` for a
    block's children."""
    names = list(names)
    tokens, logits = _first(names, TOKEN_NAMES), _first(names, LOGIT_NAMES)
    if layers is not None:
        mapping = (dict(layers) if isinstance(layers, Mapping)
                   else dict(zip(layer_names(len(layers) - 1), layers, strict=True)))
        for path in mapping.values():
            if path not in names:
                raise MissingError(f"layer {path!r} is not among the saved outputs: {some_names(names)}")
        plan_layers: list[tuple[str, tuple[str, ...]]] = [(lay, (path,)) for lay, path in mapping.items()]
    else:
        blocks: dict[int, str] = {}
        stacks = set()
        for n in names:
            m = _MODULE_BLOCK.match(n)
            if m:
                blocks[int(m["i"])] = n
                stacks.add(m["stack"])
        if len(stacks) > 1:
            raise InvalidArrayError(f"outputs of several block stacks {sorted(stacks)}: give layers=[...]")
        if not blocks:
            raise MissingError(f"no block outputs (….h.<i>, ….layers.<i>) among {some_names(names)}: "
                               "give layers=[embedding path, block 0 path, …]")
        missing = [i for i in range(max(blocks) + 1) if i not in blocks]
        if missing:
            stack = next(iter(stacks))
            raise MissingError(f"block output {stack}.{missing[0]} is missing (saved blocks {sorted(blocks)})")
        if embed is None:
            cands = [n for n in names if n not in blocks.values() and n.split(".")[-1] in _EMBED_ENDS]
            embed = cands[0] if len(cands) == 1 else None
        elif embed not in names:
            raise MissingError(f"embed {embed!r} is not among the saved outputs: {some_names(names)}")
        plan_layers = ([("embed", (embed,))] if embed else []) + [  # type: ignore[assignment]
            (f"L{i}", (blocks[i],)) for i in sorted(blocks)]
    used = {n for _lay, src in plan_layers for n in src} | {tokens, logits}
    rest = [n for n in names if n not in used]
    chosen = rest if sites is None else select(rest, sites, "sites")
    prefix = {src[0]: lay for lay, src in plan_layers}
    return ImportPlan(plan_layers, [(_module_site(n, prefix), n) for n in chosen], tokens, logits)


def _module_site(name: str, prefix: Mapping[str, str]) -> str:
    for path, lay in sorted(prefix.items(), key=lambda kv: -len(kv[0])):
        if name.startswith(path + "."):
            return f"{lay}.{name[len(path) + 1:]}"
    return name


def named_plan(names: Sequence[str], *, layers: Sequence[str] | None = None,
               sites: Sequence[str] | None = None) -> ImportPlan:
    """Layers from array names in files (safetensors, ``.npy``, a ``datasets`` directory):
    ``layers`` given (in that order, stored under their own names), or TransformerLens hook
    names (:func:`transformer_lens_plan`), or every activation name — ``embed``, ``L0``, … in
    schema order, others in natural order — but those ``sites`` (globs) picks as sites."""
    names = list(names)
    tokens, logits = _first(names, TOKEN_NAMES), _first(names, LOGIT_NAMES)
    if layers:
        chosen = select([n for n in names if n not in (tokens, logits)], layers, "layers")
        rest = [n for n in names if n not in chosen and n not in (tokens, logits)]
        return ImportPlan([(n, (n,)) for n in chosen], [(n, n) for n in select(rest, sites, "sites")],
                    tokens, logits)
    tl = transformer_lens_plan(names, sites)
    if tl is not None:
        return tl
    acts = [n for n in names if n not in (tokens, logits)]
    chosen = select(acts, sites, "sites")  # a pattern that matches nothing is an error
    acts = [n for n in acts if n not in chosen]
    if not acts:
        raise MissingError(f"no activation arrays among {some_names(names)}"
                           + (" besides the sites" if chosen else ""))
    acts.sort(key=lambda n: (n != "embed", natural(n)))
    return ImportPlan([(n, (n,)) for n in acts], [(n, n) for n in chosen], tokens, logits)


def with_logits(plan: ImportPlan, names: Sequence[str], logits: str | None) -> ImportPlan:
    """``plan`` with the array ``logits`` (a name in the source, e.g. ``lm_logits``) as its
    logits, taken out of the layers and sites it would otherwise have made; ``plan`` itself
    when ``logits`` is None (an array named ``logits`` is found by every plan)."""
    if logits is None or logits == plan.logits:
        return plan
    if logits not in names:
        raise MissingError(f"logits {logits!r}: no array of that name; there are: {some_names(names)}")
    layers = [(lay, src) for lay, src in plan.layers if logits not in src]
    if not layers:
        raise MissingError(f"logits {logits!r} is the only activation array; nothing is left for the layers")
    return ImportPlan(layers, [(s, n) for s, n in plan.sites if n != logits], plan.tokens, logits)


def _first(names: Sequence[str], wanted: Sequence[str]) -> str | None:
    return next((w for w in wanted if w in names), None)


def some_names(names: Sequence[str], k: int = 12) -> str:
    names = list(names)
    more = f", … ({len(names)} in all)" if len(names) > k else ""
    return ", ".join(names[:k]) + more if names else "(none)"

