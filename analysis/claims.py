"""Claims: hypotheses declared before looking, evaluated on stored results with honest tests.

A claim lives in the experiment TOML (``[[claims]]``) or its own TOML file; an experiment's
claims are validated, and checked against its grid (:meth:`Claim.check_levels`), as the file
loads (:mod:`layerstate.experiment`), so a malformed claim never waits for training::

    [[claims]]
    id = "conv1d-s3"
    statement = "Removing Conv1D lowers Mamba's S3 accuracy"
    kind = "difference"            # difference | equivalence | readable_by | profile_match | bound
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

**Verdicts against a margin** (Lakens 2017, 2018). A claim that declares a ``margin`` is
judged by two tests together, the test against zero (in the claim's direction) and the
equivalence test against the margin (TOST at alpha/2 per side: the 95% interval inside
``(-margin, margin)``); the ``outcome`` column names the four cases
(:func:`analysis.stats.contrasts.outcome_np`):

=================  ==================  ============  ====================  ====================
different from 0   within the margin   outcome       difference claim      equivalence claim
=================  ==================  ============  ====================  ====================
yes                no                  effect        supported             inconclusive [1]_
yes                yes                 negligible    negligible            supported
no                 yes                 equivalent    equivalent            supported
no                 no                  inconclusive  inconclusive          inconclusive [1]_
=================  ==================  ============  ====================  ====================

.. [1] ``contradicted`` when the whole interval lies outside the margin.

A directional difference claim whose interval lies wholly on the wrong side of zero is
``contradicted``. With ``test_against = "margin"`` a difference claim is supported only by the
minimum-effect test (``H0: |effect| <= margin``, one-sided in its direction); a difference from
zero that does not pass it is ``inconclusive``. A difference claim without a margin keeps two
verdicts, ``supported`` or ``inconclusive``, and cannot tell a negligible effect from a real one.
Holm: each claim's own test (the test against zero, the TOST of an equivalence claim, the
minimum-effect test) is corrected across all claims, as one family; the second test of each
claim with a margin is corrected across claims as a second family.

**Models** (``model``, accuracy claims; :mod:`analysis.stats.contrasts`): ``paired_t`` (paired t
on per-seed accuracy differences), ``gee`` (binomial GEE on per-sequence counts, seeds as
clusters, CR1, t(G - 1)), ``mixedlm`` (REML mixed model with random intercepts per seed,
trained model and evaluation sequence, Satterthwaite degrees of freedom) or ``glmm`` (the
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
  seed (:func:`analysis.interventions.run_interchange`) at ``layer`` (default: the best
  non-trivial layer), compared between two ``site``s (``compare = "site"``: e.g. value vs
  query — the induction / direct-retrieval signature of Arora et al.) or between
  architectures/variants at one ``site``, by the paired t on per-seed differences.
- ``readable_by``: one-sided t test that the mean probe accuracy at ``layer`` exceeds
  ``threshold`` across seeds.
- ``profile_match``: exact permutation test over seeds of the layer-profile shape distance.
- ``bound``: one-sided t over seeds that the mean of the claim's metric lies above
  (``direction = "greater"``) or below (``"less"``) ``threshold``; ``supported`` when the
  Holm-corrected p is below alpha (uncorrected, the one-sided 95% bound clears the value),
  ``contradicted`` when the 95% interval lies wholly on the other side, else
  ``inconclusive`` with the MDE at the seeds there are. Seeds that all sit at one value (e.g.
  accuracy 1.0) have no spread: the mean alone decides.

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
==================  ============================================================  ==============

``compare = "layer"`` compares two layers of one model's profile (``treatment = "L3"``,
``reference = "L2"``; any metric with a ``layer``), paired by seed: e.g. "the probe accuracy
jumps by more than 0.2 at the last layer" is a difference claim with ``margin = 0.2`` and
``test_against = "margin"``, "no step exceeds 0.2" an equivalence claim with that margin.
``compare = "setting"`` compares ablation settings (``leace`` vs ``probe``). ``result``
picks one ``ablation/<name>`` or ``patching/<name>`` result when several hold a run.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from typing import Any, Literal, cast

import numpy as np
import xarray as xr
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy import stats as sps

from store import LayerstateError, MissingError, Store

ALPHA = 0.05

#: The model of an accuracy claim that names none: the best calibrated of paired_t, gee and
#: mixedlm in ``python -m bench.calibration`` (4000 simulated experiments per figure: type-I
#: 0.041-0.050 and 95% coverage 0.943-0.950 in every scenario; the three are one test in
#: balanced designs, and GEE ran liberal, 0.059, in the unbalanced one; docs/measured.md,
#: "Statistics").
DEFAULT_MODEL = "paired_t"
#: The second model every accuracy claim is cross-checked with (MixedLM: as well calibrated
#: as the paired t, 0.048 in the unbalanced design, and uses every paired sequence).
CROSSCHECK = {"paired_t": "mixedlm", "mixedlm": "paired_t", "gee": "paired_t"}
MODEL_NAMES = {
    "paired_t": "paired t on per-seed differences",
    "gee": "binomial GEE on per-sequence counts (seeds as clusters, CR1, t(G-1))",
    "mixedlm": "mixed model on per-sequence accuracy (REML; seed, model and sequence intercepts; Satterthwaite df)",
    "glmm": "Bayesian binomial GLMM (point estimate and variance components only)",
}


class ClaimError(LayerstateError, ValueError):
    """A claim that is malformed or cannot be evaluated as written (one line, with the fix)."""


class NotEvaluable(ClaimError):
    """The stored results cannot answer a well-formed claim (e.g. fewer than 2 seeds with a
    defined value): the claim is reported with verdict ``not evaluable`` and the reason,
    while the other claims are still evaluated."""


#: Metrics with one value per trained model at each layer (``compare = "layer"`` works on them).
LAYERED = ("probe_accuracy", "ablation_drop", "refit_accuracy", "patch_recovery")
#: Metrics read from ``results/ablation/*`` (one value per setting).
ABLATION = ("ablation_drop", "refit_accuracy")

#: Below this mean clean-corrupt probability gap a run's restoration is undefined: the
#: corruption does not change its answer (as in :func:`classify_mechanism`'s ``min_gap``).
MIN_GAP = 0.05


class Claim(BaseModel):
    """One declared hypothesis."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(description="Short unique name.")
    statement: str = Field(description="The hypothesis in words, as it will appear in the report.")
    kind: Literal["difference", "equivalence", "readable_by", "profile_match", "bound"] = Field(
        description="Which test evaluates it (bound: a metric's per-seed mean above/below `threshold`)."
    )
    metric: Literal["accuracy", "probe_accuracy", "restoration", "ablation_drop", "refit_accuracy",
                    "patch_recovery"] = Field(
        default="accuracy",
        description="accuracy (the model's own readout), probe_accuracy, restoration (interchange "
        "interventions: fraction of the clean answer's probability restored), ablation_drop "
        "(clean - ablated accuracy, results/ablation), refit_accuracy (a probe refitted on the "
        "ablated states) or patch_recovery (share of the logit gap a patch recovers, results/patching).",
    )
    task: str | None = Field(default=None, description="Task the claim is about.")
    arch: str | None = Field(default=None, description="Architecture the claim is about.")
    archs: list[str] = Field(default=[], description="profile_match: architectures to test (each a claim row).")
    variant: str = Field(
        default="default",
        description="Variant the claim reads (readable_by, profile_match, bound; and difference/"
        "equivalence claims that do not compare variants, when the results hold several).")
    length: int = Field(default=40, description="Sequence length the metric is taken at.")
    compare: Literal["variant", "arch", "task", "site", "layer", "setting"] = Field(
        default="variant",
        description="Factor compared (site: interchange sites, metric = restoration; layer: layers of "
        "one model, paired by seed; setting: ablation settings, e.g. leace vs probe).",
    )
    site: str | None = Field(
        default=None, description="restoration: the patched site (key, value, divider, query) when not compared."
    )
    treatment: str | None = Field(default=None, description="Level of `compare` under test.")
    reference: str | None = Field(default=None, description="Level of `compare` compared against.")
    direction: Literal["less", "greater", "two-sided"] = Field(default="two-sided", description="Expected sign.")
    margin: float | None = Field(
        default=None,
        description="Smallest effect of interest: with it the verdict tells a real but negligible "
        "effect from one that matters (docs: analysis.claims).",
    )
    model: Literal["paired_t", "gee", "mixedlm", "glmm"] | None = Field(
        default=None,
        description="Accuracy claims: the model of the contrast (default: analysis.claims.DEFAULT_MODEL); "
        "glmm gives point estimates and variance components, the verdict then comes from the default.",
    )
    test_against: Literal["zero", "margin"] = Field(
        default="zero",
        description="Difference claims: 'margin' supports the claim only if |effect| > margin "
        "(minimum-effect test) rather than != 0.",
    )
    layer: str | None = Field(default=None, description="The layer, e.g. L1 (readable_by, bound, and the "
                              "probe, ablation and patching metrics when layers are not compared).")
    threshold: float | None = Field(default=None, description="readable_by: accuracy to exceed; bound: "
                                    "the value the metric's mean lies above (direction greater) or below.")
    setting: str | None = Field(default=None, description="ablation_drop, refit_accuracy: the ablation "
                                "setting (probe, leace, pca:4, ...) when settings are not compared.")
    positions: list[int] = Field(default=[], description="patch_recovery: the patched positions averaged "
                                 "over (default: every patched position).")
    baseline: Literal["none", "chance"] = Field(
        default="none", description="refit_accuracy: 'chance' takes the metric minus each run's chance "
        "(majority-class accuracy of the evaluated positions).",
    )
    matches: str | None = Field(default=None, description="profile_match: task whose profile `task` should match.")
    differs_from: str | None = Field(default=None, description="profile_match: task it should differ from.")
    target: str | None = Field(
        default=None,
        description="accuracy: the label the readout is scored on; probe_accuracy: the probed label "
        "(default the run's declared target, or the only label; needed when a store written by "
        "another tool has several labels and declares none).")
    result: str | None = Field(
        default=None, description="restoration: which results/interchange/<name> to read when several cover the task."
    )

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Claim:
        need = {
            "difference": ("task", "treatment", "reference"),
            "equivalence": ("task", "treatment", "reference", "margin"),
            "readable_by": ("task", "arch", "layer", "threshold"),
            "profile_match": ("task", "matches", "differs_from"),
            "bound": ("task", "arch", "threshold"),
        }[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.kind} claim needs {', '.join(missing)}")
        if self.compare == "site" and self.metric != "restoration":
            raise ValueError("compare = 'site' needs metric = 'restoration' (interchange sites)")
        if self.metric == "restoration":
            if self.kind not in ("difference", "equivalence"):
                raise ValueError("metric = 'restoration' works with difference and equivalence claims")
            if self.compare == "task":
                raise ValueError("restoration claims compare sites, architectures or variants within one task")
            if self.compare != "site" and self.site is None:
                raise ValueError("a restoration claim compares sites (compare = 'site') or names one site = ...")
        self._check_seed_metrics()
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"margin must be positive (a declared effect size), got {self.margin}")
        if self.model not in (None, "paired_t") and (
                self.metric != "accuracy" or self.kind not in ("difference", "equivalence")):
            raise ValueError(
                f"model = {self.model!r} fits per-sequence accuracy: it works with difference and "
                "equivalence claims on metric = 'accuracy'; restoration is compared by paired_t"
            )
        if self.test_against == "margin":
            if self.kind != "difference":
                raise ValueError("test_against = 'margin' is for difference claims (an equivalence "
                                 "claim already tests against its margin)")
            if self.margin is None:
                raise ValueError("test_against = 'margin' needs a margin (the effect to exceed)")
        return self

    def _check_seed_metrics(self) -> None:
        """The fields the per-seed metrics (bound claims, layer and setting comparisons) need."""
        m = self.metric
        if self.kind == "bound":
            if self.direction == "two-sided":
                raise ValueError("a bound claim needs direction = 'greater' (mean above threshold) or 'less'")
            if m == "restoration" and self.site is None:
                raise ValueError("a bound claim on restoration names its site = ...")
        elif self.kind in ("readable_by", "profile_match") and m not in ("accuracy", "probe_accuracy"):
            raise ValueError(f"metric = {m!r} works with difference, equivalence and bound claims")
        if self.compare == "layer":
            if m not in LAYERED:
                raise ValueError(f"compare = 'layer' needs metric = {', '.join(map(repr, LAYERED))} "
                                 f"(a layer profile), not {m!r}")
            if self.layer is not None:
                raise ValueError("compare = 'layer' takes the layers as treatment and reference; drop layer = ...")
        if self.compare == "setting" and m not in ABLATION:
            raise ValueError("compare = 'setting' needs metric = 'ablation_drop' or 'refit_accuracy'")
        compares = self.kind in ("difference", "equivalence")
        if m in LAYERED and self.layer is None and not (compares and self.compare == "layer") and (
                self.kind not in ("readable_by", "profile_match")):
            raise ValueError(f"metric = {m!r} needs layer = ... (or compare = 'layer')")
        if m in ABLATION and self.setting is None and not (compares and self.compare == "setting"):
            raise ValueError(f"metric = {m!r} needs setting = ... (the ablation setting, e.g. 'probe'), "
                             "or compare = 'setting'")
        if self.setting is not None and m not in ABLATION:
            raise ValueError("setting = ... is for metric = 'ablation_drop' or 'refit_accuracy'")
        if self.positions and m != "patch_recovery":
            raise ValueError("positions = [...] is for metric = 'patch_recovery'")
        if self.baseline == "chance" and m != "refit_accuracy":
            raise ValueError("baseline = 'chance' is for metric = 'refit_accuracy'")

    def levels(self) -> list[tuple[str, str, str | int]]:
        """Every level of the experiment the claim names, as ``(field, factor, level)``:
        factors are ``task``, ``arch``, ``variant``, ``site``, ``layer``, ``setting`` (ablation),
        ``position`` (patching) and ``length``, in the order they are checked (tasks first:
        sites and layers depend on them)."""
        named: list[tuple[str, str, str | int | None]] = [
            ("task", "task", self.task),
            ("arch", "arch", self.arch),
            *(("archs", "arch", a) for a in self.archs),
        ]
        if self.kind in ("readable_by", "profile_match", "bound") or (
            self.compare != "variant" and "variant" in self.model_fields_set
        ):  # a comparison of variants names its two in treatment/reference
            named.append(("variant", "variant", self.variant))
        named += [
            ("treatment", self.compare, self.treatment),
            ("reference", self.compare, self.reference),
            ("matches", "task", self.matches),
            ("differs_from", "task", self.differs_from),
            ("length", "length", self.length),
            ("site", "site", self.site),
            ("layer", "layer", self.layer),
            ("setting", "setting", self.setting),
            *(("positions", "position", p) for p in self.positions),
        ]
        return [(f, factor, level) for f, factor, level in named if level is not None]

    def check_levels(self, valid: Mapping[str, Collection[str | int] | None]) -> None:
        """Refuse a claim naming a level not in ``valid`` (factor -> its levels; a factor
        missing or ``None`` is not checked).

        Raises
        ------
        ClaimError
            One line naming the claim, the field, and the levels there are.
        """
        for field, factor, level in self.levels():
            levels = valid.get(factor)
            if levels is not None and level not in levels:
                shown = ", ".join(str(v) for v in levels) or "none"
                raise ClaimError(
                    f"claim {self.id!r}: {field} {level!r} is not one of this experiment's "
                    f"{factor}s ({shown})"
                )


