"""What capture trains and records: the capture sections of an experiment file.

An experiment file (:mod:`layerstate.experiment`) describes the whole pipeline; capture
sees only the sections it acts on — ``[experiment]``, ``[grid]``, ``[train]``,
``[train_overrides]``, ``[tasks]``, ``[models]`` and ``[capture]`` — as a
:class:`CapturePlan`, so it never depends on analysis settings or claims (data flows
capture -> store -> analysis; docs/design.md).

Every field is typed and documented (the docs become ``--help`` text and README tables);
rules spanning fields raise in one validator with the valid options listed. A run's
resolved config, and a hash of it, go into the store beside what it produced.

Named variants (``[variants.<name>]``) say which model variant a grid variant builds, which
model settings it changes and for which architectures and tasks it runs, e.g. Mamba and
Based with a kernel-1 short convolution on AR only::

    [grid]
    variants = ["default", "no_conv", "conv_k1"]

    [variants.no_conv]                 # a model variant, restricted
    archs = ["mamba", "based"]

    [variants.conv_k1]                 # a new name: the default model with settings changed
    model = {conv_kernel = 1}
    archs = ["mamba", "based"]
    tasks = ["assoc_recall"]

An untrained baseline is a variant that is never trained: each of its runs stores the model
as initialised for its seed -- the same weights the trained run of that seed starts from --
and is then captured and probed like any other run, so a probe profile can be read against
the same architecture at initialisation::

    [grid]
    variants = ["default", "untrained"]

    [variants.untrained]               # train nothing; the run records untrained = true
    train = false

An example: ``experiments/quick.toml``, whose capture sections the docstring of
:mod:`layerstate.experiment` shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capture.models import ModelConfig, registry
from capture.models.config import SHARED_FIELDS, VARIANTS
from capture.tasks import TASKS, get_task
from store import LayerstateError
from store.errors import InvalidArgumentError, validation_problems

_STRICT = ConfigDict(extra="forbid", frozen=True)
M = TypeVar("M", bound=BaseModel)


class ExperimentError(LayerstateError, ValueError):
    """A malformed or inconsistent experiment file (one line, with the fix)."""


class ExperimentInfo(BaseModel):
    model_config = _STRICT
    name: str = Field(description="Short name; used in run ids and report titles.")
    title: str = Field(default="", description="One-line description for the report.")
    description: str = Field(default="", description="Longer free text for the report.")


class GridConfig(BaseModel):
    model_config = _STRICT
    tasks: list[str] = Field(description="Task names (see `layerstate tasks`).")
    archs: list[str] = Field(description="Architectures: transformer, mamba, mamba2, lstm, gru.")
    variants: list[str] = Field(default=["default"], description="Model variants, e.g. default, no_conv.")
    seeds: list[int] = Field(default=[0], description="Seeds; each is a separate trained run.")


class VariantConfig(BaseModel):
    """One ``[variants.<name>]`` table: what a grid variant builds and where it runs."""

    model_config = _STRICT
    base: str | None = Field(
        default=None,
        description="The model variant it builds: default or no_conv (default: the table's name "
        "when that is a model variant, else default).",
    )
    model: dict[str, Any] = Field(
        default={},
        description="Model settings it changes, over [models.<arch>], e.g. {conv_kernel = 1}.",
    )
    archs: list[str] | None = Field(
        default=None,
        description="Only these architectures (default: every grid architecture it applies to: "
        "a short convolution for no_conv, the fields `model` sets).",
    )
    tasks: list[str] | None = Field(default=None, description="Only these tasks (default: every grid task).")
    train: bool = Field(
        default=True,
        description="false: an untrained baseline -- the model as initialised for that seed (the "
        "trained run's own starting point), stored without a training step and then captured and "
        "probed like any run; its name must say so (untrained, untrained_no_conv, ...).",
    )


class TrainConfig(BaseModel):
    model_config = _STRICT
    length: int = Field(default=40, ge=2, description="Training sequence length.")
    steps: int = Field(default=1000, ge=1, description="Maximum optimiser steps.")
    batch_size: int = Field(default=64, ge=1, description="Sequences per step.")
    lr: float = Field(default=3e-3, gt=0, description="Peak AdamW learning rate.")
    weight_decay: float = Field(default=0.01, ge=0, description="AdamW weight decay.")
    warmup: int = Field(default=50, ge=0, description="Linear warm-up steps before the cosine decay.")
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient-norm clip.")
    eval_every: int = Field(default=50, ge=1, description="Steps between held-out evaluations.")
    n_eval: int = Field(default=256, ge=1, description="Held-out sequences for early stopping.")
    patience: int = Field(default=6, ge=1, description="Evaluations without improvement before stopping.")
    target_accuracy: float = Field(
        default=1.0, gt=0, le=1, description="Stop early once held-out accuracy reaches this."
    )
    eval_lengths: list[int] = Field(
        default=[40, 60, 80, 100, 120], description="Lengths at which final accuracy is measured."
    )
    n_test: int = Field(default=512, ge=1, description="Sequences per length for final accuracy.")
    threads: int = Field(default=1, ge=1, description="torch threads (1 is fastest for small models).")
    checkpoint_seconds: float = Field(
        default=300, ge=0,
        description="Seconds of training between checkpoints in the store (0: none); an "
                    "interrupted run resumes from its last one, with the same result.",
    )
    # Speed options (issue 55): off by default, so a file that does not set them trains as
    # before, bit for bit; one that does records them in its runs' [train] config.
    compile: bool = Field(
        default=False,
        description="Train through torch.compile (inductor; needs a C++ compiler): faster steps "
                    "for some architectures (docs/measured.md, 'Training speed'), float rounding "
                    "differs from eager; still deterministic, and a resumed run bit-identical.",
    )
    fused_kernels: bool = Field(
        default=False,
        description="Run Mamba and Mamba-2 through fused CPU kernels (numba; "
                    "capture/models/scan_kernels.py: their Conv1D, and Mamba's selective scan): "
                    "faster steps (docs/measured.md, 'Training speed'), float rounding differs from "
                    "the default path; still deterministic, and a resumed run bit-identical. Other "
                    "architectures are unaffected.",
    )
    fused_kernels_fma: bool = Field(
        default=False,
        description="With fused_kernels: Mamba's selective scan through the kernels' twins "
                    "compiled with fused multiply-adds (each a * b + c rounded once): faster steps "
                    "(docs/measured.md), another float rounding again; deterministic on a given CPU. "
                    "Mamba-2 and other architectures are unaffected.",
    )
    compile_through_kernels: bool = Field(
        default=False,
        description="With compile and fused_kernels: torch.compile traces through the fused "
                    "kernels (registered as torch operators) instead of splitting the step "
                    "into graphs around them: faster steps (docs/measured.md), another float "
                    "rounding of inductor's sums; deterministic, and a resumed run bit-identical.",
    )
    fused_adamw: bool = Field(
        default=False,
        description="AdamW through torch's fused kernel (one pass over all parameters instead of "
                    "a loop of tensor operations): a faster optimiser step (docs/measured.md), "
                    "float rounding differs; deterministic, and a resumed run bit-identical.",
    )
    plateau_delta: float = Field(
        default=0.0, ge=0, lt=1,
        description="A plateau rule: an evaluation resets `patience` only when it beats the best "
                    "held-out accuracy so far by more than this (0: by anything, the old rule); "
                    "the best weights are kept either way.",
    )

    @model_validator(mode="after")
    def _options_need_their_bases(self) -> TrainConfig:
        if self.fused_kernels_fma and not self.fused_kernels:
            raise ValueError("fused_kernels_fma = true needs fused_kernels = true (it picks among the "
                             "fused kernels): set both, or drop fused_kernels_fma")
        if self.compile_through_kernels and not (self.compile and self.fused_kernels):
            raise ValueError("compile_through_kernels = true needs compile = true and fused_kernels = "
                             "true (it is how the one compiles the other): set all three, or drop it")
        return self


class CaptureConfig(BaseModel):
    model_config = _STRICT
    lengths: list[int] = Field(default=[40, 60, 80, 100, 120], description="Lengths to capture.")
    n_sequences: int = Field(default=1024, ge=2, description="Evaluation sequences per length.")
    dtype: str = Field(default="float16", description="Storage dtype of hidden states: float16 or float32.")
    batch_size: int | None = Field(default=None, description="Sequences per forward pass (default: one store block).")
    sites: list[str] = Field(default=[], description="Extra activation sites by glob pattern, e.g. 'L*.cell'.")
    counterfactual_pairs: int = Field(default=0, ge=0, description="Clean/corrupted pairs per length for patching.")
    counterfactual_lengths: list[int] = Field(default=[40], description="Lengths at which pairs are captured.")


class CapturePlan(BaseModel):
    """The sections of an experiment that capture reads, validated: the grid of runs, how
    each is trained, and what is recorded."""

    model_config = _STRICT
    experiment: ExperimentInfo
    grid: GridConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    capture: CaptureConfig = Field(default_factory=CaptureConfig)
    tasks: dict[str, dict[str, Any]] = Field(
        default={}, description="Per-task parameters, e.g. [tasks.dyck] k = 2."
    )
    models: dict[str, dict[str, Any]] = Field(
        default={}, description="Per-architecture model settings, e.g. [models.mamba] d_model = 64."
    )
    train_overrides: dict[str, dict[str, Any]] = Field(
        default={},
        description=(
            "Per-task training settings, e.g. [train_overrides.s3] steps = 2000; a table named "
            "after an architecture inside it applies to that pair only: [train_overrides.s3.lstm]."
        ),
    )
    variants: dict[str, VariantConfig] = Field(
        default={},
        description="Named grid variants: [variants.conv_k1] model = {conv_kernel = 1}, "
        "archs = [...], tasks = [...] (see the module docstring).",
    )

    @model_validator(mode="after")
    def _names_are_known(self) -> CapturePlan:
        _known("task", self.grid.tasks, sorted(TASKS))
        _known("architecture", self.grid.archs, list(registry.names()))
        for section, names, valid in (
            ("tasks", self.tasks, self.grid.tasks),
            ("train_overrides", self.train_overrides, self.grid.tasks),
            ("models", self.models, self.grid.archs),
        ):
            for name in names:
                if name not in valid:
                    raise ValueError(
                        f"[{section}.{name}] names something not in the grid; grid has: {', '.join(valid)}"
                    )
        for task in self.grid.tasks:  # fails early on a bad task parameter
            get_task(task, **self.tasks.get(task, {}))
            for key, value in self.train_overrides.get(task, {}).items():
                if registry.known(key) and key not in self.grid.archs:
                    raise ValueError(
                        f"[train_overrides.{task}.{key}] names an architecture not in the grid; "
                        f"grid has: {', '.join(self.grid.archs)}"
                    )
                if registry.known(key) and not isinstance(value, dict):
                    raise ValueError(f"[train_overrides.{task}.{key}] must be a table of training settings")
            for arch in self.grid.archs:
                self.train_for(task, arch)
        self._check_variants()
        for arch in self.grid.archs:
            for variant in self.grid.variants:
                if self.variant_applies(arch, variant):
                    try:
                        ModelConfig(**self.model_settings(arch, variant))
                    except ValidationError as exc:
                        if variant not in self.variants:
                            raise
                        raise ValueError(f"[variants.{variant}] for {arch}: "
                                         f"{validation_problems(exc, ModelConfig.model_fields)[0]}") from None
        if len(set(self.grid.seeds)) != len(self.grid.seeds):
            raise ValueError(f"seeds repeat: {self.grid.seeds}")
        if self.capture.dtype not in ("float16", "float32"):
            raise ValueError(f"capture.dtype must be float16 or float32, got {self.capture.dtype!r}")
        return self

    def _check_variants(self) -> None:
        """The ``[variants]`` tables against the grid: names, bases, restrictions, settings."""
        grid = self.grid
        for name in grid.variants:
            if name.startswith(UNTRAINED) and name not in self.variants:
                raise ValueError(f"variant {name!r}: declare the untrained baseline with a [variants.{name}] "
                                 "table saying train = false")
            if not _VARIANT_NAME.fullmatch(name):
                raise ValueError(f"variant name {name!r} goes into run ids: use letters, digits and "
                                 "underscores only (e.g. conv_k1)")
            if name not in VARIANTS and name not in self.variants:
                raise ValueError(
                    f"variant {name!r} is not a model variant ({', '.join(VARIANTS)}); define it with a "
                    f"[variants.{name}] table, e.g. model = {{conv_kernel = 1}}"
                )
        if len(set(grid.variants)) != len(grid.variants):
            raise ValueError(f"variants repeat: {grid.variants}")
        for name, spec in self.variants.items():
            where = f"[variants.{name}]"
            if name not in grid.variants:
                raise ValueError(f"{where} names a variant not in the grid; grid has: {', '.join(grid.variants)}")
            # the name is what every table, figure and claim shows, so it must say untrained
            if not spec.train and not name.startswith(UNTRAINED):
                raise ValueError(f"{where} train = false: name an untrained baseline so every report says it, "
                                 f"e.g. [variants.{UNTRAINED}] or [variants.{UNTRAINED}_{name}]")
            if spec.train and name.startswith(UNTRAINED):
                raise ValueError(f"{where} is named untrained but trains: set train = false in it, or rename it")
            base = self.base_variant(name)
            if base not in VARIANTS:
                raise ValueError(f"{where} base {base!r} is not a model variant; valid: {', '.join(VARIANTS)}")
            for key in ("arch", "variant"):
                if key in spec.model:
                    fix = "the grid's archs and this table's archs" if key == "arch" else "base = ..."
                    raise ValueError(f"{where} model.{key}: not a setting a variant changes; use {fix}")
            for what, names, valid in (("archs", spec.archs, grid.archs), ("tasks", spec.tasks, grid.tasks)):
                for n in names or []:
                    if n not in valid:
                        kind = "architecture" if what == "archs" else "task"
                        raise ValueError(f"{where} {what}: {kind} {n!r} is not in the grid; grid has: "
                                         f"{', '.join(valid)}")
            for arch in spec.archs or []:
                if not _variant_applies(arch, base):
                    raise ValueError(f"{where} archs: {arch!r} has no short convolution for {base!r}; "
                                     f"drop it from archs")
                stray = [k for k in spec.model if k not in _settings_of(arch)]
                if stray:
                    raise ValueError(f"{where} archs: {arch!r} has no {', '.join(stray)}; drop it from "
                                     f"archs or the setting from model")
            if not any(self.variant_applies(a, name, t) for a in grid.archs for t in grid.tasks):
                raise ValueError(f"{where} selects no run of the grid (archs {', '.join(grid.archs)}); "
                                 "name architectures it applies to in archs")

    # ------------------------------------------------------------------ the grid
    def base_variant(self, variant: str) -> str:
        """The model variant (``default``/``no_conv``) a grid variant builds."""
        spec = self.variants.get(variant)
        if spec is not None and spec.base is not None:
            return spec.base
        return variant if variant in VARIANTS else "default"

    def variant_applies(self, arch: str, variant: str, task: str | None = None) -> bool:
        """Whether the grid has runs of ``variant`` for ``arch`` (and ``task``, when given):
        its ``[variants]`` table's archs and tasks, else every architecture it applies to
        (``no_conv``: those with a short convolution; settings: those that have them)."""
        spec = self.variants.get(variant)
        if spec is not None:
            if spec.archs is not None and arch not in spec.archs:
                return False
            if spec.tasks is not None and task is not None and task not in spec.tasks:
                return False
            if any(k not in _settings_of(arch) for k in spec.model):
                return False
        return _variant_applies(arch, self.base_variant(variant))

    def trains(self, variant: str) -> bool:
        """Whether runs of ``variant`` are trained (False: an untrained baseline,
        ``[variants.<name>] train = false``)."""
        spec = self.variants.get(variant)
        return spec is None or spec.train

    def model_settings(self, arch: str, variant: str) -> dict[str, Any]:
        """The :class:`~capture.models.ModelConfig` fields of ``arch`` in ``variant``:
        [models.<arch>], then the variant's base and ``model`` settings."""
        spec = self.variants.get(variant)
        extra = spec.model if spec is not None else {}
        return {**self.models.get(arch, {}), **extra, "arch": arch, "variant": self.base_variant(variant)}

    def has_runs(self, task: str | None = None, arch: str | None = None, variant: str | None = None) -> bool:
        """Whether any run of the grid matches (``None``: any level)."""
        return any((task is None or r.task == task) and (arch is None or r.arch == arch)
                   and (variant is None or r.variant == variant) for r in self.runs())

    def runs(self) -> list[RunSpec]:
        """Every run of the grid. Variants that do not apply to an architecture (no_conv for
        an LSTM), or that a ``[variants]`` table restricts to other architectures or tasks,
        are skipped rather than duplicated."""
        out = []
        for task in self.grid.tasks:
            for arch in self.grid.archs:
                for variant in self.grid.variants:
                    if not self.variant_applies(arch, variant, task):
                        continue
                    for seed in self.grid.seeds:
                        out.append(RunSpec(exp=self, task=task, arch=arch, variant=variant, seed=seed))
        return out

    def select(self, *, runs: Sequence[str] = (), tasks: Sequence[str] = (), archs: Sequence[str] = (),
               seeds: Sequence[int] = ()) -> list[RunSpec]:
        """The runs of the grid that a part of it names, in grid order: run ids, or any of
        tasks, architectures and seeds (each empty: every value). A grid can then be trained
        in parts (seed 0 of every cell first, say) into one store; the runs' configs and
        hashes are those of the whole grid, so the parts are one experiment.

        A name the grid does not have raises :class:`InvalidArgumentError` listing the
        grid's values."""
        every = self.runs()
        for what, asked, have in (("run", runs, [r.run_id for r in every]), ("task", tasks, self.grid.tasks),
                                  ("arch", archs, self.grid.archs), ("seed", seeds, self.grid.seeds)):
            unknown = [x for x in asked if x not in have]
            if unknown:
                more = ("; to train more seeds, list them in the experiment's [grid] seeds, or let "
                        "`layerstate run EXPERIMENT --out DIR --design DESIGN` add them stage by stage "
                        "(only to the cells its claims need)") if what == "seed" else ""
                raise InvalidArgumentError(
                    f"{what} {', '.join(map(str, unknown))} is not in the experiment's grid; "
                    f"its {what}s: {', '.join(map(str, have))}{more}")
        return [r for r in every
                if (not runs or r.run_id in runs) and (not tasks or r.task in tasks)
                and (not archs or r.arch in archs) and (not seeds or r.seed in seeds)]

    def train_for(self, task: str, arch: str | None = None) -> TrainConfig:
        """The training settings of ``task`` (and ``arch``): [train], then
        [train_overrides.<task>], then [train_overrides.<task>.<arch>]."""
        per_task = dict(self.train_overrides.get(task, {}))
        per_arch = {k: per_task.pop(k) for k in list(per_task) if registry.known(k)}
        return TrainConfig(**{**self.train.model_dump(), **per_task, **per_arch.get(arch or "", {})})


