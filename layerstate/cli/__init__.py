"""The ``layerstate`` command: each subcommand is one library call and one presentation.

One module per group of commands, all registered on one click group, :data:`main`
(:mod:`layerstate.cli.base`, with the options and checks they share): the store
(:mod:`~layerstate.cli.store_commands`), the pipeline (:mod:`~layerstate.cli.pipeline_commands`),
the analyses (:mod:`~layerstate.cli.analysis_commands`), claims and reports
(:mod:`~layerstate.cli.claims_commands`) and other tools' formats
(:mod:`~layerstate.cli.interop_commands`). Importing this package registers them all.
"""

from __future__ import annotations

from layerstate.cli import (  # noqa: F401 -- imported for the commands they register on main
    analysis_commands,
    claims_commands,
    interop_commands,
    pipeline_commands,
    store_commands,
)
from layerstate.cli.analysis_commands import ablate, patch, probe
from layerstate.cli.base import EXIT_BAD_INPUT, EXIT_INTERRUPTED, BadInput, bad_input_types, main

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "BadInput", "bad_input_types", "ablate", "main", "patch", "probe"]
