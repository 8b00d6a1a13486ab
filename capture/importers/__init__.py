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

from .common import ImportOptions, ImportResult, RunInfo, format_import
from .files import import_npy, import_safetensors
from .hf import export_hf_datasets, import_hf_datasets
from .labels import read_labels
from .nnsight import import_nnsight, nnsight_outputs
from .registry import ImportFormat, formats, import_source, register_format
from .transformer_lens import import_transformer_lens

__all__ = [
    "ImportOptions",
    "ImportResult",
    "RunInfo",
    "export_hf_datasets",
    "format_import",
    "import_hf_datasets",
    "import_npy",
    "import_nnsight",
    "import_safetensors",
    "ImportFormat",
    "formats",
    "import_source",
    "register_format",
    "import_transformer_lens",
    "nnsight_outputs",
    "read_labels",
]
