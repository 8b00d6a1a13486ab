"""The ablation's refitted probe: the probe solver's batch against a scikit-learn loop per fold.

Prints one JSON line. After an erasure, `analysis.interventions.ablation` refits a probe on the
edited states of every (run, length, layer, setting), five folds of sequences each, to measure
what is still decodable. For each architecture (default configs: 4 layers, d_model 128, random
weights) 256 sequences of 40 tokens are run and every layer's states are probed for the current
token's class (token mod 6: separable at the embedding, the case where an L-BFGS at its
iteration cap stops short, and blurred by the random blocks above it), two ways, interleaved
so that load falls on both alike:

- ``solver``: :func:`analysis.interventions.refit.refit_correct` -- the five folds as one
  batch of the preconditioned lockstep L-BFGS, with C chosen from the probe's grid by nested
  cross-validation over sequences (what the ablation runs; ``C_solver`` per cell);
- ``sklearn_loop``: what it replaced (:func:`~analysis.interventions.ablation.refit_reference`),
  per fold ``StandardScaler`` + ``LogisticRegression(C=1, max_iter=500)``, the same seeded row
  subsets.

CPU time per layer (one BLAS thread), the ratio, the largest gap in refitted accuracy, and how
many fits each left unconverged (scikit-learn's ``ConvergenceWarning`` count; the solver's
``RuntimeWarning``). Run: ``OMP_NUM_THREADS=1 python -m bench.refit`` (a minute or two).
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from analysis.interventions.refit import refit_correct, refit_reference
from capture.models import ModelConfig, build_model

N_SEQ, LENGTH, VOCAB, CLASSES, FOLDS, MAX_ROWS = 256, 40, 16, 6, 5, 10_000
ARCHS = ("transformer", "lstm", "mamba2")


def _timed(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.process_time()
        out = fn(*args)
        cpu = time.process_time() - t0
    return out, cpu, sum("converge" in str(w.message) or "stopped before" in str(w.message) for w in caught)


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows, totals = [], {"solver": 0.0, "sklearn_loop": 0.0}
    with threadpool_limits(1):
        for arch in ARCHS:
            model = build_model(ModelConfig(arch=arch), VOCAB, CLASSES, seed=0)
            tokens = torch.from_numpy(rng.integers(0, VOCAB, (N_SEQ, LENGTH)))
            with torch.no_grad():
                _, hidden = model.forward_with_hidden(tokens)
            labels = tokens.numpy() % CLASSES
            mask = np.ones(labels.shape, dtype=bool)
            for i in range(hidden.shape[2]):
                x = hidden[:, :, i].numpy().astype(np.float16).astype(np.float32)  # as stored
                (ours, C), t_ours, w_ours = _timed(refit_correct, x, labels, mask, FOLDS, MAX_ROWS, [i])
                ref, t_ref, w_ref = _timed(refit_reference, x, labels, mask, FOLDS, MAX_ROWS, [i])
                totals["solver"] += t_ours
                totals["sklearn_loop"] += t_ref
                rows.append({"arch": arch, "layer": i, "solver_s": round(t_ours, 3), "sklearn_s": round(t_ref, 3),
                             "C_solver": C, "acc_solver": round(ours.sum() / mask.sum(), 4),
                             "acc_sklearn": round(ref.sum() / mask.sum(), 4),
                             "unconverged_solver": w_ours, "unconverged_sklearn": w_ref})
    gaps = [abs(r["acc_solver"] - r["acc_sklearn"]) for r in rows]
    print(json.dumps({
        "bench": "refit", "sequences": N_SEQ, "length": LENGTH, "folds": FOLDS,
        "cpu_s": {k: round(v, 2) for k, v in totals.items()},
        "speedup_cpu": round(totals["sklearn_loop"] / totals["solver"], 2),
        "max_accuracy_gap_pp": round(100 * max(gaps), 2),
        "unconverged": {"solver": sum(r["unconverged_solver"] for r in rows),
                        "sklearn_loop": sum(r["unconverged_sklearn"] for r in rows)},
        "cells": rows,
    }))


if __name__ == "__main__":
    main()
