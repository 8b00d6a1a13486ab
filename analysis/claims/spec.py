"""What a claim is: the declared fields, their validation, and the constants of the tests
(alpha, the default and cross-check models)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from analysis.stats.decision import Verdict
from store import LayerstateError, schema
from store.errors import did_you_mean, validation_problems

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
    "gee": "binomial GEE on per-sequence counts (seeds as clusters, CR2 SE, Bell-McCaffrey df)",
    "mixedlm": "mixed model on per-sequence accuracy (REML; seed, model and sequence intercepts; CR2 SE over "
               "seeds, Bell-McCaffrey df)",
    "glmm": "Bayesian binomial GLMM (point estimate and variance components only)",
}


class ClaimError(LayerstateError, ValueError):
    """A claim that is malformed or cannot be evaluated as written (one line, with the fix)."""


class NotEvaluable(ClaimError):
    """The stored results cannot answer a well-formed claim (e.g. fewer than 2 seeds with a
    defined value): the claim is reported with verdict ``not evaluable`` and the reason,
    while the other claims are still evaluated."""


class AmbiguousResultError(ClaimError):
    """Several stored probe results hold every run a claim reads of one task and the claim names
    none: ``task``, ``count`` and ``listed`` (the candidates, in words), ``suggested`` (the short
    name of one)."""

    def __init__(self, message: str, *, task: str, count: int, listed: str, suggested: str) -> None:
        super().__init__(message)
        self.task, self.count, self.listed, self.suggested = task, count, listed, suggested


class StaleResultError(ClaimError):
    """A stored result a claim reads lacks runs that the store holds in the claim's cells (it was
    computed before they were trained): deciding on it would silently use fewer seeds. The message
    names the command that brings the result up to date."""


#: Metrics with one value per trained model at each layer (``compare = "layer"`` works on them).
LAYERED = ("probe_accuracy", "ablation_drop", "refit_accuracy", "patch_recovery", "mdl_compression",
           "probe_stability")
#: Metrics read from ``results/ablation/*`` (one value per setting).
ABLATION = ("ablation_drop", "refit_accuracy")



#: The kind of stored result each per-seed metric is read from (the others: ``behaviour``).
METRIC_RESULTS = {"probe_accuracy": schema.PROBES, "ablation_drop": schema.ABLATION,
                  "refit_accuracy": schema.ABLATION, "patch_recovery": schema.PATCHING,
                  "restoration": schema.INTERCHANGE, "mdl_compression": schema.MDL,
                  "probe_stability": schema.STABILITY}

#: The fields each kind of claim needs.
REQUIRED: dict[str, tuple[str, ...]] = {
    "difference": ("task", "treatment", "reference"),
    "equivalence": ("task", "treatment", "reference", "margin"),
    "readable_by": ("task", "arch", "layer", "threshold"),
    "profile_match": ("task", "matches", "differs_from"),
    "bound": ("task", "arch", "threshold"),
}

#: The verdicts a claim can get, and when (docs/claims.md is written from these).
OUTCOMES: dict[str, str] = {
    Verdict.SUPPORTED: "the claim's own test passes after Holm's correction: a difference from 0 in the "
                 "claimed direction (and, with a margin, not within it); an equivalence claim's "
                 "interval inside the margin; a bound's one-sided bound beyond the threshold",
    Verdict.NEGLIGIBLE: "a difference claim with a margin: different from 0, but within the margin (real, too "
                  "small to matter)",
    Verdict.EQUIVALENT: "a difference claim with a margin: not different from 0, and within the margin",
    Verdict.INCONCLUSIVE: "neither test decides: the interval is too wide for the seeds there are (the power "
                    "and the minimum detectable effect say how many more would help)",
    Verdict.CONTRADICTED: "the interval lies wholly on the side opposite to the claim (or outside an "
                    "equivalence margin), and the test of that side survives Holm's correction",
    Verdict.NOT_EVALUABLE: "the stored results cannot answer the claim (e.g. fewer than 2 seeds with a value); "
                     "the reason is given and the other claims are still evaluated",
}


class Claim(BaseModel):
    """One declared hypothesis."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(description="Short unique name.")
    statement: str = Field(description="The hypothesis in words, as it will appear in the report.")
    kind: Literal["difference", "equivalence", "readable_by", "profile_match", "bound"] = Field(
        description="Which test evaluates it (bound: a metric's per-seed mean above/below `threshold`)."
    )
    metric: Literal["accuracy", "probe_accuracy", "restoration", "ablation_drop", "refit_accuracy",
                    "patch_recovery", "mdl_compression", "probe_stability"] = Field(
        default="accuracy",
        description="accuracy (the model's own readout), probe_accuracy, restoration (interchange "
        "interventions: fraction of the clean answer's probability restored), ablation_drop "
        "(clean - ablated accuracy, results/ablation), refit_accuracy (a probe refitted on the "
        "ablated states), patch_recovery (share of the logit gap a patch recovers, results/patching) or "
        "mdl_compression (uniform / online codelength of the label at a layer, results/mdl: 1 is no "
        "compression) or probe_stability (how alike the seeds' aligned probe subspaces are at a layer, "
        "results/stability: each seed's jackknife pseudo-value of the mean overlap over seed pairs, "
        "so the test is over seeds; 3 seeds or more).",
    )
    task: str | None = Field(default=None, description="Task the claim is about.")
    arch: str | None = Field(default=None, description="Architecture the claim is about.")
    archs: list[str] = Field(default=[], description="profile_match: architectures to test (each a claim row).")
    variant: str = Field(
        default="default",
        description="Variant the claim reads (readable_by, profile_match, bound; and difference/"
        "equivalence claims that do not compare variants, when the results hold several).")
    length: int | None = Field(
        default=None,
        description="Sequence length the metric is taken at (default: the length the claim's runs "
        "were trained at, when they were captured there; else their only captured length; else "
        "the claim must name one).")
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
    statistic: Literal["share", "mean"] | None = Field(
        default=None,
        description="bound, readable_by: what the claim is about. 'share' (the default): the share of seeds "
        "beyond the threshold exceeds q (q = 0.5: the median seed lies beyond it), the exact sign test, valid "
        "whatever the seeds' values (docs/ceiling.md). 'mean': the mean of the seeds' values, the one-sided t "
        "over seeds, valid only if they are roughly normal (not near the ceiling, no failing seed).")
    q: float = Field(default=0.5, description="statistic = 'share': the share of seeds that must lie beyond "
                     "the threshold (0.5: the median seed; 0.75: three quarters of the seeds).")
    assume_normal: bool = Field(
        default=False, description="statistic = 'mean' on a bounded metric (an accuracy): accept the t test's "
        "assumption that the seeds' values are roughly normal. Without it a supported or contradicted verdict's "
        "reason says what that assumption costs near the metric's bound (measured: the t test rejected up to 0.16 "
        "of the time at level 0.05 with Beta-distributed seeds, 0.73 with one seed in ten failing).")
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
        default=None,
        description="Which stored result to read when several of the metric's kind hold the claim's "
        "runs: a probe (probe_accuracy, readable_by, profile_match), ablation, patching, "
        "interchange (restoration) or mdl (mdl_compression) result, named with or without its kind, e.g. \"dyck-2\" or "
        "\"probes/dyck-2\". Without it the one result holding the runs is read; when there are "
        "several the claim is refused with a list of them and their settings. For probe results, "
        "`--result TASK=NAME` on `stats`, `plan` and `report` chooses for every claim of the task "
        "that names none.")

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Claim:
        need = REQUIRED[self.kind]
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
            if self.layer is None:
                # each run's best layer would be chosen on the same data the test then uses: with a
                # true restoration of 0.47 it estimated 0.501 and called "> 0.5" 5.3% of the time
                raise ValueError("a restoration claim names its layer = ... (e.g. layer = \"L0\"): the best "
                                 "layer of each run, chosen on the data it is then tested on, biases the estimate up")
        self._check_seed_metrics()
        if self.kind not in ("bound", "readable_by") and (self.statistic is not None or "q" in self.model_fields_set):
            raise ValueError("statistic and q are for bound and readable_by claims (the share of seeds beyond the "
                             "threshold, or their mean)")
        if not 0 < self.q < 1:
            raise ValueError(f"q must lie strictly between 0 and 1 (the share of seeds beyond the threshold), got {self.q}")
        if self.assume_normal and self.statistic != "mean":
            raise ValueError("assume_normal is for statistic = 'mean' (the t test over seeds); a share claim's "
                             "exact sign test assumes nothing of the seeds' values")
        if self.statistic == "mean" and "q" in self.model_fields_set:
            raise ValueError("q is the share of seeds for statistic = 'share'; a claim about the mean takes none")
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

    @property
    def by_share(self) -> bool:
        """Whether the claim is decided by the share of seeds beyond its threshold (a bound or
        readable_by claim that does not declare statistic = 'mean')."""
        return self.kind in ("bound", "readable_by") and self.statistic != "mean"

    def tasks(self) -> list[str]:
        """The tasks the claim reads: its task, the tasks it compares, matches or differs from."""
        named = [self.task, self.matches, self.differs_from]
        if self.compare == "task":
            named += [self.treatment, self.reference]
        return list(dict.fromkeys(str(t) for t in named if t is not None))

    def reads(self) -> str:
        """The kind of stored result the claim is decided on (:data:`store.schema` names):
        ``probes`` for a readable_by or profile_match claim whatever its ``metric``, the
        metric's result kind otherwise, ``behaviour`` for the models' own accuracy. The one
        answer to "which results does this claim read": the work list computes these, the
        evaluation reads them."""
        if self.kind in ("readable_by", "profile_match"):
            return schema.PROBES
        return METRIC_RESULTS.get(self.metric, schema.BEHAVIOUR)

    def selects(self, attrs: Mapping[str, Any]) -> bool:
        """Whether a run (its attributes) lies in one of the cells the claim reads: its tasks,
        and the architectures and variants it names (any, where it names none)."""
        archs: set[str] = set()
        variants: set[str] = set()
        if self.compare == "arch" and self.kind in ("difference", "equivalence"):
            archs = {str(self.treatment), str(self.reference)}
        elif self.kind == "profile_match" and self.archs:
            archs = set(self.archs)
        elif self.arch is not None:
            archs = {self.arch}
        if self.compare == "variant" and self.kind in ("difference", "equivalence"):
            variants = {str(self.treatment), str(self.reference)}
        elif self.kind in ("readable_by", "profile_match", "bound") or "variant" in self.model_fields_set:
            variants = {self.variant}
        return (str(attrs.get("task")) in self.tasks()
                and (not archs or str(attrs.get("arch")) in archs)
                and (not variants or str(attrs.get("variant", "default")) in variants))

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

    def check_levels(self, valid: Mapping[str, Collection[str | int] | None], *, where: str = "this experiment's",
                     factors: Collection[str] | None = None) -> None:
        """Refuse a claim naming a level not in ``valid`` (factor -> its levels; a factor
        missing or ``None``, or not in ``factors`` when given, is not checked); ``where`` says
        whose levels they are (``"this experiment's"``, ``"the store's"``).

        Raises
        ------
        ClaimError
            One line naming the claim, the field, the closest level (a misspelling) and the
            levels there are.
        """
        for field, factor, level in self.levels():
            levels = valid.get(factor)
            if factors is not None and factor not in factors:
                continue
            if levels is not None and level not in levels:
                shown = ", ".join(str(v) for v in levels) or "none"
                raise ClaimError(
                    f"claim {self.id!r}: {field} {level!r} is not one of {where} "
                    f"{factor}s ({shown}){did_you_mean(level, levels)}"
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
    return validation_problems(exc, Claim.model_fields)[0]


def claim_archs(claim: Claim) -> list[str]:
    """The architectures a claim names: its ``archs``, else its one ``arch`` (none without)."""
    return list(claim.archs or ([claim.arch] if claim.arch else []))


def claim_rows(claim: Claim) -> list[str]:
    """The row ids a claim evaluates to: its id, or ``id[arch]`` per architecture of a
    profile_match claim (as :func:`~analysis.claims.evaluate.evaluate_claims` names them)."""
    if claim.kind == "profile_match":
        return [f"{claim.id}[{a}]" for a in claim_archs(claim)]
    return [claim.id]
