"""Linear probes over every layer, position and length of a store, with honest evaluation.

For every selected (run, length, layer, position) cell -- or position pool -- an L2-regularised
logistic-regression probe (binary or multinomial, scikit-learn's model) is fitted on standardised
hidden states (float16 cast to float32 first) and scored on held-out sequences::

    from analysis.probes import probe
    ds = probe("acts.zarr", target="state", positions="all")      # an xarray.Dataset
    ds.accuracy.mean(["fold", "position"]).sel(run="lstm-s3-s0")  # readability across layers

What is measured, per cell and fold (dims ``run, length, layer, position, fold``):
``accuracy``, ``balanced_accuracy``, ``log_loss``, the training fold's majority-class
``baseline`` (and ``baseline_log_loss``), the same probe on a control labelling
(``control_accuracy``) and ``selectivity = accuracy - control_accuracy`` (Hewitt & Liang).
Folds split *sequences*, never positions of one sequence across sides. Per run: ``profile``
(mean accuracy per layer) and ``best_layer``. The probe fitted on all sequences is kept as
``weights``/``intercept`` in raw feature space (for ablations), with its scaler. ``correct`` and
``labelled`` count, per sequence, the held-out hits and labelled positions: the per-sequence sums
that :mod:`analysis.stats` resamples.

Regularisation is chosen, not fixed: by default each cell's C comes from a small grid by inner
cross-validation grouped by sequence and nested inside the scoring folds (the control task too),
and only converged fits are eligible; the chosen C is part of the result (``C``, ``fold_C``).
Hewitt & Liang (2019) show why it matters: a probe's capacity changes what "readable" means.

Three solvers, one signature, so that the fast path is tested against its reference:
``method="exact"`` (lockstep preconditioned L-BFGS along the C path, the default),
``"reference"`` (scikit-learn, one fit at a time) and ``"screen"`` (closed-form shrinkage LDA,
no C).
The sweep is a dask graph over the store's chunks, one layer and a block of positions at a time;
:func:`analysis.compute.compute` runs it (local threads, a local cluster, a ``dask.distributed``
cluster or scheduler address; one BLAS thread per task).

Modules: :mod:`.probing` (`plan_probes`, `probe`); :mod:`.results` (a result's name, where it
is stored and found again, `save_probes`); :mod:`.plan` (what a sweep will do, checked before
any fit); :mod:`.sweep` (the dask graph); :mod:`.cells` (one cell: C chosen, fitted, scored);
:mod:`.solvers`, :mod:`.screen`, :mod:`.lbfgs`, :mod:`.params` (the solvers);
:mod:`.assemble` (the Dataset); :mod:`.intervals` (the seed-level intervals stored with it);
:mod:`.progress` (how many cells a sweep fits, and a hook that reports them as they finish);
:mod:`.mdl` and :mod:`.mdl_sweep` (MDL probes: the online codelength of a label, ``mdl_probe``);
:mod:`.stability` (how alike the seeds' probe subspaces are per layer, ``probe_stability``).
"""

from __future__ import annotations

from .cells import C_GRID, classification_metrics, fit_cell, fit_cells, score_cell
from .mdl_sweep import mdl_probe, plan_mdl, save_mdl
from .probing import plan_probes, probe
from .results import (
    find_result,
    result_name,
    runs_by_task,
    save_probes,
    setting_differences,
    storage_name,
)
from .solvers import (
    Params,
    fit_exact,
    fit_reference,
    fit_screen,
    logits,
    path_exact,
    path_reference,
)
from .stability import plan_stability, probe_stability, save_stability
from .sweep import ProbePlan

__all__ = [
    "C_GRID",
    "Params",
    "ProbePlan",
    "classification_metrics",
    "fit_cell",
    "fit_cells",
    "find_result",
    "fit_exact",
    "fit_reference",
    "fit_screen",
    "logits",
    "mdl_probe",
    "path_exact",
    "path_reference",
    "plan_mdl",
    "plan_probes",
    "plan_stability",
    "probe",
    "probe_stability",
    "result_name",
    "runs_by_task",
    "save_mdl",
    "save_probes",
    "save_stability",
    "setting_differences",
    "storage_name",
    "score_cell",
]