def parse_claims(items: list[dict[str, Any]], source: str | None = None) -> list[Claim]:
    """Validate a list of claim tables; one-line errors name the claim and the field.

    Raises
    ------
    ClaimError
        ``"<source>: claim '<id>': <field>: <problem>"`` (no source prefix when not given).
    """
    prefix = f"{source}: " if source else ""
    if not isinstance(items, list):
        raise ClaimError(f"{prefix}claims must be a list of [[claims]] tables")
    out, seen = [], set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ClaimError(f"{prefix}claim #{i + 1} is not a table; write it as a [[claims]] table")
        try:
            claim = Claim(**item)
        except ValidationError as exc:
            name = item.get("id", f"#{i + 1}")
            raise ClaimError(f"{prefix}claim {name!r}: {_one_line(exc)}") from None
        if claim.id in seen:
            raise ClaimError(f"{prefix}claim id {claim.id!r} is used twice; ids must be unique")
        seen.add(claim.id)
        out.append(claim)
    return out


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(where, list(Claim.model_fields), n=1)
        msg = f"unknown field; did you mean {near[0]!r}?" if near else (
            f"unknown field; a claim's fields are {', '.join(Claim.model_fields)}")
    return f"{where}: {msg}" if where else msg


# ---------------------------------------------------------------------- per-kind evaluation
def _sequence_counts(store: Store, claim: Claim, cache: dict) -> xr.Dataset:
    """Per-sequence ``correct`` and ``labelled`` counts with dims (task, arch, variant, seed,
    sequence) at the claim's length."""
    from analysis.behaviour import by_factors, sequence_correctness

    key = ("sequences", claim.length, claim.target)
    if key not in cache:
        runs = [r for r in store.run_ids() if claim.length in store.lengths(r)]
        if not runs:
            raise MissingError(
                f"claim {claim.id!r}: no run has captured length {claim.length}; "
                "run `layerstate capture` (or change the claim's length)"
            )
        counts = sequence_correctness(store, runs, [claim.length], target=claim.target)
        cache[key] = by_factors(counts.sel(length=claim.length))
    return cast(xr.Dataset, cache[key])


