"""Causal interventions from stored activations: ablation, erasure, patching.

Models are rebuilt from a run's stored weights and resumed from a stored layer
(`SequenceModel.forward_from`), so an intervention at layer l costs only the layers above l.

- :mod:`.engine`: what every analysis runs on: one plan type (`InterventionPlan`), delayed
  cells (`DelayedCell`) and the one assembler of their Dataset (`assemble`), computing and
  storing (`run_and_store`).
- :mod:`._common`: rebuilding a run's model, reading a stored layer, resuming from it.
- :mod:`.erasure`: directions and erasers (probe, INLP, LEACE, PCA/SVD, random, and the
  variance-matched random control), one low-rank affine form ``x - ((x - offset) @ left) @
  right``, and the matched control's subspace; :mod:`.removal`: what an eraser removed
  (variance share, mean shift, rank) and what the states offer (rank, distinct values).
- :mod:`.ablation`: erase at a layer, resume, count correct predictions per sequence; refit a
  probe on the erased states (residual decodability); OOD lengths; the diagnostics and flags
  of each erasure beside its drop; :mod:`.matched`: the matched controls and
  `matched_comparison` (drop minus the matched control's, paired by seed); :mod:`.refit`: the
  refitted probe; :mod:`.probe_fit`: every probe an intervention fits, with C chosen as
  `analysis.probes.probe` chooses it.
- :mod:`.patching`: activation patching (layer x position grids, denoising and noising, logit
  difference and probability, optionally a subspace beside the whole component);
  :mod:`.twins`: the grids over counterfactual twins that patching and interchange both
  run; :mod:`.interchange` patches named positions
  (interchange interventions); :mod:`.noise` makes noised twins (refused unless asked);
  :mod:`.patch_kernels` computes one patched cell, :mod:`.mechanism` reads mechanism labels
  from interchange results.

What each diagnostic answers, and which paper raised it: docs/interventions.md.

Builders (`ablation`, `patching`, `interchange`) return lazy dask-backed Datasets;
`analysis.compute.compute` evaluates them (one BLAS/torch thread per task, on local threads
or a ``dask.distributed`` cluster); ``run_*`` compute and store under
``results/ablation|patching|interchange/<name>``.
"""

from __future__ import annotations

from analysis.interventions._common import rebuild, site_description
from analysis.interventions.ablation import (
    MAX_VARIANCE_REMOVED,
    ablation,
    run_ablation,
)
from analysis.interventions.directions import (
    METHODS,
    Setting,
    fit_directions,
    load_probe_directions,
    parse_settings,
)
from analysis.interventions.engine import (
    DelayedCell,
    InterventionPlan,
    Var,
    assemble,
    run_and_store,
)
from analysis.interventions.erasure import (
    erase,
    inlp,
    leace,
    pca_directions,
    probe_directions,
    projection_eraser,
    random_directions,
)
from analysis.interventions.interchange import interchange, run_interchange
from analysis.interventions.matched import matched_comparison
from analysis.interventions.mechanism import classify_mechanism, nontrivial_restoration
from analysis.interventions.noise import NOISE_REFUSED, noised_twin
from analysis.interventions.patch_kernels import (
    answer_probability,
    logit_metric,
    patch_effects,
    patched_logits,
    patched_logits_reference,
)
from analysis.interventions.patching import patching, run_patching
from analysis.interventions.twins import DISAGREE, MIN_GAP

__all__ = [
    "DISAGREE",
    "MAX_VARIANCE_REMOVED",
    "METHODS",
    "MIN_GAP",
    "NOISE_REFUSED",
    "DelayedCell",
    "InterventionPlan",
    "Setting",
    "Var",
    "ablation",
    "answer_probability",
    "assemble",
    "classify_mechanism",
    "erase",
    "fit_directions",
    "inlp",
    "interchange",
    "leace",
    "load_probe_directions",
    "logit_metric",
    "matched_comparison",
    "noised_twin",
    "nontrivial_restoration",
    "parse_settings",
    "patch_effects",
    "patched_logits",
    "patched_logits_reference",
    "patching",
    "pca_directions",
    "probe_directions",
    "projection_eraser",
    "random_directions",
    "rebuild",
    "run_ablation",
    "run_and_store",
    "run_interchange",
    "run_patching",
    "site_description",
]
