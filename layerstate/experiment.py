"""Experiments: one TOML file describes the whole pipeline, validated when it loads.

The file names a grid of tasks x architectures x variants x seeds, how each run is trained
and recorded, which analyses run, and the claims to test::

    [experiment]
    name = "quick"

    [grid]
    tasks = ["parity", "s3", "dyck"]
    archs = ["transformer", "lstm"]
    seeds = [0, 1]

    [train]
    steps = 400

    [capture]
    lengths = [40, 80, 120]

    [analysis]
    ablate = true

    [[claims]]
    id = "lstm-parity"
    statement = "The LSTM beats the Transformer on Parity at length 80"
    kind = "difference"
    task = "parity"
    compare = "arch"
    treatment = "lstm"
    reference = "transformer"
    length = 80

    [[reference]]                   # a value a paper reported, shown beside ours in the report
    source = "Jiang 2026"
    metric = "claim"                # claim | accuracy | probe_accuracy
    claim = "lstm-parity"
    value = 17.0
    unit = "pp"

The model lives here, above the packages (docs/design.md): ``capture`` is handed only its
sections (:attr:`Experiment.plan`, a :class:`~capture.experiment.CapturePlan`), and the
claims are :class:`analysis.claims.Claim` objects checked against the grid as the file
loads, so a typo in a claim fails in a second rather than after training and capture.
"""

from __future__ import annotations

import math
import tomllib
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from analysis import registry
from analysis.claims import Claim, ClaimError, parse_claims
from analysis.claims.kinds import ClaimBase
from analysis.claims.spec import ALPHA
from analysis.claims.verdicts import family_share
from analysis.stats.design import Design
from analysis.stats.profiles import attainable_min_p, seeds_for_profile_test
from capture.experiment import (
    CaptureConfig,
    CapturePlan,
    ExperimentError,
    ExperimentInfo,
    GridConfig,
    RunSpec,
    TrainConfig,
    validate_model,
)
from capture.models import ModelConfig
from capture.tasks import get_task
from layerstate.work import STAGES, work_list
from store import layer_names
from store.errors import InvalidArgumentError, did_you_mean, validation_problems

__all__ = [
    "AnalysisConfig",
    "Reference",
    "CaptureConfig",
    "CapturePlan",
    "Experiment",
    "ExperimentError",
    "ExperimentInfo",
    "GridConfig",
    "RunSpec",
    "TrainConfig",
    "load_claims",
    "load_experiment",
    "parse_experiment",
]

if TYPE_CHECKING:
    from layerstate.work import Work

_STRICT = ConfigDict(extra="forbid", frozen=True)


