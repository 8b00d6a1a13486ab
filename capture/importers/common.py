"""What every importer shares, gathered in one place (the names importers and users import).

* :mod:`.plans`: the run an import writes (:class:`RunInfo`) and which of a source's names
  make which stored variable (:class:`ImportPlan`, built from TransformerLens hooks, module paths or
  plain names);
* :mod:`.checks`: what a source hands over (:class:`Arrays`, :class:`Batches`, :class:`Labels`)
  and the library an importer needs (:func:`require`); the checks themselves run inside
  :func:`write`, which imports them from there;
* :mod:`.writer`: the resumable, streaming write into a store (:func:`write`), and the file
  importers' keywords (:class:`ImportOptions`, :func:`options_plan`, :func:`write_with`).
"""

from __future__ import annotations

from .checks import Arrays, Batches, Labels, require
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
from .writer import (
    ImportOptions,
    ImportResult,
    first_tensor,
    format_import,
    options_plan,
    shapes_of,
    write,
    write_with,
)

__all__ = [
    "LOGIT_NAMES",
    "TOKEN_NAMES",
    "Arrays",
    "Batches",
    "ImportOptions",
    "ImportPlan",
    "ImportResult",
    "Labels",
    "RunInfo",
    "as_run",
    "first_tensor",
    "format_import",
    "module_plan",
    "named_plan",
    "natural",
    "options_plan",
    "require",
    "select",
    "shapes_of",
    "site_var",
    "some_names",
    "transformer_lens_plan",
    "write",
    "write_with",
]
