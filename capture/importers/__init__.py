"""Activations captured by other tools, into a layerstate store (and out of one).

Each importer writes through the public :class:`store.Store` API (``add_run``,
``length_writer``), streaming (bounded memory) and resumable like a capture, and checks
shapes first: a hook missing from some batch or file, widths or sequence counts that
disagree, each is one line naming the hook and the batch. Libraries are imported only when
used; a missing one is one line naming the extra to install (``pip install
'layerstate[interop]'``).

=====================  ===================================================  ===========================
format                 source                                               Python
=====================  ===================================================  ===========================
``transformer-lens``   ``ActivationCache`` (``run_with_cache``), or          :func:`import_transformer_lens`
                       safetensors file(s) of one saved per batch
``nnsight``            trace outputs, module path -> tensor (see             :func:`import_nnsight`,
                       :func:`nnsight_outputs`), or safetensors file(s)      :func:`nnsight_outputs`
``saelens``            a ``datasets`` directory, one column per hook          :func:`import_hf_datasets`
                       and ``token_ids`` (SAELens' cached activations)
``safetensors``        ``(sequence, position, d)`` arrays per layer          :func:`import_safetensors`
``npy``                a directory of ``<layer>.npy`` arrays                 :func:`import_npy`
=====================  ===================================================  ===========================

Labels and tokens: arrays (name -> ``(sequence, position)`` ints) or a CSV/Parquet table
keyed by ``(sequence, position)`` (:func:`read_labels`). Out: :func:`export_hf_datasets`.
"""

from __future__ import annotations

import os
from typing import Any

from capture.importers.common import transformer_lens_plan
from capture.importers.files import SafetensorsSource, safetensors_files
from store import InvalidArrayError, Store

from .common import ImportResult, RunInfo, format_import, module_plan
from .files import import_npy, import_safetensors
from .hf import export_hf_datasets, import_hf_datasets
from .labels import read_labels
from .nnsight import import_nnsight, nnsight_outputs
from .transformer_lens import import_transformer_lens

FORMATS = ("transformer-lens", "nnsight", "saelens", "safetensors", "npy")

__all__ = [
    "FORMATS",
    "ImportResult",
    "RunInfo",
    "export_hf_datasets",
    "format_import",
    "import_hf_datasets",
    "import_npy",
    "import_nnsight",
    "import_safetensors",
    "import_source",
    "import_transformer_lens",
    "nnsight_outputs",
    "read_labels",
]


def import_source(fmt: str, source: str | os.PathLike[str], store: Store | str, run: RunInfo | str, *,
                  layers: list[str] | None = None, sites: list[str] | None = None,
                  labels: Any = None, dtype: str = "float16", allow_nonfinite: bool = False,
                  **run_fields: Any) -> ImportResult:
    """``layerstate import FORMAT SOURCE STORE``: files of any format above into ``store``.

    ``transformer-lens`` and ``nnsight`` read safetensors files holding a cache (hook name ->
    tensor) or trace outputs (module path -> tensor) per batch.
    """
    kw: dict[str, Any] = {"labels": labels, "dtype": dtype, "allow_nonfinite": allow_nonfinite,
                          **run_fields}
    if fmt == "transformer-lens":
        names = SafetensorsSource(safetensors_files(source), str(source)).names
        plan = transformer_lens_plan(names, sites)
        if plan is None:
            raise InvalidArrayError(f"{source} holds no TransformerLens residual-stream hook "
                                    "(hook_embed, blocks.<i>.hook_resid_post)")
        return import_safetensors(store, run, source, plan=plan, fmt=fmt,
                                  **{"arch": "transformer-lens", **kw})
    if fmt == "nnsight":
        names = SafetensorsSource(safetensors_files(source), str(source)).names
        return import_safetensors(store, run, source, plan=module_plan(names, layers=layers, sites=sites),
                                  fmt=fmt, **{"arch": "nnsight", **kw})
    if fmt == "saelens":
        return import_hf_datasets(store, run, source, layers=layers, sites=sites, **kw)
    if fmt == "safetensors":
        return import_safetensors(store, run, source, layers=layers, sites=sites, **kw)
    if fmt == "npy":
        return import_npy(store, run, source, layers=layers, sites=sites, **kw)
    raise InvalidArrayError(f"unknown import format {fmt!r}; formats: {', '.join(FORMATS)}")
