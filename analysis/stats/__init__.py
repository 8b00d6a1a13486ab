"""Honest statistics for layerstate results: intervals, tests, equivalence, profiles.

Seeds are random effects, sequences are the resampling unit (never positions). Every public
function takes and returns xarray objects with named dims (``seed``, ``sequence``, ``layer``,
``task``, ``arch``, ``variant``, ...) and records its method and level in attrs.

Modules: :mod:`.bootstrap` (hierarchical bootstrap, seed-level t intervals), :mod:`.mixed`
(MixedLM, GEE, Bayesian GLMM), :mod:`.contrasts` (two conditions on per-sequence counts by
paired t, GEE, MixedLM or GLMM; tests and the four outcomes against a margin),
:mod:`.calibrate` (their calibration by simulation), :mod:`.equivalence` (paired t, TOST, power, verdicts),
:mod:`.multiple` (Holm, BH), :mod:`.profiles` (layer-profile statistics and tests),
:mod:`.summary` (ArviZ), :mod:`.simulate` (calibration data), :mod:`.validate` (argument checks).
"""

from analysis.stats.bootstrap import (
    BootstrapResult,
    bootstrap_reference,
    hierarchical_bootstrap,
    seed_estimates,
    sequence_mask,
)
from analysis.stats.contrasts import compare_conditions
from analysis.stats.equivalence import (
    difference_power,
    equivalence_test,
    minimum_detectable_effect,
    paired_difference,
    paired_permutation_test,
    paired_tost,
    tost_power,
)
from analysis.stats.mixed import correctness_model, mixed_effects
from analysis.stats.multiple import adjust_pvalues
from analysis.stats.profiles import profile_difference_test, profile_statistics
from analysis.stats.simulate import population_accuracy, simulate_paired_accuracy
from analysis.stats.summary import draws_to_datatree, eti, interval_table, plot_forest, summarise

__all__ = [
    "BootstrapResult",
    "adjust_pvalues",
    "bootstrap_reference",
    "compare_conditions",
    "correctness_model",
    "difference_power",
    "draws_to_datatree",
    "equivalence_test",
    "eti",
    "hierarchical_bootstrap",
    "interval_table",
    "minimum_detectable_effect",
    "mixed_effects",
    "paired_difference",
    "paired_permutation_test",
    "paired_tost",
    "plot_forest",
    "population_accuracy",
    "profile_difference_test",
    "profile_statistics",
    "seed_estimates",
    "sequence_mask",
    "simulate_paired_accuracy",
    "summarise",
    "tost_power",
]