class AnalysisConfig(BaseModel):
    model_config = _STRICT
    probe: bool = Field(default=True, description="Fit linear probes on every run, per task.")
    probe_positions: str = Field(
        default="pooled", description="all | last | pooled: one probe per position, last position, or pooled."
    )
    probe_lengths: list[int] | None = Field(default=None, description="Lengths to probe (default: all captured).")
    probe_train_length: int | None = Field(
        default=None, description="Fit probes at this length and score them at the others (OOD)."
    )
    probe_folds: int = Field(default=5, ge=2, description="k of the k-fold split by sequence.")
    probe_method: str = Field(default="exact", description="exact | screen | reference.")
    probe_control: str = Field(
        default="permute",
        description="Control labelling for selectivity: permute (labels shuffled across sequences) "
        "or token (Hewitt & Liang; trivially decodable when a task has 2-6 token types).",
    )
    ablate: bool = Field(default=False, description="Ablate directions/subspaces per layer and re-run the layers above.")
    ablate_settings: list[str] = Field(
        default=["probe", "leace", "pca:1,4", "random:4"],
        description="probe | stored | leace | inlp:k | pca:k | svd:k | random:k (k may be a list: pca:1,2,4).",
    )
    ablate_fit_length: int | None = Field(default=None, description="Fit directions at this length (default: the training length).")
    ablate_lengths: list[int] | None = Field(default=None, description="Lengths to ablate at (OOD when not the fit length).")
    ablate_mode: str = Field(default="zero", description="zero (project out) or mean (replace by the mean).")
    ablate_refit_rows: int = Field(
        default=10_000, ge=100, description="Rows per fold for the refitted probe on ablated states."
    )
    patch: bool = Field(default=False, description="Activation patching on the captured counterfactual twins.")
    patch_length: int = Field(default=40, description="Length of the counterfactual twins to patch.")
    patch_positions: list[int] | None = Field(default=None, description="Positions to patch (default all).")
    interchange: bool = Field(default=False, description="Interchange interventions at named sites (assoc_recall, treecall).")
    mdl: bool = Field(default=False, description="Code each task's training target per layer with an online (MDL) "
                      "probe, Voita & Titov 2020: results/mdl/<task> (also when a claim reads mdl_compression).")
    mdl_positions: str = Field(default="last", description="last | pooled | all: the positions the MDL probe codes.")
    stability: bool = Field(default=False, description="How alike the seeds' probe subspaces are per layer, read "
                            "from the task's probe result: results/stability/<task> (also when a claim reads "
                            "probe_stability; the probes run too).")
    stability_shuffles: int = Field(default=20, ge=1, description="Label permutations of stability's "
                                    "shuffled-label null.")
    extra: list[str] = Field(default=[], description="Added analyses (analysis.registry) to compute per task: "
                             "results/<name>/<task> (also when a claim reads one of their metrics).")
    params: dict[str, dict[str, Any]] = Field(
        default={}, description="Parameters of added analyses, one table each: [analysis.params.<name>].")

    @model_validator(mode="after")
    def _choices(self) -> AnalysisConfig:
        if self.probe_positions not in ("all", "last", "pooled"):
            raise ValueError(f"probe_positions must be all, last or pooled, got {self.probe_positions!r}")
        if self.mdl_positions not in ("all", "last", "pooled"):
            raise ValueError(f"mdl_positions must be all, last or pooled, got {self.mdl_positions!r}")
        if self.probe_control not in ("permute", "token"):
            raise ValueError(f"probe_control must be permute or token, got {self.probe_control!r}")
        if self.ablate_mode not in ("zero", "mean"):
            raise ValueError(f"ablate_mode must be zero or mean, got {self.ablate_mode!r}")
        if self.probe_method not in ("exact", "screen", "reference"):
            raise ValueError(f"probe_method must be exact, screen or reference, got {self.probe_method!r}")
        added = [a.name for a in registry.added()]
        for name in (*self.extra, *self.params):
            if name not in added:
                raise ValueError(f"unknown analysis {name!r}; added analyses: {', '.join(added) or 'none'} "
                                 f"(register one: docs/guide/extending.md){did_you_mean(name, added)}")
        for name, table in self.params.items():
            model = registry.analysis(name).params  # type: ignore[union-attr]  # checked above
            if model is not None:
                model(**table)  # its errors name the field
        return self

    def added_params(self, name: str) -> dict[str, Any]:
        """The parameters of the added analysis ``name``: its ``[analysis.params.<name>]`` table
        through its parameter model (the defaults written out), as recorded with its result."""
        entry = registry.analysis(name)
        table = dict(self.params.get(name, {}))
        if entry is None or entry.params is None:
            return table
        return dict(entry.params(**table).model_dump())


class Reference(BaseModel):
    """A value a paper reported, for the report's paper comparison (:mod:`reports.references`
    reads these tables; our number is a claim's estimate, an accuracy cell or a probe cell)."""

    model_config = _STRICT
    source: str = Field(min_length=1, description="Who reported the value, e.g. 'Jiang 2026, Table 3'.")
    metric: Literal["claim", "accuracy", "probe_accuracy"] = Field(
        description="claim (a claim's estimate), accuracy (the model's own) or probe_accuracy (at one layer)."
    )
    value: float = Field(description="The reported value, in `unit`.")
    unit: Literal["fraction", "pp", "percent", "%"] = Field(
        default="fraction", description="fraction, pp or percent (pp and percent are divided by 100)."
    )
    claim: str | None = Field(default=None, description="metric = claim: the claim's id.")
    task: str | None = Field(default=None, description="The task (accuracy, probe_accuracy).")
    arch: str | None = Field(default=None, description="The architecture (accuracy, probe_accuracy).")
    variant: str | None = Field(default=None, description="The variant (default: default).")
    length: int | None = Field(default=None, description="The sequence length (probes: the fit length).")
    layer: str | None = Field(default=None, description="probe_accuracy: the layer, e.g. L1.")
    target: str | None = Field(default=None, description="probe_accuracy: the probed label, where a task has several.")
    note: str = Field(default="", description="Shown beside the comparison (e.g. 'pretrained Mamba-130M').")

    @model_validator(mode="after")
    def _fields_for_metric(self) -> Reference:
        need = {"claim": ("claim",), "accuracy": ("task", "arch"), "probe_accuracy": ("task", "arch", "layer")}
        missing = [f for f in need[self.metric] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"metric = {self.metric!r} needs {', '.join(missing)}")
        if not math.isfinite(self.value):
            raise ValueError(f"value must be a finite number, got {self.value}")
        return self


