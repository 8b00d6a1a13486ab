"""What every claim is: the fields all kinds share, their validation, the questions each kind
answers for the rest of the package (its tests, their families, its decision, its sequential
hypothesis, its plan, its words) with the default answers, and the constants of the tests
(alpha, the default and cross-check models).

A kind of claim is one subclass of :class:`ClaimBase` (:mod:`analysis.claims.kinds`): it names
itself in ``kind``, lists the fields it needs (``required``) and the kind-specific fields it
owns (``owns``; any other kind's is refused), and overrides what its test does differently.
Nothing outside these classes compares the kind string."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis import registry
from analysis.claims.errors import ClaimError
from analysis.claims.rows import ClaimRow
from analysis.stats.design import Cell, Hypothesis
from analysis.stats.ranges import UNBOUNDED
from store.errors import did_you_mean

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

#: Metrics with one value per trained model at each layer (``compare = "layer"`` works on them);
#: an added analysis's layered metrics (:mod:`analysis.registry`) are too (:func:`layered`).
LAYERED = ("probe_accuracy", "ablation_drop", "refit_accuracy", "patch_recovery", "mdl_compression",
           "probe_stability")
#: Metrics read from ``results/ablation/*`` (one value per setting).
ABLATION = ("ablation_drop", "refit_accuracy")

#: The models' own readout accuracy: the metric no analysis's result gives (it is read from the
#: captures); every other metric is an analysis's (:func:`analysis.registry.metrics`: the result
#: it is read from and its range).
ACCURACY = "accuracy"


def layered() -> tuple[str, ...]:
    """Every metric with one value per trained model at each layer: :data:`LAYERED` and the
    layered metrics of added analyses."""
    return LAYERED + tuple(m.name for m in registry.metrics().values() if m.layered and m.name not in LAYERED)

#: The fields that belong to some kinds only, each with the kinds that own it (any other kind
#: refuses it when given): filled from the kinds' ``owns`` as they are defined.
OWNED: dict[str, list[str]] = {}


def listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


class ClaimBase(BaseModel):
    """One declared hypothesis: the fields every kind shares. A claim is an instance of one
    kind's subclass (:data:`analysis.claims.kinds.Claim`); the class attributes and methods
    below are what the rest of the package asks a claim instead of comparing its kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The fields a claim of this kind must give.
    required: ClassVar[tuple[str, ...]] = ()
    #: The kind-specific fields (:data:`OWNED`) this kind reads; the others it refuses.
    owns: ClassVar[frozenset[str]] = frozenset()
    #: A contrast of two levels of a factor (treatment against reference): its estimate is a
    #: signed difference, paired by seed.
    compares: ClassVar[bool] = False
    #: A claim about where the seeds' values lie against a ``threshold``.
    thresholded: ClassVar[bool] = False
    #: Decided on stored probe results whatever its metric (a probe's layer profile or accuracy).
    reads_probes: ClassVar[bool] = False
    #: A row per architecture, each an exact permutation test decided in a single look.
    per_arch: ClassVar[bool] = False
    #: The worked example of the kind (a ``[[claims]]`` table) and what it asks, for docs/claims.md.
    example: ClassVar[str] = ""
    explained: ClassVar[str] = ""

    id: str = Field(description="Short unique name.")
    statement: str = Field(description="The hypothesis in words, as it will appear in the report.")
    kind: str = Field(description="Which test evaluates it: difference, equivalence, readable_by, profile_match, "
                      "bound or non_inferiority (each a class of analysis.claims.kinds, which owns the fields and "
                      "the tests of its kind).")
    metric: str = Field(
        default=ACCURACY,
        description="accuracy (the model's own readout), probe_accuracy, restoration (interchange "
        "interventions: fraction of the clean answer's probability restored), ablation_drop "
        "(clean - ablated accuracy, results/ablation), refit_accuracy (a probe refitted on the "
        "ablated states), patch_recovery (share of the logit gap a patch recovers, results/patching) or "
        "mdl_compression (uniform / online codelength of the label at a layer, results/mdl: 1 is no "
        "compression) or probe_stability (how alike the seeds' aligned probe subspaces are at a layer, "
        "results/stability: each seed's jackknife pseudo-value of the mean overlap over seed pairs, "
        "so the test is over seeds; 3 seeds or more); or a metric of an added analysis "
        "(analysis.registry).",
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
    result: str | dict[str, str] | None = Field(
        default=None,
        description="Which stored result to read when several of the metric's kind hold the claim's "
        "runs: a probe (probe_accuracy, readable_by, profile_match), ablation, patching, "
        "interchange (restoration) or mdl (mdl_compression) result, named with or without its kind, e.g. \"dyck-2\" or "
        "\"probes/dyck-2\". Without it the one result holding the runs is read; when there are "
        "several the claim is refused with a list of them and their settings. A claim reading the "
        "probe results of several tasks (profile_match) names one per task as a table, e.g. "
        "result = {s3 = \"s3-2\", parity = \"parity\"}; a task it leaves out reads its one result. "
        "For probe results, `--result TASK=NAME` on `stats`, `plan` and `report` chooses for every "
        "claim of the task that names none.")

    @model_validator(mode="after")
    def _check(self) -> ClaimBase:
        known = [ACCURACY, *registry.metrics()]
        if self.metric not in known:
            raise ValueError(f"unknown metric {self.metric!r}; metrics: {', '.join(known)}"
                             f"{did_you_mean(self.metric, known)}")
        missing = [f for f in self.required if getattr(self, f) is None]
        if missing:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.kind} claim needs {', '.join(missing)}")
        if self.compare == "site" and self.metric != "restoration":
            raise ValueError("compare = 'site' needs metric = 'restoration' (interchange sites)")
        if self.metric == "restoration":
            if not self.compares:
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
        if not 0 < self.q < 1:
            raise ValueError(f"q must lie strictly between 0 and 1 (the share of seeds beyond the threshold), got {self.q}")
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"margin must be positive (a declared effect size), got {self.margin}")
        self._check_kind()
        if isinstance(self.result, dict):
            if self.reads() != registry.PROBES:
                raise ValueError("result as a table of task = name is for claims that read probe results; "
                                 f"name the one {self.reads()} result, e.g. result = \"NAME\"")
            other = sorted(set(self.result) - set(self.tasks()))
            if other:
                raise ValueError(f"result names task {other[0]!r}, which the claim does not read (it reads "
                                 f"{', '.join(map(repr, self.tasks()))}); name only those")
        for name in sorted(self.model_fields_set & OWNED.keys() - self.owns):
            if getattr(self, name) == type(self).model_fields[name].default:
                continue  # the default written out changes nothing
            kinds = OWNED[name]
            raise ValueError(f"{name} is for {listed(kinds)} claims, not {self.kind} claims; drop it")
        return self

    def _check_kind(self) -> None:
        """The rules of the kind's own fields (a subclass's)."""

    def _check_seed_metrics(self) -> None:
        """The fields the per-seed metrics (bound claims, layer and setting comparisons) need."""
        m = self.metric
        if self.reads_probes and m not in ("accuracy", "probe_accuracy"):
            raise ValueError(f"metric = {m!r} works with difference, equivalence and bound claims")
        if self.compare == "layer":
            if m not in layered():
                raise ValueError(f"compare = 'layer' needs metric = {', '.join(map(repr, layered()))} "
                                 f"(a layer profile), not {m!r}")
            if self.layer is not None:
                raise ValueError("compare = 'layer' takes the layers as treatment and reference; drop layer = ...")
        if self.compare == "setting" and m not in ABLATION:
            raise ValueError("compare = 'setting' needs metric = 'ablation_drop' or 'refit_accuracy'")
        if m in layered() and self.layer is None and not (self.compares and self.compare == "layer") and (
                not self.reads_probes):
            raise ValueError(f"metric = {m!r} needs layer = ... (or compare = 'layer')")
        if m in ABLATION and self.setting is None and not (self.compares and self.compare == "setting"):
            raise ValueError(f"metric = {m!r} needs setting = ... (the ablation setting, e.g. 'probe'), "
                             "or compare = 'setting'")
        if self.setting is not None and m not in ABLATION:
            raise ValueError("setting = ... is for metric = 'ablation_drop' or 'refit_accuracy'")
        if self.positions and m != "patch_recovery":
            raise ValueError("positions = [...] is for metric = 'patch_recovery'")
        if self.baseline == "chance" and m != "refit_accuracy":
            raise ValueError("baseline = 'chance' is for metric = 'refit_accuracy'")

    # ------------------------------------------------------------------ what the claim reads

    @property
    def by_share(self) -> bool:
        """Whether the claim is decided by the share of seeds beyond its threshold (a bound or
        readable_by claim that does not declare statistic = 'mean')."""
        return self.thresholded and self.statistic != "mean"

    def tasks(self) -> list[str]:
        """The tasks the claim reads: its task, the tasks it compares, matches or differs from."""
        named = [self.task, self.matches, self.differs_from]
        if self.compare == "task":
            named += [self.treatment, self.reference]
        return list(dict.fromkeys(str(t) for t in named if t is not None))

    @property
    def result_key(self) -> Hashable:
        """``result`` as a key of the evaluation's caches (a table of task = name, as sorted pairs)."""
        return tuple(sorted(self.result.items())) if isinstance(self.result, dict) else self.result

    @property
    def one_result(self) -> str | None:
        """``result`` of a claim that reads one kind of result other than probes: a name or None
        (a table of task = name is for probe-reading claims only: the validation refuses it
        elsewhere)."""
        if isinstance(self.result, dict):
            raise ClaimError(f"claim {self.id!r}: result as a table of task = name is for claims that read "
                             "probe results; name the one result, e.g. result = \"NAME\"")
        return self.result

    def reads(self) -> str:
        """The kind of stored result the claim is decided on (:data:`store.schema` names):
        ``probes`` for a readable_by or profile_match claim whatever its ``metric``, the
        metric's result kind otherwise, ``behaviour`` for the models' own accuracy. The one
        answer to "which results does this claim read": the work list computes these, the
        evaluation reads them."""
        if self.reads_probes:
            return registry.PROBES
        metric = registry.metrics().get(self.metric)
        return metric.analysis if metric is not None else registry.BEHAVIOUR

    def selects(self, attrs: Mapping[str, Any]) -> bool:
        """Whether a run (its attributes) lies in one of the cells the claim reads: its tasks,
        and the architectures and variants it names (any, where it names none)."""
        archs: set[str] = set()
        variants: set[str] = set()
        if self.compare == "arch" and self.compares:
            archs = {str(self.treatment), str(self.reference)}
        elif self.archs:
            archs = set(self.archs)
        elif self.arch is not None:
            archs = {self.arch}
        if self.compare == "variant" and self.compares:
            variants = {str(self.treatment), str(self.reference)}
        elif not self.compares or "variant" in self.model_fields_set:
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
        if not self.compares or (
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

    def row_ids(self) -> list[str]:
        """The row ids the claim evaluates to (its id; a profile_match claim one per architecture)."""
        return [self.id]

    def named_archs(self) -> list[str]:
        """The architectures the claim names: its one ``arch`` (none without)."""
        return [self.arch] if self.arch else []

    def metric_range(self) -> tuple[float, float]:
        """The range of the claim's metric: [0, 1] for accuracies (and a refitted probe's accuracy),
        [-1, 1] for drops and accuracies minus chance, unbounded for ratios (patching recovery)."""
        if self.metric == "refit_accuracy":
            return (-1.0, 1.0) if self.baseline == "chance" else (0.0, 1.0)
        if self.metric == ACCURACY:
            return (0.0, 1.0)
        metric = registry.metrics().get(self.metric)
        return metric.range if metric is not None and metric.range is not None else (-np.inf, np.inf)

    def estimate_range(self) -> tuple[float, float]:
        """The range of the claim's estimate (:mod:`analysis.stats.ranges`); none by default."""
        return UNBOUNDED

    @property
    def decision_margin(self) -> float | None:
        """The margin the claim is decided with: its declared ``margin`` (a kind may default one)."""
        return self.margin

    # ------------------------------------------------------------------ its tests and their families

    @property
    def tested_direction(self) -> Literal["less", "greater", "two-sided"]:
        """The direction the claim's own test of a contrast is one-sided in (two-sided unless a
        difference claim declares one)."""
        return "two-sided"

    @property
    def greater(self) -> bool:
        """Whether the claimed side is above (the threshold, zero or the margin)."""
        return self.direction == "greater"

    def own_tests(self) -> int:
        """How many tests of the first Holm family the claim is (a profile_match: one per architecture)."""
        return 1

    def primary_test(self) -> str:
        """The name of the claim's own test: ``zero``, ``margin``, ``equivalence`` or ``other``."""
        return "other"

    def secondary_tests(self) -> tuple[str, ...]:
        """The tests beside its own that a claim with a margin puts in the second Holm family."""
        return ()

    def own_p(self, est: float, se: float, df: float) -> float | None:
        """The p of the claim's own test from an estimate, where its kind's test is none of the
        contrast's tests against zero, its margin or within it (None: :func:`analysis.claims.
        verdicts.claim_tests` takes that test's p)."""
        return None

    def contra_test(self) -> bool:
        """Whether the claim can be ``contradicted`` (has an opposite side to test)."""
        return False

    def contra_value(self) -> float:
        """The value whose far side refutes the claim (zero unless the kind says otherwise)."""
        return 0.0

    def contra_p(self, row: Mapping[str, Any]) -> float:
        """p of the test that the effect lies on the side opposite to the claim (:func:`analysis.
        claims.verdicts.contra_p`); NaN for a kind that cannot be contradicted."""
        return np.nan

    def sequential_margin_test(self) -> bool:
        """Whether a group-sequential design tests the margin's TOST beside the claim's own test
        (a difference claim tested against zero with a margin)."""
        return False

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        """The claim as a test of a group-sequential design reading ``cells``
        (:func:`analysis.claims.hypotheses.from_claim`)."""
        raise NotImplementedError(f"a {self.kind} claim defines no hypothesis(): every kind writes its own "
                                  "(docs/guide/extending.md)")

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        """Power (at ``power_at``, the effect the claim's margin names) and MDE of the claim's own
        test judged at ``level`` (its Holm step), from a positive ``se`` and ``df``."""
        raise NotImplementedError(f"a {self.kind} claim defines no judged_power(): every kind writes its own "
                                  "(docs/guide/extending.md)")

    def one_sided_bound(self, row: Mapping[str, Any], level: float) -> float:
        """The one-sided ``1 - level`` confidence bound on the claimed side, the number a one-sided
        test at ``level`` compares with its threshold (or zero, or the margin); NaN where the claim
        has no claimed side or the row no SE."""
        return np.nan

    def test_text(self, model: str) -> str:
        """The test of a contrast by ``model``, in words (``""`` for a kind that is no contrast)."""
        return ""

    def ceiling_caveat(self, verdict: str) -> str:
        """What a verdict's reason should add about the test's assumptions (``""``: nothing)."""
        return ""

    def plan_test(self, estimate: float) -> tuple[Literal["one-sided", "two-sided", "equivalence"], float] | str:
        """The alternative and effect a seed plan powers the claim at (from its ``estimate``), or
        in words why it cannot be planned that way."""
        return "an exact permutation test: see its reason for the seeds per task it needs"

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        """(verdict, outcome, reason) from an evaluated row and its Holm-adjusted p-values
        (:func:`analysis.claims.verdicts.decide`, which handles a row not evaluated)."""
        raise NotImplementedError(f"a {self.kind} claim defines no decide(): every kind writes its own "
                                  "(docs/guide/extending.md)")

    @classmethod
    def power_words(cls, power: float, power_at: float, margin: float, *, share: bool = False) -> str:
        """Why a row of this kind shows no power (its power is NaN)."""
        return "power not computable: no standard error"