@dataclass(frozen=True)
class RunSpec:
    """One cell of the grid: what to train and how."""

    exp: CapturePlan
    task: str
    arch: str
    variant: str
    seed: int

    @property
    def run_id(self) -> str:
        return f"{self.task}-{self.arch}-{self.variant}-s{self.seed}"

    def task_config(self):
        return get_task(self.task, **self.exp.tasks.get(self.task, {}))

    def model_config(self):
        return ModelConfig(**self.exp.model_settings(self.arch, self.variant))

    @property
    def train(self) -> TrainConfig:
        return self.exp.train_for(self.task, self.arch)

    @property
    def untrained(self) -> bool:
        """An untrained baseline: stored as initialised, never trained (``train = false``)."""
        return not self.exp.trains(self.variant)


def _variant_applies(arch: str, variant: str) -> bool:
    """A variant other than ``default`` (``no_conv``) applies to the architectures with a short
    convolution only; the grid skips the others."""
    return variant == "default" or registry.architecture(arch).conv


_VARIANT_NAME = re.compile(r"[A-Za-z0-9_]+")
#: How an untrained baseline's name begins (``untrained``, ``untrained_no_conv``).
UNTRAINED = "untrained"


def _settings_of(arch: str) -> set[str]:
    """The ModelConfig fields ``arch`` uses: its size fields and those every arch has."""
    shared = set(SHARED_FIELDS) - {"arch", "variant"}
    return shared | set(registry.architecture(arch).sizes)


def _known(what: str, names: list[str], valid: list[str]) -> None:
    for n in names:
        if n not in valid:
            raise ValueError(f"unknown {what} {n!r}; valid: {', '.join(valid)}")


def validate_model(model: type[M], data: dict[str, Any], source: str) -> M:
    """``model(**data)``, or one :class:`ExperimentError` line naming ``source``, the field
    and the problem. A project error raised by a validator (e.g. a claim's) keeps its text."""
    try:
        return model(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, LayerstateError):
            raise ExperimentError(f"{source}: {cause}") from None
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling against experiments/quick.toml"
        raise ExperimentError(f"{source}: {where + ': ' if where else ''}{msg}") from None
    except (KeyError, ValueError) as exc:
        raise ExperimentError(f"{source}: {exc}") from None


def parse_plan(data: dict[str, Any], source: str = "<experiment>") -> CapturePlan:
    """Validate the capture sections of an experiment (a dict as read from TOML).

    Raises
    ------
    ExperimentError
        One line naming ``source``, the field and the problem.
    """
    return validate_model(CapturePlan, data, source)