def parse_references(items: Any) -> list[Reference]:
    """Validate the ``[[reference]]`` tables; one-line errors name the entry and the field.

    Raises
    ------
    ExperimentError
        ``"reference #<i> (<source>): <field>: <problem>"``.
    """
    if not isinstance(items, list):
        raise ExperimentError("reference must be a list of [[reference]] tables")
    out = []
    for i, item in enumerate(items, 1):
        if isinstance(item, Reference):
            item = item.model_dump(exclude_unset=True)
        if not isinstance(item, dict):
            raise ExperimentError(f"reference #{i} is not a table; write it as a [[reference]] table")
        try:
            out.append(Reference(**item))
        except ValidationError as exc:
            name = f" ({item['source']})" if isinstance(item.get("source"), str) and item["source"] else ""
            raise ExperimentError(f"reference #{i}{name}: "
                                  f"{validation_problems(exc, Reference.model_fields)[0]}") from None
    return out


#: How the warning of a profile claim no seed split can decide begins (after its id).
UNTESTABLE_WORDS = "a profile_match claim cannot be supported"
#: That warning, as a pattern ``warnings.filterwarnings`` matches.
UNTESTABLE = f"claim .*: {UNTESTABLE_WORDS}"


class Experiment(CapturePlan):
    """A whole experiment file, validated: capture's sections, analysis settings, claims."""

    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig, description="Probes and interventions.")
    claims: list[Claim] = Field(
        default=[],
        description="Hypotheses declared before looking, checked against the grid when the file "
        "loads; evaluated by `layerstate run` and `layerstate stats`.",
    )
    reference: list[Reference] = Field(
        default=[],
        description="Values papers reported ([[reference]] tables), shown beside ours in the report; "
        "checked against the claims and the grid when the file loads.",
    )
    design: Design | None = Field(
        default=None,
        description="A group-sequential design over seeds ([design]: first_seeds, stage_seeds, max_seeds, "
        "spending, futility), declared before the first result; `layerstate sequential` decides the "
        "claims stage by stage on it (docs/sequential.md).",
    )
    _absent_claims: list[Claim] = PrivateAttr(default_factory=list)

    @field_validator("reference", mode="before")
    @classmethod
    def _parse_references(cls, value: Any) -> list[Reference]:
        return parse_references(value)

    @field_validator("claims", mode="before")
    @classmethod
    def _parse_claims(cls, value: Any) -> list[Claim]:
        if isinstance(value, list):  # Claim objects go through the same checks as tables
            value = [{**c.model_dump(exclude_unset=True), "kind": c.kind} if isinstance(c, ClaimBase) else c
                     for c in value]
        return parse_claims(value)

    @model_validator(mode="after")
    def _claims_fit_the_grid(self) -> Experiment:
        for claim in self.claims:
            if claim.metric in ("restoration", "patch_recovery") and not self.capture.counterfactual_pairs:
                raise ClaimError(
                    f"claim {claim.id!r}: {claim.metric} needs counterfactual pairs; set [capture] "
                    "counterfactual_pairs and counterfactual_lengths"
                )
            if claim.metric in ("ablation_drop", "refit_accuracy") and not self.analysis.ablate:
                raise ClaimError(f"claim {claim.id!r}: {claim.metric} needs ablations; set [analysis] ablate = true")
            if claim.metric == "patch_recovery" and not self.analysis.patch:
                raise ClaimError(f"claim {claim.id!r}: patch_recovery needs patching; set [analysis] patch = true")
            claim.check_levels(self.levels_for(claim))
            self._check_cells(claim)
            if claim.per_arch:
                self._warn_if_untestable(claim)
        ids = [c.id for c in self.claims]
        for i, ref in enumerate(self.reference, 1):
            self._check_reference(i, ref, ids)
        return self

    def warn_untestable(self) -> None:
        """Say again, for the seeds the experiment now reaches (a ``--design`` given since the
        file was read), which profile claims no seed split can decide (:meth:`_warn_if_untestable`)."""
        for claim in self.claims:
            if claim.per_arch:
                self._warn_if_untestable(claim)

    def _warn_if_untestable(self, claim: Claim) -> None:
        """A profile_match claim is decided by an exact permutation of whole seeds between two
        tasks; with few seeds no split can give a p below the level, whatever the data. Said
        when the file is read (before any training), not refused: the profiles are still
        reported, and the verdict will say why it is inconclusive."""
        archs = claim.archs or ([claim.arch] if claim.arch else [])
        # the most seeds its cells reach: the design's maximum for the fewest-seeded architecture
        n = min((self.design.cap(a) for a in archs), default=self.design.max_seeds) if self.design else len(
            self.grid.seeds)
        floor = attainable_min_p(n, n)
        if floor >= ALPHA:
            # Holm's first step tests at alpha / m: below that the claim is decided whatever the
            # file's other tests give (m: the family the whole file declares)
            m = family_share([*self.claims, *self._absent_claims])[0]
            warnings.warn(
                f"claim {claim.id!r}: {UNTESTABLE_WORDS} with {n} seeds per "
                f"task (the exact permutation test's smallest p is {floor:.3f}, not below {ALPHA:g}); "
                f"{seeds_for_profile_test(ALPHA)} or more seeds can decide it"
                + (f", {seeds_for_profile_test(ALPHA / m)} or more whatever the file's other tests give "
                   f"(Holm over its {m} tests)" if m > 1 else ""), stacklevel=2)

    def _check_cells(self, claim: Claim) -> None:
        """Refuse a claim that reads a (task, arch, variant) the grid has no run of: a variant
        a ``[variants]`` table restricts to other tasks or architectures; and one that reads the
        model's own readout (accuracy, ablation drop, patching, restoration) of an untrained
        baseline, whose readout is chance by construction."""
        compared = claim.compares and claim.compare == "variant"
        read = [v for v in (claim.treatment, claim.reference) if v] if compared else [claim.variant]
        if claim.reads() != registry.PROBES and claim.metric in _READOUT_METRICS:
            for variant in read:
                if variant is not None and not self.trains(variant):
                    raise ClaimError(
                        f"claim {claim.id!r}: {claim.metric} measures the model's own readout, which variant "
                        f"{variant!r} never trained (chance by construction); compare probe_accuracy or "
                        "refit_accuracy with the untrained baseline instead")
        if compared:
            variants = read
        elif claim.thresholded:
            variants = [claim.variant]
        else:
            return
        for variant in variants:
            if not self.has_runs(claim.task, claim.arch, variant):
                spec = self.variants.get(variant)
                where = (f"; [variants.{variant}] runs it for archs {', '.join(spec.archs or self.grid.archs)}"
                         f" on tasks {', '.join(spec.tasks or self.grid.tasks)}" if spec else "")
                raise ClaimError(f"claim {claim.id!r}: the grid has no run of task {claim.task!r}"
                                 f"{f', arch {claim.arch!r}' if claim.arch else ''} in variant {variant!r}{where}")

    def _check_reference(self, i: int, ref: Reference, ids: list[str]) -> None:
        def bad(field: str, level: object, levels: Collection[object], what: str) -> ExperimentError:
            shown = ", ".join(str(v) for v in levels) or "none"
            return ExperimentError(f"reference #{i} ({ref.source}): {field} {level!r} is not one of this "
                                   f"experiment's {what} ({shown})")

        if ref.claim is not None and ref.claim not in ids:
            raise bad("claim", ref.claim, ids, "claims")
        grid = self.grid
        for field, levels in (("task", grid.tasks), ("arch", grid.archs), ("variant", grid.variants)):
            level = getattr(ref, field)
            if level is not None and level not in levels:
                raise bad(field, level, levels, f"{field}s")
        lengths = (list(self.analysis.probe_lengths or self.capture.lengths) if ref.metric == "probe_accuracy"
                   else list(self.capture.lengths))
        if ref.length is not None and ref.metric != "claim" and ref.length not in lengths:
            raise bad("length", ref.length, lengths, "lengths")
        if ref.layer is not None and ref.arch is not None:
            layers = layer_names(ModelConfig(arch=ref.arch, **self.models.get(ref.arch, {})).n_layers)
            if ref.layer not in layers:
                raise bad("layer", ref.layer, layers, f"layers of {ref.arch}")

    @field_serializer("claims")
    def _claims_as_written(self, claims: list[Claim]) -> list[dict[str, Any]]:
        # the tables as declared (defaults left out), as the report shows them
        return [c.model_dump(mode="json", exclude_unset=True) for c in claims]

    @field_serializer("reference")
    def _references_as_written(self, refs: list[Reference]) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json", exclude_unset=True) for r in refs]

    def part(self, tasks: Collection[str]) -> Experiment:
        """This experiment restricted to ``tasks``: their runs (the same runs, configs and
        hashes as in the whole grid, so parts trained and analysed in different sittings are
        one experiment), the claims that read only those tasks, and the references to them.

        A grid too large for one sitting is run a task at a time this way
        (``layerstate run --task``); a claim comparing tasks (``profile_match``) is kept only
        by a part holding every task it names. An unknown task raises
        :class:`~store.errors.InvalidArgumentError` naming the grid's tasks."""
        unknown = [t for t in tasks if t not in self.grid.tasks]
        if unknown or not tasks:
            raise InvalidArgumentError(
                f"task {', '.join(unknown) or '(none)'} is not in the experiment's grid; its tasks: "
                f"{', '.join(self.grid.tasks)}")
        keep = [t for t in self.grid.tasks if t in tasks]
        claims = [c for c in self.claims if set(c.tasks()) <= set(keep)]
        ids = {c.id for c in claims}
        refs = [r for r in self.reference
                if (r.task is None or r.task in keep) and (r.claim is None or r.claim in ids)]
        title = self.experiment.title or self.experiment.name
        meta = self.experiment.model_copy(update={"title": f"{title} (part: {', '.join(keep)})"})
        part = self.model_copy(update={"grid": self.grid.model_copy(update={"tasks": keep}),
                                       "claims": claims, "reference": refs, "experiment": meta})
        part._absent_claims = [c for c in self.claims if c.id not in ids] + self._absent_claims
        return part

    @property
    def absent_claims(self) -> list[Claim]:
        """The declared claims a part (:meth:`part`) does not hold: they stay in the Holm
        families of the claims it evaluates (with p = 1), as the file declared one family."""
        return list(self._absent_claims)

    def work(self, stages: Collection[str] | None = None) -> list[Work]:
        """This experiment's units of work with their dependencies, in the order they run
        (:func:`layerstate.work.work_list`; ``stages``: only those, default all), what the
        executor (:mod:`layerstate.executor`) runs."""
        return work_list(self, stages=tuple(stages) if stages is not None else STAGES)

    @property
    def plan(self) -> CapturePlan:
        """Only the sections capture reads (already validated)."""
        return CapturePlan.model_construct(**{k: getattr(self, k) for k in CapturePlan.model_fields})

    def levels_for(self, claim: Claim) -> dict[str, Collection[str | int] | None]:
        """What ``claim`` may name in this experiment: factor -> levels (``None``: not checked).

        Lengths are those captured (counterfactual lengths for restoration, probed lengths for
        probe claims, ablated lengths for ablation metrics, the patched length for
        patch_recovery); sites are the interchange sites of the claim's task (its named
        counterfactual positions, else ``corrupt`` and ``label``, as
        :func:`analysis.interventions.interchange` picks them); layers are those of every
        architecture the claim reads; settings those of ``[analysis] ablate_settings`` (sweeps
        expanded: ``pca:1,4`` is ``pca:1`` and ``pca:4``); positions those patched.
        """
        grid, cap, ana = self.grid, self.capture, self.analysis
        if claim.metric == "restoration":
            lengths: list[int] = list(cap.counterfactual_lengths)
        elif claim.metric == "patch_recovery":
            lengths = [ana.patch_length]
        elif claim.metric in ("ablation_drop", "refit_accuracy"):
            lengths = list(ana.ablate_lengths or cap.lengths)
        elif claim.reads_probes or claim.metric == "probe_accuracy":
            lengths = list(ana.probe_lengths or cap.lengths)
        else:
            lengths = list(cap.lengths)
        sites = None
        if claim.metric == "restoration" and claim.task in grid.tasks and claim.length in lengths:
            sites = _interchange_sites(self.tasks.get(claim.task, {}), claim.task, claim.length)
        if claim.arch:
            archs = [claim.arch]
        elif claim.compare == "arch":
            archs = [a for a in (claim.treatment, claim.reference) if a]
        else:
            archs = list(claim.archs) or list(grid.archs)
        layers = None
        if archs and all(a in grid.archs for a in archs):
            per_arch = [layer_names(ModelConfig(arch=a, **self.models.get(a, {})).n_layers) for a in archs]
            layers = [lay for lay in per_arch[0] if all(lay in other for other in per_arch[1:])]
        return {"task": grid.tasks, "arch": grid.archs, "variant": grid.variants, "length": lengths,
                "site": sites, "layer": layers, "setting": _ablation_settings(ana.ablate_settings),
                "position": list(ana.patch_positions if ana.patch_positions is not None
                                 else range(ana.patch_length))}


