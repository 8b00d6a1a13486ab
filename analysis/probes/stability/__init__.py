"""Cross-seed stability of what a probe found: at each layer, how alike the probe subspaces of
independently trained seeds are, once their states are put in one coordinate system.

Why an alignment. Two seeds of one architecture are separately trained networks; nothing ties
feature 7 of one to feature 7 of the other (a recurrent or residual layer has no privileged
basis: any rotation of its states, undone by the next layer's weights, is the same network).
Raw probe weight vectors of two seeds are therefore as alike as two random directions whatever
the models learned, and comparing them directly measures nothing. Both runs' states on the
*same* input sequences are needed to find the rotation between them:

* **shared sequences**: rows both runs hold (identical token rows) -- a store whose seeds
  were captured on the same evaluation sequences;
* **re-run** (layerstate's own stores): capture draws each seed's evaluation sequences from
  its own seed, so two seeds share none; run seed b's stored model on seed a's stored tokens
  (and a's on b's), so each has its partner's states on its own sequences.

The map. On one half of the sequences (every labelled position), centred states ``A`` of one
run and ``B`` of the other give the orthogonal Procrustes rotation ``R`` minimising
``||s A R - B||`` (one SVD of the ``d x d`` cross-product; ``s`` a scale). Orthogonal, so a
direction maps as the states do and angles are kept: the overlap of unrelated directions stays
at its null. The other half scores the map: ``alignment_r2`` = the share of ``B``'s centred
variance that ``s A R`` predicts on sequences the map never saw. A low value means there is no
rotation between the seeds' layers, and then the overlap says little either way.

The overlap. A probe's classes' weight rows, centred over classes (a shift common to all
classes changes no softmax), span its subspace: ``k = classes - 1`` directions. Seed a's rows
are mapped by ``R``; with ``Q_a, Q_b`` orthonormal bases the principal angles ``theta_i``
between the subspaces have ``cos theta_i`` the singular values of ``Q_a^T Q_b``, and the
overlap is their mean squared cosine (``||Q_a^T Q_b||_F^2 / min(k_a, k_b)``, in [0, 1]:
1 the same subspace, 0 orthogonal). Null: two random subspaces of dimensions ``k_a, k_b`` in
the layer's width ``d`` have expected overlap ``max(k_a, k_b) / d`` (``k/d``; 1/d for binary
probes). With a re-run, the pair's value is the mean of the two maps (fitted on a's and on
b's sequences). ``raw_overlap``, without the map, is kept as the check that alignment matters.

The shuffled-label null. Where two seeds hold the same sequences, both seeds' probes are fitted
on the same rows and labels; at a layer that does not carry the label each probe fits chance
structure of those rows, which after the map is largely the same in both seeds, so the overlap
reads high there too (and at an embedding whose states take a few values, any probe lies in
their span). So each pair is also measured on labels that mean nothing: the label permuted across
sequences (at each position, among the sequences labelled there), the same permutation for both
seeds, probes refitted at each run's stored C on the rows the map uses, mapped by the same maps
and compared the same way. :data:`SHUFFLES` permutations give a band: per permutation the mean
over the cell's pairs, its central 95% stored (``shuffled_*``). The probed label, where a layer
lacks it, is itself one such labelling, so it is the band's upper end -- not its mean -- that
the overlap's interval must clear: "the seeds agree" reads the lower end above both nulls
(:func:`agreement_frame`).

Over seeds. A cell (task, arch, variant) with ``n`` seeds has ``n(n-1)/2`` pairs; the estimate
is the mean overlap over pairs, a U-statistic whose pairs share seeds, so the pairs are not
independent data. Each seed's summary is its jackknife pseudo-value
``n U - (n-1) U_(-i)`` (``U_(-i)``: the mean over the pairs without seed i), equal to
``U + 2(n-1)/(n-2) (m_i - U)`` with ``m_i`` the seed's mean overlap with the others: their mean
is ``U`` and the t interval over them is the jackknife interval of the pair mean -- about twice
as wide as a t over the ``m_i``, which forgets that every pair counts twice. So the stored
interval and a claim (``metric = "probe_stability"``: the t or the sign test over seeds) both
test over seeds, at least 3 of them; 2 seeds make one pair and no interval.

The sweep reads the full-data probes a probe result stores (``weights``: no refit of the real
label) and refits only the null's probes; a re-run adds two forwards of the models per pair and
length (:attr:`StabilityPlan.cpu_s`). Named
``stability/<probe result's name>`` with the probe result it read::

    from analysis.probes import probe_stability
    ds = probe_stability("acts.zarr", "probes/parity", save=True)
    ds.overlap_profile.sel(length=40)          # per seed pair and layer
"""

from __future__ import annotations

from .api import probe_stability
from .compute import PairPlan, StabilityPlan
from .intervals import (
    add_stability_intervals,
    agreement_frame,
    interval_frame,
    result_name,
    save_stability,
    shuffled_frame,
)
from .maths import (
    INPUTS,
    MAP_SEQUENCES,
    MIN_SHARED,
    NULL_S_PER_UNIT,
    OVERHEAD,
    RERUN_S_PER_TOKEN,
    S_PER_UNIT,
    SHUFFLES,
    Alignment,
    aligned_overlap,
    fit_alignment,
    jackknife_pseudo,
    null_overlap,
    overlap,
    probe_subspace,
    seed_interval,
)
from .plan import plan_stability

__all__ = ["Alignment", "INPUTS", "MAP_SEQUENCES", "MIN_SHARED", "NULL_S_PER_UNIT", "OVERHEAD", "PairPlan", "RERUN_S_PER_TOKEN", "SHUFFLES", "S_PER_UNIT", "StabilityPlan", "add_stability_intervals", "agreement_frame", "aligned_overlap", "fit_alignment", "interval_frame", "jackknife_pseudo", "null_overlap", "overlap", "plan_stability", "probe_stability", "probe_subspace", "result_name", "save_stability", "seed_interval", "shuffled_frame"]
