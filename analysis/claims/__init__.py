"""Claims: hypotheses declared before looking, evaluated on stored results with honest tests.

The package: :mod:`~analysis.claims.spec` (the claim and its validation),
:mod:`~analysis.claims.metrics` (per-seed values from the store),
:mod:`~analysis.claims.verdicts` (tests, Holm, the decision),
:mod:`~analysis.claims.sampling` (the sequences' sampling floor of each metric, and bound rows) and
:mod:`~analysis.claims.evaluate` (each kind, and :func:`evaluate_claims`) and
:mod:`~analysis.claims.combine` (one verdict table for a grid run in parts).

A claim lives in the experiment TOML (``[[claims]]``) or its own TOML file; an experiment's
claims are validated, and checked against its grid (:meth:`Claim.check_levels`), as the file
loads (:mod:`layerstate.experiment`), so a malformed claim never waits for training::

    [[claims]]
    id = "conv1d-s3"
    statement = "Removing Conv1D lowers Mamba's S3 accuracy"
    kind = "difference"            # difference | equivalence | readable_by | profile_match | bound | non_inferiority
    task = "s3"
    arch = "mamba"
    treatment = "no_conv"          # levels of `compare` (default: variant)
    reference = "default"
    direction = "less"             # less | greater | two-sided
    margin = 0.05                  # smallest effect of interest
    model = "paired_t"             # paired_t | gee | mixedlm | glmm (accuracy claims; default below)
    test_against = "zero"          # zero | margin (difference claims: H0 |effect| <= margin)

Every claim gets an estimate, an interval, the test used, a p-value corrected (Holm) across
all claims of the file, the power at the achieved number of seeds, a verdict and one line
saying why (``reason``) — or ``not evaluable`` (with the reason) when the results cannot answer
it, e.g. fewer than 2 seeds with a defined value. A non-significant difference is never
reported as "no effect": only an equivalence test against a declared margin can support a
null claim.

**Verdicts against a margin** (Lakens 2017, 2018; the rules and why: docs/decisions.md). A
claim that declares a ``margin`` is judged by two tests together, the test against zero (in the
claim's direction) and the equivalence test against the margin (TOST at alpha/2 per side: the
95% interval inside ``(-margin, margin)``); the ``outcome`` column names the four cases
(:func:`analysis.stats.decision.outcome_np`):

=================  ===========================  ============  ====================  ====================
different from 0   within the margin            outcome       difference claim      equivalence claim
=================  ===========================  ============  ====================  ====================
yes                no, *before* correction      effect        supported             inconclusive [1]_
yes                yes, *after* correction      negligible    negligible            supported
no                 yes, *after* correction      equivalent    equivalent            supported
otherwise                                       inconclusive  inconclusive          inconclusive [1]_
=================  ===========================  ============  ====================  ====================

.. [1] ``contradicted`` when the whole interval lies outside the margin, and that survives the
   correction across the claims (below).

"Not within" is the failure of a test, so it is read from the uncorrected equivalence test:
a correction can then only weaken a verdict (more claims in a file never turn ``negligible``
into ``supported``). ``contradicted`` means the data refute the claim: the opposite side's test
(:func:`~analysis.claims.verdicts.contra_p`, twice the one-sided p of that side, so that
uncorrected it is exactly the 95% interval's rule), Holm-corrected across the claims as a
third family. The opposite side is zero for a directional claim (a reversal needs no margin),
the margin for a claim tested against it (an effect shown short of the margin refutes "more
than the margin"), the threshold for a bound or readable_by claim, outside the margin for an
equivalence claim. With ``test_against = "margin"`` a difference claim is supported only by the
minimum-effect test (``H0: |effect| <= margin``). A difference claim without a margin cannot
tell a negligible effect from a real one.
Holm: each claim's own test is corrected across all claims, as one family; the second test of
each claim with a margin as a second family; the opposite side's test as a third. Every
declared test counts: one not run, not evaluable or without a p-value counts with p = 1. Power
and MDE are those of the claim's own test at its Holm step (``level``); where no data could
pass at the seeds there are, the reason says so and how many seeds would do (``seeds_needed``).

**Models** (``model``, accuracy claims; :mod:`analysis.stats.contrasts`): ``paired_t`` (paired t
on per-seed accuracy differences), ``gee`` (binomial GEE on per-sequence counts, seeds as
clusters, the CR2 cluster-robust SE with Bell and McCaffrey's degrees of freedom), ``mixedlm``
(REML mixed model with random intercepts per seed, trained model and evaluation sequence, tested
with the same CR2 SE over seeds and Bell-McCaffrey degrees of freedom) or ``glmm`` (the
Bayesian binomial GLMM: its estimate and variance components are shown, but its intervals are
too narrow to decide, so the verdict comes from the default model). The default is
:data:`DEFAULT_MODEL`, the best calibrated in ``python -m bench.calibration`` (docs/measured.md,
"Statistics"). Every accuracy claim also shows a second model's estimate, interval, p and
verdict (:data:`CROSSCHECK`; ``disagreement`` flags a different verdict), the variance
components of the mixed model (between seeds, between the trained models of a seed, between
sequences within a model; SDs on the accuracy scale), and what each model dropped (a seed
trained in one condition only, sequences evaluated in one condition only). Restoration claims
hold one value per seed, so they have the paired t alone.

Tests (seeds are the unit; see :mod:`analysis.stats`):
- ``difference``/``equivalence`` on accuracy: the claim's model on per-sequence counts, paired
  by seed (same seed, same evaluation sequences).
- ``metric = "restoration"`` (difference/equivalence): the interchange restoration of each
  seed (:func:`analysis.interventions.run_interchange`) at ``layer`` (required: each run's
  best layer, chosen on the data it is tested on, biased the estimate up), compared between two ``site``s (``compare = "site"``: e.g. value vs
  query — the induction / direct-retrieval signature of Arora et al.) or between
  architectures/variants at one ``site``, by the paired t on per-seed differences.
- ``readable_by``: one-sided t test that the mean probe accuracy at ``layer`` exceeds
  ``threshold`` across seeds.
- ``profile_match``: exact permutation test over seeds of the layer-profile shape distance.
- ``bound``: one-sided t over seeds that the mean of the claim's metric lies above
  (``direction = "greater"``) or below (``"less"``) ``threshold``; ``supported`` when the
  Holm-corrected p is below alpha (the one-sided bound at its Holm level, ``bound``, clears the
  value), ``contradicted`` when the 95% interval lies wholly on the other side and the opposite
  side's test survives the correction across the claims, else ``inconclusive`` with the MDE at
  the seeds there are. The variance is never below the sequences' sampling variance where the
  metric is counted over sequences (a proportion: the score test at the threshold and the
  values it does not reject as interval; docs/decisions.md).

**Per-seed metrics** (one value per trained model; difference and equivalence claims on them
use the paired t on per-seed differences, bound claims the one-sided t):

==================  ============================================================  ==============
metric              value per seed                                                needs
==================  ============================================================  ==============
``accuracy``        the model's accuracy (bound claims; difference and            length
                    equivalence claims use the per-sequence models above)
``probe_accuracy``  the probe profile at ``layer`` (``results/probes``)           layer
``restoration``     interchange restoration at ``site``                           site
``ablation_drop``   ``accuracy_drop`` (clean - ablated accuracy) of               layer, setting
                    ``results/ablation/*`` at ``layer``, ``setting``, ``length``
``refit_accuracy``  ``probe_accuracy`` of the probe refitted on the ablated       layer, setting
                    states; ``baseline = "chance"`` subtracts the run's
                    ``chance`` (majority-class accuracy)
``patch_recovery``  ``recovery`` of ``results/patching/*`` at ``layer``,          layer
                    averaged over ``positions`` (default all patched); NaN
                    when the run's summed logit gap is not positive
``mdl_compression`` the online code's compression over the uniform code at        layer
                    ``layer`` (``results/mdl``, docs/mdl-and-stability.md)
``probe_stability`` the seed's jackknife pseudo-value of the seed-pair overlap    layer
                    of probe subspaces at ``layer`` (``results/stability``)
==================  ============================================================  ==============

``compare = "layer"`` compares two layers of one model's profile (``treatment = "L3"``,
``reference = "L2"``; any metric with a ``layer``), paired by seed: e.g. "the probe accuracy
jumps by more than 0.2 at the last layer" is a difference claim with ``margin = 0.2`` and
``test_against = "margin"``, "no step exceeds 0.2" an equivalence claim with that margin.
``compare = "setting"`` compares ablation settings (``leace`` vs ``probe``). ``result``
picks one ``ablation/<name>`` or ``patching/<name>`` result when several hold a run.
"""