#: Claim metrics read from the model's own readout: meaningless for an untrained baseline.
_READOUT_METRICS = frozenset({"accuracy", "ablation_drop", "patch_recovery", "restoration"})


def _ablation_settings(settings: list[str]) -> list[str]:
    """The setting names an ablation with ``settings`` stores (``pca:1,4`` -> ``pca:1``,
    ``pca:4``), as :func:`analysis.interventions.ablation.parse_settings` expands them."""
    out: list[str] = []
    for text in settings:
        method, _, ks = str(text).partition(":")
        if method != "matched" and ks and "," in ks:
            out += [f"{method}:{k.strip()}" for k in ks.split(",")]
        else:
            out.append(str(text))
    return list(dict.fromkeys(out))


def _interchange_sites(params: dict[str, Any], task: str, length: int) -> list[str]:
    """The sites an interchange result of ``task`` holds: the named positions of its
    counterfactual pairs (two drawn to read their names), else ``corrupt`` and ``label``."""

    pair = get_task(task, **params).counterfactual(  # type: ignore[attr-defined]
        np.random.default_rng(0), 2, length)
    return list(pair.sites) or ["corrupt", "label"]


def parse_experiment(data: dict[str, Any], source: str = "<experiment>") -> Experiment:
    """Validate an experiment (a dict as read from TOML), claims included.

    Raises
    ------
    ExperimentError
        One line naming ``source``, the field (or claim) and the problem.
    """
    return validate_model(Experiment, data, source)


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file, claims included.

    Raises
    ------
    ExperimentError
        One line naming the file, the field (or claim) and the problem.
    """
    path = Path(path)
    return parse_experiment(_read_toml(path, "experiment file"), source=str(path))


def load_claims(path: str | Path) -> list[Claim]:
    """The claims of a TOML file: an experiment (validated whole, so its claims are checked
    against its grid) or a file of ``[[claims]]`` tables only.

    Raises
    ------
    ExperimentError, ClaimError
        One line naming the file and the problem.
    """
    path = Path(path)
    data = _read_toml(path, "claims file")
    if "experiment" in data or "grid" in data:
        return parse_experiment(data, source=str(path)).claims
    claims = parse_claims(data.get("claims", []), source=str(path))
    if not claims:
        raise ClaimError(f"{path}: no [[claims]] tables; see experiments/quick.toml for examples")
    return claims


def load_design(path: str | Path) -> Design | None:
    """The ``[design]`` of a TOML file (an experiment or a claims file), or None without one.

    Raises
    ------
    ExperimentError, DesignError
        One line naming the file and the problem.
    """
    path = Path(path)
    data = _read_toml(path, "claims file")
    if "experiment" in data or "grid" in data:
        return parse_experiment(data, source=str(path)).design
    return Design.parse(data["design"], source=str(path)) if "design" in data else None


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ExperimentError(f"{what} {path} not found; see experiments/quick.toml for an example")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML ({exc})") from None
