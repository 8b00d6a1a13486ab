"""What every importer shares, gathered in one place (the names importers and users import).

* :mod:`.plans`: the run an import writes (:class:`RunInfo`) and which of a source's names
  make which stored variable (:class:`ImportPlan`, built from TransformerLens hooks, module paths or
  plain names);
* :mod:`.checks`: the checks on what a source hands over (shapes, labels, the library
  installed) before anything is written;
* :mod:`.writer`: the resumable, streaming write into a store (:func:`write`).
"""

from __future__ import annotations

from .checks import (
    EXTRA,
    Arrays,
    Batches,
    Labels,
    Ranged,
    activation_dims,
    check_labels,
    check_shapes,
    label_arrays,
    require,
)
from .plans import (
    LOGIT_NAMES,
    TOKEN_NAMES,
    ImportPlan,
    RunInfo,
    as_run,
    module_plan,
    named_plan,
    natural,
    select,
    site_var,
    some_names,
    transformer_lens_plan,
)
from .writer import ImportResult, first_tensor, format_import, shapes_of, write

__all__ = [
    "EXTRA",
    "LOGIT_NAMES",
    "TOKEN_NAMES",
    "Arrays",
    "Batches",
    "ImportResult",
    "Labels",
    "ImportPlan",
    "Ranged",
    "RunInfo",
    "activation_dims",
    "as_run",
    "check_labels",
    "check_shapes",
    "first_tensor",
    "format_import",
    "label_arrays",
    "module_plan",
    "named_plan",
    "natural",
    "require",
    "select",
    "shapes_of",
    "site_var",
    "some_names",
    "transformer_lens_plan",
    "write",
]