def _seed_metric(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """The claim's metric, one value per trained model: dims (task, arch, variant, seed) at
    the claim's length, plus ``site`` (restoration), ``layer`` (probe_accuracy,
    patch_recovery) or ``layer, setting`` (ablation_drop, refit_accuracy)."""
    from analysis.stats import seed_estimates

    if claim.metric == "restoration":
        return _seed_restoration(store, claim, cache)
    if claim.metric == "probe_accuracy":
        probes = cache.get("probes")
        if probes is None:
            raise ClaimError(f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first")
        key = ("probe", claim.length)
        if key not in cache:
            cache[key] = seed_profiles(store, probes, claim.length)
        return cast(xr.DataArray, cache[key])
    if claim.metric in ABLATION:
        return _seed_ablation(store, claim, cache)
    if claim.metric == "patch_recovery":
        return _seed_patching(store, claim, cache)
    key = ("accuracy", claim.length)
    if key not in cache:
        corr = _sequence_counts(store, claim, cache)
        cache[key] = seed_estimates(corr.correct, corr.labelled)
    return cast(xr.DataArray, cache[key])


def _seed_restoration(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """Per-seed interchange restoration, dims (task, arch, variant, seed, site), at the
    claim's layer or, without one, at the best layer that is not trivially restored (the
    embedding at the corrupted token itself, the last layer at the readout position), as
    :func:`~analysis.interventions.classify_mechanism` reads it."""
    from analysis.behaviour import by_factors

    key = ("restoration", claim.task, claim.length, claim.layer, claim.result)
    if key in cache:
        return cast(xr.DataArray, cache[key])
    from analysis.interventions.patching import nontrivial_restoration

    names = [n for n in store.results() if n.startswith("interchange/")]
    if claim.result is not None:
        if f"interchange/{claim.result}" not in names:
            raise ClaimError(
                f"claim {claim.id!r}: no result interchange/{claim.result}; stored: "
                f"{', '.join(names) or 'none'}"
            )
        names = [f"interchange/{claim.result}"]
    parts: list[xr.DataArray] = []
    source: dict[str, str] = {}
    for name in names:
        ds = store.read_result(name)
        if int(ds.attrs.get("length", -1)) != claim.length:
            continue
        keep = [i for i, r in enumerate(ds.run.values) if store.run_attrs(str(r)).get("task") == claim.task]
        for i in keep:
            rid = str(ds.run.values[i])
            if rid in source:
                raise ClaimError(
                    f"claim {claim.id!r}: run {rid!r} has interchange results in {source[rid]} and "
                    f"{name}; say which with result = \"{source[rid].split('/', 1)[1]}\""
                )
            source[rid] = name
        if not keep:
            continue
        part = ds.isel(run=keep)
        gap = (part.p_clean - part.p_corrupt).mean(("layer", "sequence")) if "p_clean" in part else None
        if claim.layer is not None:
            layers = [str(v) for v in part.layer.values]
            if claim.layer not in layers:
                raise ClaimError(
                    f"claim {claim.id!r}: layer {claim.layer!r} was not patched in {name}; "
                    f"layers: {', '.join(layers)}"
                )
            parts.append(part.restoration.sel(layer=claim.layer, drop=True))
        else:  # masked per result, so each keeps its own layer order
            parts.append(nontrivial_restoration(part).max("layer"))
        if gap is not None:  # a ratio over a ~0 gap is noise, not a restoration
            parts[-1] = parts[-1].where(gap >= MIN_GAP)
    if not parts:
        raise MissingError(
            f"claim {claim.id!r}: no interchange results for task {claim.task!r} at length "
            f"{claim.length}; run `layerstate patch STORE --interchange --tasks {claim.task} "
            f"--length {claim.length}`"
        )
    rest = xr.concat(parts, dim="run", join="outer") if len(parts) > 1 else parts[0]
    out = by_factors(rest.reset_coords(drop=True), store)
    cache[key] = out
    return out


def _per_run(store: Store, claim: Claim, prefix: str, length_ok, extract, missing: str) -> xr.DataArray:
    """``extract(dataset) -> DataArray (run, ...)`` over the stored ``<prefix>/*`` results that
    hold runs of the claim's task (``result``: only ``<prefix>/<result>``), merged along run,
    then by factors; a run in two results must be told apart by ``result``."""
    from analysis.behaviour import by_factors

    names = [n for n in store.results() if n.startswith(f"{prefix}/")]
    if claim.result is not None:
        if f"{prefix}/{claim.result}" not in names:
            raise ClaimError(f"claim {claim.id!r}: no result {prefix}/{claim.result}; stored: "
                             f"{', '.join(names) or 'none'}")
        names = [f"{prefix}/{claim.result}"]
    parts: list[xr.DataArray] = []
    source: dict[str, str] = {}
    for name in names:
        ds = store.read_result(name)
        if not length_ok(ds):
            continue
        keep = [i for i, r in enumerate(ds.run.values) if store.run_attrs(str(r)).get("task") == claim.task]
        for i in keep:
            rid = str(ds.run.values[i])
            if rid in source:
                raise ClaimError(
                    f"claim {claim.id!r}: run {rid!r} has results in {source[rid]} and {name}; say which "
                    f"with result = \"{source[rid].split('/', 1)[1]}\""
                )
            source[rid] = name
        if keep:
            parts.append(extract(ds.isel(run=keep)))
    if not parts:
        raise MissingError(f"claim {claim.id!r}: no {prefix} results for task {claim.task!r} at length "
                           f"{claim.length}; {missing}")
    out = xr.concat(parts, dim="run", join="outer") if len(parts) > 1 else parts[0]
    return by_factors(out.reset_coords(drop=True), store)


def _seed_ablation(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """Per-seed ``accuracy_drop`` or refitted-probe ``probe_accuracy`` (minus ``chance`` with
    ``baseline = "chance"``) of ``results/ablation/*`` at the claim's length: dims (task,
    arch, variant, seed, layer, setting)."""
    key = ("ablation", claim.metric, claim.baseline, claim.task, claim.length, claim.result)
    if key in cache:
        return cast(xr.DataArray, cache[key])
    L = claim.length
    var = "accuracy_drop" if claim.metric == "ablation_drop" else "probe_accuracy"

    def extract(ds: xr.Dataset) -> xr.DataArray:
        if var not in ds:
            raise ClaimError(f"claim {claim.id!r}: the ablation results hold no {var} (ablated without "
                             "the refitted probe?); run `layerstate ablate` with the refit")
        out = ds[var].sel(length=L, drop=True)
        if claim.baseline == "chance":
            out = out - ds["chance"].sel(length=L, drop=True)
        return out.astype(float)

    out = _per_run(store, claim, "ablation", lambda ds: "length" in ds.coords and L in ds.length.values,
                   extract, f"run `layerstate ablate STORE --tasks {claim.task}` with length {L}")
    cache[key] = out
    return out


def _seed_patching(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """Per-seed patching ``recovery`` of ``results/patching/*`` (length attribute = the claim's
    length), averaged over the claim's ``positions`` (default all): dims (task, arch, variant,
    seed, layer). The mean of per-position recoveries is the share of the gap one patched
    position recovers on average, as every position's recovery has the same denominator
    (the run's summed gap); a run whose summed gap is not positive has none (NaN)."""
    key = ("patching", claim.task, claim.length, tuple(claim.positions), claim.result)
    if key in cache:
        return cast(xr.DataArray, cache[key])

    def extract(ds: xr.Dataset) -> xr.DataArray:
        rec = ds["recovery"]
        if claim.positions:
            have = [int(p) for p in ds.position.values]
            lost = [p for p in claim.positions if p not in have]
            if lost:
                raise ClaimError(f"claim {claim.id!r}: positions {lost} were not patched; patched: "
                                 f"{have[0]}..{have[-1]} ({len(have)} positions)")
            rec = rec.sel(position=list(claim.positions))
        out = rec.mean("position")
        if "gap" in ds:
            out = out.where(ds["gap"].sum("sequence") > 0)
        return out.astype(float)

    out = _per_run(store, claim, "patching", lambda ds: int(ds.attrs.get("length", -1)) == claim.length,
                   extract, f"run `layerstate patch STORE --tasks {claim.task} --length {claim.length}`")
    cache[key] = out
    return out


def _levels(da: xr.DataArray, dim: str, wanted: list[str | None], claim: Claim) -> None:
    have = [str(v) for v in da[dim].values]
    for w in wanted:
        if w is not None and w not in have:
            raise ClaimError(
                f"claim {claim.id!r}: {dim} {w!r} has no results; stored {dim}s: {', '.join(have)}"
            )


def _pair(da: xr.DataArray, claim: Claim) -> tuple[xr.DataArray, xr.DataArray]:
    """The claim's treatment and reference cells of ``da`` (dims task, arch, variant[, site],
    seed[, sequence]), each left with its seed (and sequence) dims."""
    # The variant is pinned when the claim names one or the results hold several (the claim's
    # default, "default"); a store with one variant, whatever its name, needs no pin.
    pin = "variant" in claim.model_fields_set or ("variant" in da.dims and da.sizes["variant"] > 1)
    fixed: dict[str, str | None] = {"task": claim.task, "arch": claim.arch,
                                    "variant": claim.variant if pin else None}
    if claim.metric == "restoration":
        fixed["site"] = claim.site
    for dim, level in (("layer", claim.layer), ("setting", claim.setting)):
        if dim in da.dims:
            fixed[dim] = level
    fixed[claim.compare] = None
    for dim, level in fixed.items():
        if level is not None:
            _levels(da, dim, [level], claim)
            da = da.sel({dim: level})
    _levels(da, claim.compare, [claim.treatment, claim.reference], claim)
    t = da.sel({claim.compare: claim.treatment})
    r = da.sel({claim.compare: claim.reference})
    extra = [d for d in t.dims if d not in ("seed", "sequence") and t.sizes[d] > 1]
    if extra:
        raise ClaimError(
            f"claim {claim.id!r} is ambiguous: results vary over {extra}; name them in the claim "
            f"(e.g. arch = ...)"
        )
    other = [d for d in t.dims if d not in ("seed", "sequence")]
    return t.squeeze(other, drop=True), r.squeeze(other, drop=True)


def _too_few(claim: Claim, found: int, what: str = "with results in both conditions") -> NotEvaluable:
    why = {"restoration": f"; restoration is undefined for models whose answer the corruption does not move "
                          f"(mean probability gap < {MIN_GAP})",
           "patch_recovery": "; recovery is undefined for models whose summed logit gap is not positive"
           }.get(claim.metric, "")
    return NotEvaluable(
        f"claim {claim.id!r} needs at least 2 seeds {what} (found {found}){why}; train more seeds "
        "(or longer) — seeds are the unit of replication"
    )


def _seed_list(seeds: np.ndarray) -> str:
    return ", ".join(str(int(s)) for s in seeds)


def _tests(claim: Claim, est: float, se: float, df: float) -> dict[str, Any]:
    """Interval, the claim's tests, power and MDE of an estimate (``se``, ``df``)."""
    from analysis.stats.contrasts import inference_np, mde_se, power_se, tost_power_se

    margin = claim.margin
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    inf = {k: float(v) for k, v in inference_np(est, se, df, margin=margin, alpha=ALPHA, direction=direction,
                                                 test_against=claim.test_against).items()}
    alt = "two-sided" if direction == "two-sided" else "one-sided"
    sign = -1.0 if direction == "less" else 1.0  # power_at: a true effect in the claimed direction
    power, power_at = np.nan, np.nan
    mde = float(mde_se(se, df, ALPHA, 0.8, alt))
    if claim.kind == "equivalence" and margin is not None:
        power, power_at = float(tost_power_se(se, df, margin, ALPHA / 2)), 0.0
        mde = float(mde_se(se, df, ALPHA, 0.8))
        primary = "equivalence"
    elif claim.test_against == "margin" and margin is not None:
        # the minimum-effect test at twice the margin is the test against zero at the margin
        power, power_at, mde = float(power_se(margin, se, df, ALPHA, alt)), sign * 2 * margin, margin + mde
        primary = "margin"
    else:
        if margin is not None:
            power, power_at = float(power_se(margin, se, df, ALPHA, alt)), sign * margin
        primary = "zero"
    return {
        "estimate": float(est), "lower": inf["lower"], "upper": inf["upper"], "se": float(se), "df": float(df),
        "p": inf[f"p_{primary}"], "p_zero": inf["p_zero"], "p_equivalence": inf.get("p_equivalence", np.nan),
        "p_margin": inf.get("p_margin", np.nan) if claim.test_against == "margin" else np.nan,
        "power": power, "power_at": power_at, "mde": mde,
    }


def _test_text(claim: Claim, model: str) -> str:
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    name = MODEL_NAMES[model]
    if claim.kind == "equivalence":
        return f"{name}: TOST ±{claim.margin:g}, alpha/2 per side (p doubled); and against 0"
    text = f"{name} ({direction})"
    if claim.margin is not None:
        against = (f"minimum-effect test |effect| > {claim.margin:g}" if claim.test_against == "margin"
                   else "against 0")
        text += f"; {against}, and TOST ±{claim.margin:g} at alpha/2 per side"
    return text


def _evaluate_seedwise(store: Store, claim: Claim, cache: dict) -> dict:
    """A difference/equivalence claim on a per-seed metric (restoration, probe accuracy,
    ablation drop, refitted probe accuracy, patching recovery): the paired t on per-seed
    differences."""
    from analysis.stats.equivalence import paired_t_np

    t, r = _pair(_seed_metric(store, claim, cache), claim)
    ok = np.isfinite(t.values) & np.isfinite(r.values)
    if ok.sum() < 2:
        raise _too_few(claim, int(ok.sum()))
    res = paired_t_np((t - r).values[ok])
    row = _tests(claim, float(res["estimate"]), float(res["se"]), float(ok.sum() - 1))
    undefined = ~ok & (np.isfinite(t.values) | np.isfinite(r.values))
    row.update(
        n_seeds=int(ok.sum()), margin=claim.margin if claim.margin else np.nan,
        treatment_mean=float(t.values[ok].mean()), reference_mean=float(r.values[ok].mean()),
        test=_test_text(claim, "paired_t"), model="paired_t",
        dropped=(f"paired_t: seeds {_seed_list(t.seed.values[undefined])} ({claim.metric} undefined in one "
                 "condition)" if undefined.any() else ""),
        crosscheck_model="", variance="",
    )
    return row


def _evaluate_accuracy(store: Store, claim: Claim, cache: dict) -> dict:
    from analysis.stats.contrasts import contrast_np, glmm_contrast

    corr = _sequence_counts(store, claim, cache)
    (ct, cr), (lt, lr) = _pair(corr.correct, claim), _pair(corr.labelled, claim)
    core = ("seed", "sequence")
    C = np.stack([cr.transpose(*core).values, ct.transpose(*core).values]).astype(float)
    L = np.stack([lr.transpose(*core).values, lt.transpose(*core).values]).astype(float)
    seeds = ct.seed.values
    present = (np.nan_to_num(L) > 0).any(-1)  # (condition, seed)
    requested = claim.model or DEFAULT_MODEL
    model = requested if requested != "glmm" else DEFAULT_MODEL
    second = "glmm" if requested == "glmm" else CROSSCHECK[model]
    fits = {m: {k: np.asarray(v).item() for k, v in contrast_np(m, C, L).items()}
            for m in dict.fromkeys([model, *(() if second == "glmm" else (second,)), "mixedlm"])}
    fit = fits[model]
    if not np.isfinite(fit["estimate"]):
        if model == "gee":
            raise _too_few(claim, int(present.sum(-1).min()), "in each condition")
        raise _too_few(claim, int(present.all(0).sum()))
    row = _tests(claim, fit["estimate"], fit["se"], fit["df"])
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.nansum(C, -1) / np.nansum(L, -1)
    row.update(
        n_seeds=int(fit["n_seeds"]), margin=claim.margin if claim.margin else np.nan,
        treatment_mean=float(np.nanmean(acc[1][present[1]])), reference_mean=float(np.nanmean(acc[0][present[0]])),
        test=_test_text(claim, model), model=model, crosscheck_model=second,
    )
    mix = fits["mixedlm"]
    row.update(sd_seed=float(np.sqrt(mix["var_seed"])), sd_model=float(np.sqrt(mix["var_model"])),
               sd_sequence=float(np.sqrt(mix["var_shared"] + mix["var_residual"])), variance="")
    if second == "glmm":
        g = glmm_contrast(C, L, rng=0)
        row["_x"] = {"estimate": g["estimate"], "lower": np.nan, "upper": np.nan, "p": np.nan}
        row["variance"] = (f"GLMM (logit scale): seed SD {g['sd_seed']:.3f}, model SD {g['sd_model']:.3f}, "
                           f"sequence SD {g['sd_sequence']:.3f}; log odds ratio {g['log_odds_ratio']:+.3f}")
        row["test"] += "; glmm requested: its intervals are too narrow to decide, so the verdict is the default's"
    else:
        x = fits[second]
        row["_x"] = (_tests(claim, x["estimate"], x["se"], x["df"]) if np.isfinite(x["estimate"]) else
                     {"estimate": np.nan, "lower": np.nan, "upper": np.nan, "p": np.nan})
    row["dropped"] = _dropped(claim, [model, second], present, C, L, seeds)
    return row


def _dropped(claim: Claim, models: list[str], present: np.ndarray, C: np.ndarray, L: np.ndarray,
             seeds: np.ndarray) -> str:
    """What each model left out, in words ('' when nothing)."""
    one = np.asarray(present.any(0) & ~present.all(0), dtype=bool)
    where = [f"{s} (only in {claim.reference if present[0, i] else claim.treatment})"
             for i, s in enumerate(seeds) if one[i]]
    has = np.nan_to_num(L) > 0
    unpaired = int((has[0] ^ has[1])[present.all(0)].sum())
    parts = []
    for m in dict.fromkeys(models):
        if m == "paired_t" and where:
            parts.append(f"paired_t dropped seed {', '.join(where)}")
        elif m == "gee" and where:
            parts.append(f"gee used seed {', '.join(where)} for that condition only")
        elif m == "mixedlm" and (where or unpaired):
            bits = ([f"seed {', '.join(where)}"] if where else []) + (
                [f"{unpaired} sequences evaluated in one condition only"] if unpaired else [])
            parts.append(f"mixedlm dropped {' and '.join(bits)}")
    return "; ".join(parts)


def _evaluate_comparison(store: Store, claim: Claim, cache: dict) -> dict:
    if claim.metric != "accuracy":
        return _evaluate_seedwise(store, claim, cache)
    return _evaluate_accuracy(store, claim, cache)


def _primary(claim: Claim) -> str:
    if claim.kind == "equivalence":
        return "equivalence"
    if claim.kind == "difference":
        return "margin" if claim.test_against == "margin" else "zero"
    return "other"


def _secondary(claim: Claim) -> tuple[str, ...]:
    if claim.margin is None or claim.kind not in ("difference", "equivalence"):
        return ()
    return {"zero": ("equivalence",), "margin": ("zero", "equivalence"), "equivalence": ("zero",)}[_primary(claim)]


def _holm(p: np.ndarray) -> np.ndarray:
    from analysis.stats.multiple import adjust_np

    p = np.asarray(p, dtype=float)
    return adjust_np(p, "holm", ALPHA)[0] if p.size else p


def _adjust(claims: list[Claim], rows: list[dict]) -> list[dict[str, float]]:
    """Holm-adjusted p-values of every claim's tests by name (``zero``, ``equivalence``,
    ``margin``, ``other``): each claim's own test over all claims, and the second tests of the
    claims with a margin as a second family."""
    primary = _holm(np.array([r["p"] for r in rows], dtype=float))
    out = [{_primary(c): float(primary[i])} for i, c in enumerate(claims)]
    entries = [(i, name, rows[i].get(f"p_{name}", np.nan)) for i, c in enumerate(claims)
               if not rows[i].get("not_evaluable") for name in _secondary(c)]
    second = _holm(np.array([p for _, _, p in entries], dtype=float))
    for (i, name, _), pa in zip(entries, second, strict=True):
        out[i][name] = float(pa)
    return out


def _fmt(x: float) -> str:
    return "nan" if not np.isfinite(x) else (f"{x:.2g}" if x < 0.001 else f"{x:.3f}")


def _decide(claim: Claim, row: dict, adj: dict[str, float]) -> tuple[str, str, str]:
    """(verdict, outcome, reason) of one claim from its row and Holm-adjusted p-values."""
    if row.get("not_evaluable"):
        return "not evaluable", "", str(row["test"])
    lo, hi = row["lower"], row["upper"]
    iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
    if claim.kind == "readable_by":
        p = adj["other"]
        if p < ALPHA:
            return "supported", "", f"mean probe accuracy at {claim.layer} above {claim.threshold:g} (Holm p = {_fmt(p)})"
        if hi < (claim.threshold or 0):
            return "contradicted", "", f"the {iv} lies below {claim.threshold:g}"
        return "inconclusive", "", f"not shown above {claim.threshold:g} (Holm p = {_fmt(p)}; {iv})"
    if claim.kind == "bound":
        p, v = adj["other"], claim.threshold or 0.0
        side, opposite = ("above", "below") if claim.direction == "greater" else ("below", "above")
        what = "mean" + (" minus chance" if claim.baseline == "chance" else "")
        if p < ALPHA:
            return "supported", "", f"{what} {side} {v:g} (one-sided t, Holm p = {_fmt(p)}; {iv})"
        if (claim.direction == "greater" and hi < v) or (claim.direction == "less" and lo > v):
            return "contradicted", "", f"the {iv} lies {opposite} {v:g}"
        return "inconclusive", "", (f"not shown {side} {v:g} (Holm p = {_fmt(p)}; {iv}); MDE {row['mde']:.3f} "
                                    f"{side} it at {int(row['n_seeds'])} seeds")
    if claim.kind == "profile_match":
        p = adj["other"]
        if p < ALPHA:
            return "supported", "", (f"profile differs from {claim.differs_from}'s (Holm p = {_fmt(p)}) and lies "
                                     f"closer to {claim.matches}'s")
        return "inconclusive", "", f"not shown to differ from {claim.differs_from}'s profile closer to {claim.matches}'s (Holm p = {_fmt(p)})"
    from analysis.stats.contrasts import outcome_np

    m = claim.margin
    p_zero = adj.get("zero", np.nan)
    zero_sig = bool(p_zero < ALPHA)
    power = (f"power {row['power']:.2f} at {row['power_at']:+g}, " if np.isfinite(row.get("power", np.nan)) else "")
    power += f"MDE {row['mde']:.3f}"
    if claim.kind == "equivalence":
        within = bool(adj["equivalence"] < ALPHA)
        outcome = str(outcome_np(zero_sig, within))
        if within:
            extra = (f"; different from zero (Holm p = {_fmt(p_zero)}): real but negligible" if zero_sig else "")
            return "supported", outcome, f"within ±{m:g}: the {iv} lies inside the margin (TOST Holm p = {_fmt(adj['equivalence'])}){extra}"
        if m is not None and (lo > m or hi < -m):
            return "contradicted", outcome, f"the {iv} lies wholly outside ±{m:g}"
        return "inconclusive", outcome, (f"not shown within ±{m:g} (TOST Holm p = {_fmt(adj['equivalence'])}; "
                                         f"{iv}); {power} (to show equivalence at a true difference of 0)")
    side = {"less": "below", "greater": "above", "two-sided": "different from"}[claim.direction]
    wrong = (claim.direction == "less" and lo > 0) or (claim.direction == "greater" and hi < 0)
    if m is None:
        if zero_sig:
            return "supported", "", (f"{side} zero (Holm p = {_fmt(p_zero)}; {iv}); no margin declared, so a "
                                     "negligible effect is not told apart")
        return "inconclusive", "", (f"not shown {side} zero (Holm p = {_fmt(p_zero)}; {iv}); no margin declared, "
                                    f"so no power (MDE {row['mde']:.3f})")
    within = bool(adj.get("equivalence", np.nan) < ALPHA)
    if claim.test_against == "margin":
        beyond = bool(adj["margin"] < ALPHA)
        outcome = "effect" if beyond else ("negligible" if within and zero_sig else
                                           "equivalent" if within else "inconclusive")
    else:
        outcome = str(outcome_np(zero_sig, within))
    opposite = "above" if claim.direction == "less" else "below"
    if wrong:
        return "contradicted", outcome, f"the {iv} lies {opposite} zero: the opposite of the claimed direction"
    if outcome == "effect":
        if claim.test_against == "margin":
            return "supported", outcome, (f"beyond the margin: |effect| > {m:g} (minimum-effect test, Holm p = "
                                          f"{_fmt(adj['margin'])}; {iv})")
        return "supported", outcome, f"{side} zero (Holm p = {_fmt(p_zero)}) and not within ±{m:g} ({iv})"
    if outcome == "negligible":
        return "negligible", outcome, (f"{side} zero (Holm p = {_fmt(p_zero)}) but within ±{m:g}: the {iv} lies "
                                       "inside the margin, a real but negligible effect")
    if outcome == "equivalent":
        return "equivalent", outcome, (f"not {side} zero (Holm p = {_fmt(p_zero)}) and within ±{m:g}: the {iv} "
                                       "lies inside the margin")
    if claim.test_against == "margin" and zero_sig:
        return "inconclusive", outcome, (f"{side} zero (Holm p = {_fmt(p_zero)}) but not shown beyond ±{m:g} "
                                         f"(minimum-effect Holm p = {_fmt(adj['margin'])}; {iv}); {power}")
    return "inconclusive", outcome, f"not shown {side} zero (Holm p = {_fmt(p_zero)}) nor within ±{m:g} ({iv}); {power}"


def _evaluate_readable(store: Store, claim: Claim, probes: xr.Dataset) -> dict:
    threshold = claim.threshold
    if threshold is None:  # the Claim validator requires a threshold for readable_by claims
        raise ClaimError(f"claim {claim.id!r}: a readable_by claim needs a threshold")
    acc = _probe_seed_profile(store, probes, claim, claim.task, claim.arch)
    if claim.layer not in [str(v) for v in acc.layer.values]:
        raise ClaimError(
            f"claim {claim.id!r}: layer {claim.layer!r} not probed; layers: "
            f"{', '.join(map(str, acc.layer.values))}"
        )
    x = acc.sel(layer=claim.layer).values
    x = x[np.isfinite(x)]
    if x.size < 2:
        raise NotEvaluable(f"claim {claim.id!r} needs probe results from at least 2 seeds (found {x.size})")
    n, mean, sd = x.size, float(x.mean()), float(x.std(ddof=1))
    se = sd / math.sqrt(n) if sd > 0 else 1e-12
    tcrit = sps.t.ppf(1 - ALPHA / 2, n - 1)
    p = float(sps.t.sf((mean - threshold) / se, n - 1))
    return {
        "estimate": mean, "lower": mean - tcrit * se, "upper": mean + tcrit * se, "p": p,
        "n_seeds": n, "margin": np.nan, "power": np.nan, "mde": np.nan,
        "treatment_mean": mean, "reference_mean": claim.threshold,
        "test": f"one-sided t: mean probe accuracy at {claim.layer} > {claim.threshold:g}",
    }


def _evaluate_bound(store: Store, claim: Claim, cache: dict) -> dict:
    """One-sided t on the per-seed values of the claim's metric against ``threshold``."""
    from analysis.stats.contrasts import mde_se

    threshold = claim.threshold
    if threshold is None:  # the Claim validator requires one
        raise ClaimError(f"claim {claim.id!r}: a bound claim needs a threshold")
    da = _seed_metric(store, claim, cache)
    sel: dict[str, str | None] = {"task": claim.task, "arch": claim.arch, "variant": claim.variant,
                                  "site": claim.site, "layer": claim.layer, "setting": claim.setting}
    for dim, level in sel.items():
        if dim in da.dims and level is not None:
            _levels(da, dim, [level], claim)
            da = da.sel({dim: level})
    extra = [d for d in da.dims if d != "seed" and da.sizes[d] > 1]
    if extra:
        raise ClaimError(f"claim {claim.id!r} is ambiguous: results vary over {extra}; name them in the claim")
    x = np.asarray(da.squeeze([d for d in da.dims if d != "seed"], drop=True).values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        raise _too_few(claim, int(x.size), "with a defined value")
    n, mean, sd = x.size, float(x.mean()), float(x.std(ddof=1))
    se = sd / math.sqrt(n) if sd > 0 else 1e-12  # seeds alike (e.g. all at 1.0): the mean decides
    tcrit = sps.t.ppf(1 - ALPHA / 2, n - 1)
    t = (mean - threshold) / se
    p = float(sps.t.sf(t, n - 1) if claim.direction == "greater" else sps.t.cdf(t, n - 1))
    what = {"ablation_drop": f"ablation drop ({claim.setting} at {claim.layer})",
            "refit_accuracy": f"refitted probe accuracy after {claim.setting} at {claim.layer}"
                              + (" minus chance" if claim.baseline == "chance" else ""),
            "patch_recovery": f"patching recovery at {claim.layer}"
                              + (f", positions {_ranges(claim.positions)}" if claim.positions else ""),
            "probe_accuracy": f"probe accuracy at {claim.layer}",
            "restoration": f"restoration at {claim.site}",
            "accuracy": "accuracy"}[claim.metric]
    side = ">" if claim.direction == "greater" else "<"
    return {
        "estimate": mean, "lower": mean - tcrit * se, "upper": mean + tcrit * se, "se": se, "df": float(n - 1),
        "p": p, "n_seeds": n, "margin": np.nan, "power": np.nan, "power_at": np.nan,
        "mde": float(mde_se(se, n - 1, ALPHA, 0.8, "one-sided")),
        "treatment_mean": mean, "reference_mean": threshold, "model": "paired_t",
        "test": f"one-sided t over seeds: mean {what} at L = {claim.length} {side} {threshold:g}",
    }


def _ranges(values: list[int]) -> str:
    """``[10, 11, 12, 20]`` -> ``'10-12, 20'``."""
    out: list[str] = []
    for v in sorted(values):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def seed_profiles(store: Store, probes: xr.Dataset, length: int) -> xr.DataArray:
    """Probe accuracy across layers per trained model, as dims (task, arch, variant, seed, layer).

    Each run's profile is its cross-validated accuracy averaged over folds (and positions),
    i.e. the ``profile`` variable of a probe result; runs become the grid's factors.
    """
    from analysis.behaviour import FACTORS, by_factors

    if "profile" not in probes or length not in probes.length.values:
        have = [int(v) for v in probes.length.values] if "length" in probes.coords else []
        raise ClaimError(
            f"probe results have no profile at length {length} (lengths: {have}); "
            f"run `layerstate probe STORE --lengths {length}`"
        )
    prof = probes["profile"].sel(length=length, drop=True)
    # the factors always come from the runs' attributes
    return by_factors(prof.drop_vars([f for f in FACTORS if f in prof.coords]), store)


def _probe_seed_profile(store: Store, probes: xr.Dataset, claim: Claim, task: str | None,
                        arch: str | None) -> xr.DataArray:
    """Per-seed probe accuracy across layers, (seed, layer), for one task/arch/variant."""
    prof = seed_profiles(store, probes, claim.length)
    sel: dict[str, str] = {"task": str(task), "variant": claim.variant}
    if arch is not None:
        sel["arch"] = arch
    for dim, level in sel.items():
        _levels(prof, dim, [level], claim)
    out = prof.sel(sel)
    finite = cast(xr.DataArray, np.isfinite(out))  # numpy ufuncs on a DataArray return one
    return out.isel(seed=np.flatnonzero(finite.any("layer").values))


def _evaluate_profile(store: Store, claim: Claim, probes: xr.Dataset, arch: str) -> dict:
    from analysis.stats import profile_difference_test

    if claim.matches is None or claim.differs_from is None:  # required by the Claim validator
        raise ClaimError(f"claim {claim.id!r}: a profile_match claim needs matches and differs_from")
    profiles = {t: _probe_seed_profile(store, probes, claim, t, arch)
                for t in (claim.task, claim.matches, claim.differs_from)}

    def test(other: str) -> xr.Dataset:
        pair = xr.concat([profiles[claim.task], profiles[other]],
                         dim=xr.DataArray([claim.task, other], dims="task"))
        return profile_difference_test(pair.transpose("task", "seed", "layer"), rng=0)

    same, diff = test(claim.matches), test(claim.differs_from)
    d_same, d_diff = float(same.statistic), float(diff.statistic)
    return {
        # the tested statistic: shape distance to `differs_from`, with its bootstrap interval
        "estimate": d_diff, "lower": float(diff.lower), "upper": float(diff.upper),
        # supported needs the profile to differ from `differs_from` (the test) AND to sit
        # closer to `matches` than to it (a descriptive condition, reported beside it)
        "p": float(diff.p) if d_same < d_diff else 1.0,
        "n_seeds": int(profiles[claim.task].sizes["seed"]),
        "margin": np.nan, "power": np.nan, "mde": np.nan,
        "treatment_mean": d_same, "reference_mean": d_diff,
        "test": f"exact permutation over seeds of the profile-shape distance ({claim.task} vs "
                f"{claim.differs_from}; distance to {claim.matches} must be smaller)",
    }


#: Numeric columns of the claims Dataset (NaN where a column does not apply to a claim).
NUMERIC = ("estimate", "lower", "upper", "se", "df", "p", "power", "power_at", "mde", "n_seeds", "margin",
           "treatment_mean", "reference_mean", "p_zero", "p_equivalence", "p_margin",
           "crosscheck_estimate", "crosscheck_lower", "crosscheck_upper", "crosscheck_p",
           "sd_seed", "sd_model", "sd_sequence")
TEXT = ("test", "model", "crosscheck_model", "dropped", "variance")


def evaluate_claims(store: Store, claims: list[Claim], *, probes: xr.Dataset | None = None) -> xr.Dataset:
    """Evaluate every claim; returns one row per claim (dim ``claim``).

    Nothing is written if any claim fails to evaluate (no partial verdicts).

    Returns
    -------
    xarray.Dataset
        Dim ``claim``: ``statement``, ``kind``, ``test``, ``verdict``, ``outcome`` (the four
        outcomes against a margin: effect, negligible, equivalent, inconclusive; '' without a
        margin), ``reason`` (one line: which outcome and why), ``model``; ``estimate``,
        ``lower``, ``upper`` (95% interval), ``se``, ``df``, ``p`` (the claim's own test),
        ``p_adjusted`` (Holm over the claims), ``p_zero``, ``p_equivalence``, ``p_margin`` and
        their ``*_adjusted``, ``power`` (of the claim's own test at a true effect
        ``power_at``), ``mde``, ``n_seeds``, ``margin``; the cross-check ``crosscheck_model``,
        ``crosscheck_estimate``, ``crosscheck_lower``, ``crosscheck_upper``, ``crosscheck_p``,
        ``crosscheck_verdict``, ``disagreement``; variance components ``sd_seed``,
        ``sd_model``, ``sd_sequence`` (accuracy scale) and ``variance`` (GLMM, text);
        ``dropped`` (what each model left out).
    """
    if not claims:
        raise ClaimError("no claims to evaluate; add [[claims]] tables to the experiment file")
    cache: dict = {}
    rows: list[dict] = []
    ids: list[str] = []
    kept: list[Claim] = []

    def attempt(fn, *args) -> dict:
        try:
            return fn(*args)
        except NotEvaluable as exc:
            return {"test": f"not evaluable: {exc}", "not_evaluable": True}

    cache["probes"] = probes
    for claim in claims:
        if claim.kind in ("difference", "equivalence", "bound"):
            if claim.metric == "probe_accuracy" and probes is None:
                raise ClaimError(f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first")
            fn = _evaluate_bound if claim.kind == "bound" else _evaluate_comparison
            rows.append(attempt(fn, store, claim, cache))
            ids.append(claim.id)
            kept.append(claim)
            continue
        if probes is None:
            raise ClaimError(
                f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first"
            )
        if claim.kind == "readable_by":
            rows.append(attempt(_evaluate_readable, store, claim, probes))
            ids.append(claim.id)
            kept.append(claim)
        else:
            for arch in claim.archs or ([claim.arch] if claim.arch else []):
                rows.append(attempt(_evaluate_profile, store, claim, probes, arch))
                ids.append(f"{claim.id}[{arch}]")
                kept.append(claim)
    rows = [{k: np.nan for k in NUMERIC} | {k: "" for k in TEXT} | r for r in rows]
    adjusted = _adjust(kept, rows)
    decided = [_decide(c, r, a) for c, r, a in zip(kept, rows, adjusted, strict=True)]
    cross = []
    for i, (claim, row) in enumerate(zip(kept, rows, strict=True)):
        x = row.get("_x")
        if x is None:
            cross.append("")
            continue
        row.update(crosscheck_estimate=x["estimate"], crosscheck_lower=x["lower"], crosscheck_upper=x["upper"],
                   crosscheck_p=x["p"])
        if not np.isfinite(x["p"]):
            cross.append("")
            continue
        swapped = [*rows[:i], {**row, **x}, *rows[i + 1:]]
        cross.append(_decide(claim, swapped[i], _adjust(kept, swapped)[i])[0])
    data: dict[str, Any] = {k: ("claim", np.array([float(r[k]) for r in rows])) for k in NUMERIC}
    data["p_adjusted"] = ("claim", np.array([a.get(_primary(c), np.nan) for c, a in zip(kept, adjusted, strict=True)]))
    for name in ("zero", "equivalence", "margin"):
        data[f"p_{name}_adjusted"] = ("claim", np.array([a.get(name, np.nan) for a in adjusted]))
    data["verdict"] = ("claim", np.array([d[0] for d in decided], dtype=str))
    data["outcome"] = ("claim", np.array([d[1] for d in decided], dtype=str))
    data["reason"] = ("claim", np.array([d[2] for d in decided], dtype=str))
    data["crosscheck_verdict"] = ("claim", np.array(cross, dtype=str))
    data["disagreement"] = ("claim", np.array([bool(x) and x != d[0] for x, d in zip(cross, decided, strict=True)]))
    for k in TEXT:
        data[k] = ("claim", np.array([str(r[k]) for r in rows], dtype=str))
    data["statement"] = ("claim", np.array([c.statement for c in kept], dtype=str))
    data["kind"] = ("claim", np.array([c.kind for c in kept], dtype=str))
    return xr.Dataset(
        data, coords={"claim": np.array(ids, dtype=str)},
        attrs={"alpha": ALPHA, "correction": "holm across the claims (each claim's own test; the second test "
               "of the claims with a margin as a second family)", "ci_level": 1 - ALPHA,
               "default_model": DEFAULT_MODEL,
               "verdict_rule": "with a margin: different from 0 and not within the margin -> supported; "
               "different and within -> negligible; not different and within -> equivalent; neither -> "
               "inconclusive; a directional claim with its interval on the wrong side -> contradicted "
               "(equivalence claims: within -> supported). docs: analysis.claims"},
    )


def stored_probe_profiles(store: Store) -> xr.Dataset | None:
    """Every stored ``probes/*`` result's layer profiles, merged along ``run`` (None if none)."""
    names = [n for n in store.results() if n.startswith("probes/")]
    if not names:
        return None
    profiles = [store.read_result(n)[["profile"]] for n in names]
    return xr.concat(profiles, dim="run", join="outer", data_vars="all")


def evaluate_stored_claims(store: Store, claims: list[Claim]) -> xr.Dataset:
    """Evaluate ``claims`` on the results stored in ``store`` (probe profiles included) and
    store the verdicts as ``results/claims``; returns them (see :func:`evaluate_claims`)."""
    res = evaluate_claims(store, claims, probes=stored_probe_profiles(store))
    store.write_result("claims", res)
    return res