from __future__ import annotations

from analysis.claims.combine import combine_parts, read_part
from analysis.claims.evaluate import NUMERIC, TEXT, evaluate_claims, stored_probe_profiles
from analysis.claims.kinds import (
    BoundClaim,
    DifferenceClaim,
    EquivalenceClaim,
    ProfileMatchClaim,
    ReadableByClaim,
)
from analysis.claims.metrics import seed_profiles
from analysis.claims.spec import (
    ABLATION,
    ALPHA,
    CROSSCHECK,
    DEFAULT_MODEL,
    LAYERED,
    MODEL_NAMES,
    Claim,
    ClaimError,
    NotEvaluable,
    StaleResultError,
    make_claim,
    parse_claims,
)
from analysis.claims.stored import evaluate_stored_claims, stale_table
from analysis.interventions.twins import MIN_GAP

__all__ = [
    "BoundClaim", "DifferenceClaim", "EquivalenceClaim", "ProfileMatchClaim", "ReadableByClaim",
    "ABLATION", "ALPHA", "CROSSCHECK", "DEFAULT_MODEL", "LAYERED", "MIN_GAP", "MODEL_NAMES", "NUMERIC", "TEXT",
    "Claim", "ClaimError", "NotEvaluable", "StaleResultError", "combine_parts", "evaluate_claims", "evaluate_stored_claims", "make_claim", "parse_claims",
    "read_part", "seed_profiles", "stale_table", "stored_probe_profiles",
]
