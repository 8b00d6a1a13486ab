"""Causal interventions from stored activations: ablation, erasure, patching.

Models are rebuilt from a run's stored weights and resumed from a stored layer
(`SequenceModel.forward_from`), so an intervention at layer l costs only the layers above l.

- :mod:`.erasure`: directions and erasers (probe, INLP, LEACE, PCA/SVD, random), one low-rank
  affine form ``x - ((x - offset) @ left) @ right``.
- :mod:`.ablation`: erase at a layer, resume, count correct predictions per sequence; refit a
  probe on the erased states (residual decodability); OOD lengths.
- :mod:`.patching`: activation patching (layer x position grids of logit-gap recovery) and
  interchange interventions at named positions, with mechanism labels.

Builders (`ablation`, `patching`, `interchange`) return lazy dask-backed Datasets;
`compute` evaluates them with one BLAS/torch thread per task; ``run_*`` compute and store
under ``results/ablation|patching|interchange/<name>``.
"""

from analysis.interventions._common import compute, rebuild, site_description
from analysis.interventions.ablation import (
    METHODS,
    Setting,
    ablation,
    fit_directions,
    load_probe_directions,
    parse_settings,
    run_ablation,
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
from analysis.interventions.patching import (
    answer_probability,
    classify_mechanism,
    interchange,
    logit_metric,
    nontrivial_restoration,
    patched_logits,
    patched_logits_reference,
    patching,
    run_interchange,
    run_patching,
)

__all__ = [
    "METHODS",
    "Setting",
    "ablation",
    "answer_probability",
    "classify_mechanism",
    "nontrivial_restoration",
    "compute",
    "erase",
    "fit_directions",
    "inlp",
    "interchange",
    "leace",
    "load_probe_directions",
    "logit_metric",
    "parse_settings",
    "patched_logits",
    "patched_logits_reference",
    "patching",
    "pca_directions",
    "probe_directions",
    "projection_eraser",
    "random_directions",
    "rebuild",
    "run_ablation",
    "run_interchange",
    "run_patching",
    "site_description",
]
