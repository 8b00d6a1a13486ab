"""The store contract, schema version 1 (docs/store-format.md, "Overview").

Names of groups, variables, dims and attributes live here and nowhere else, so the
writer, the reader, ``validate`` and ``inspect`` cannot drift apart.
"""

from __future__ import annotations

import re

import numpy as np

from store.errors import InvalidArgumentError

SCHEMA = "layerstate/1"
SCHEMA_NAME = "layerstate"
SCHEMA_VERSION = 1


def schema_refusal(schema: object) -> str | None:
    """Why a store whose root ``schema`` attribute is ``schema`` cannot be read, with the fix,
    as the end of a sentence that starts with the store's name; None for ``layerstate/1``.

    docs/store-format.md, "Versions": a reader refuses another tool's schema and any version
    other than the one it knows. A newer one asks for an upgrade; version 1 is the first, so
    an older or malformed version of this name was never written by layerstate.
    """
    if schema == SCHEMA:
        return None
    name, _, ver = schema.partition("/") if isinstance(schema, str) else ("", "", "")
    if name == SCHEMA_NAME and ver.isascii() and ver.isdigit() and int(ver) > SCHEMA_VERSION:
        return (f"uses schema {schema!r}, newer than this layerstate understands ({SCHEMA}); "
                "upgrade layerstate (pip install -U layerstate)")
    if name != SCHEMA_NAME:
        return (f"has schema {schema!r}, not a layerstate schema: this layerstate reads {SCHEMA!r} "
                "only; read it with the tool that wrote it, or write the store as "
                "docs/store-format.md ('Conformance') says, with schema = \"layerstate/1\"")
    return (f"has schema {schema!r}, a version of the layerstate schema that does not exist "
            f"(version 1 is the first; this layerstate reads {SCHEMA!r} only): if the store "
            "follows docs/store-format.md, set the root attribute schema to \"layerstate/1\"; "
            "otherwise write it again with `layerstate capture` or Store.create")

RUNS = "runs"
RESULTS = "results"
WEIGHTS = "weights"
#: An unfinished training's state (S46), removed when the run's weights are written.
CHECKPOINT = "checkpoint"
#: Beside the root's zarr.json: a copy of the root's own document and the digest of every
#: node's document at the last consolidation (docs/store-format.md, S34).
METADATA_COPY = "layerstate-metadata.json"

# Dims, in storage order.
DIMS = {
    "hidden": ("sequence", "position", "layer", "feature"),
    "tokens": ("sequence", "position"),
    "mask": ("sequence", "position"),
    "logits": ("sequence", "position", "class"),
}
LABEL_DIMS = ("sequence", "position")
CORE_VARS = ("hidden", "tokens", "mask", "logits")

# Attribute keys the store itself maintains on a length group.
ATTR_COMPLETED = "completed_blocks"
ATTR_COMPLETE = "complete"
ATTR_BLOCK = "block_size"

# What a reader needs (MUST, docs/store-format.md "Conformance"): the root's schema and each
# run's identity. The rest is bookkeeping layerstate's writer adds (MAY): used when present.
ROOT_REQUIRED_ATTRS = ("schema",)
RUN_REQUIRED_ATTRS = ("task", "arch", "variant", "seed")
ROOT_BOOKKEEPING_ATTRS = ("title", "created", "tool_version", "provenance")
RUN_BOOKKEEPING_ATTRS = ("model_config", "task_config", "config_hash")

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_GROUP = re.compile(r"^[a-z][a-z0-9]*_\d{3,}$")


#: Kinds of length group a run may hold: activations (``len_040``) and the clean and corrupted
#: counterfactual twins patching reads (``cfclean_040``, ``cfcorrupt_040``).
LEN = "len"
CFCLEAN = "cfclean"
CFCORRUPT = "cfcorrupt"
GROUP_KINDS = (LEN, CFCLEAN, CFCORRUPT)


def length_group(length: int, kind: str = LEN) -> str:
    """Name of the group holding one sequence length: ``len_040``, ``len_120``, ``cfclean_040``."""
    if not isinstance(length, int | _np_int()) or length < 1:
        raise ValueError(f"sequence length must be a positive integer, got {length!r}")
    if not re.fullmatch(r"[a-z][a-z0-9]*", kind):
        raise ValueError(f"group kind must be lowercase letters/digits like 'len' or 'cf', got {kind!r}")
    return f"{kind}_{int(length):03d}"


def parse_length_group(name: str) -> tuple[str, int] | None:
    """``"len_040"`` -> ``("len", 40)``; anything else -> ``None``."""
    if not _GROUP.fullmatch(name):
        return None
    kind, _, num = name.rpartition("_")
    return kind, int(num)


# ----------------------------------------------------------------------------- result names
#: Results are ``results/<analysis>/<name>``: which analyses exist is said above the store
#: (:mod:`analysis.registry`); the store checks only the form of a name. The verdicts of the
#: claims are ``results/claims``.
CLAIMS = "claims"
#: A group-sequential design's stages and decisions (``layerstate run`` with a ``[design]``).
SEQUENTIAL = "sequential"
_RESULT_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RESULT_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def result_name(kind: str, name: str) -> str:
    """``result_name("ablation", "parity")`` -> ``"ablation/parity"``; a name that already
    starts with ``<kind>/`` is returned as it is."""
    if not _RESULT_KIND.fullmatch(kind):
        raise InvalidArgumentError(f"invalid result kind {kind!r}: an analysis's name is lower-case letters, "
                                   "digits and '_', starting with a letter")
    name = name.removeprefix(f"{kind}/")
    if not _RESULT_PART.fullmatch(name):
        raise InvalidArgumentError(f"invalid result name {name!r}: use letters, digits, '_', '.', '-' "
                                   "(starting with a letter or digit, at most 128 characters)")
    return f"{kind}/{name}"


def parse_result_name(full: str) -> tuple[str, str] | None:
    """``"probes/dyck.depth"`` -> ``("probes", "dyck.depth")``; ``"claims"`` (no analysis) or
    a name not of that form -> ``None``."""
    kind, sep, name = full.partition("/")
    if not sep or not _RESULT_KIND.fullmatch(kind) or not name:
        return None
    return kind, name


def check_run_id(run_id: str) -> str:
    """Run ids become group names: letters, digits, ``_ . -``; at most 128 characters."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"invalid run id {run_id!r}: use letters, digits, '_', '.', '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )
    return run_id


def layer_names(n_layers: int) -> list[str]:
    """The ``layer`` coordinate for a model with ``n_layers`` blocks: embed, L0, …"""
    return ["embed"] + [f"L{i}" for i in range(n_layers)]


def _np_int():
    return np.integer
