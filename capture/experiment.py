"""What capture trains and records: the capture sections of an experiment file.

An experiment file (:mod:`layerstate.experiment`) describes the whole pipeline; capture
sees only the sections it acts on — ``[experiment]``, ``[grid]``, ``[train]``,
``[train_overrides]``, ``[tasks]``, ``[models]`` and ``[capture]`` — as a
:class:`CapturePlan`, so it never depends on analysis settings or claims (data flows
capture -> store -> analysis; docs/design.md).

Every field is typed and documented (the docs become ``--help`` text and README tables);
rules spanning fields raise in one validator with the valid options listed. A run's
resolved config, and a hash of it, go into the store beside what it produced.

Example (the capture sections of ``experiments/quick.toml``)::

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capture.tasks import TASKS, get_task
from store import LayerstateError

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

    @model_validator(mode="after")
    def _names_are_known(self) -> CapturePlan:
        from capture.models import ARCHS, ModelConfig

        _known("task", self.grid.tasks, sorted(TASKS))
        _known("architecture", self.grid.archs, list(ARCHS))
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
                if key in ARCHS and key not in self.grid.archs:
                    raise ValueError(
                        f"[train_overrides.{task}.{key}] names an architecture not in the grid; "
                        f"grid has: {', '.join(self.grid.archs)}"
                    )
                if key in ARCHS and not isinstance(value, dict):
                    raise ValueError(f"[train_overrides.{task}.{key}] must be a table of training settings")
            for arch in self.grid.archs:
                self.train_for(task, arch)
        for arch in self.grid.archs:
            for variant in self.grid.variants:
                if _variant_applies(arch, variant):
                    ModelConfig(arch=arch, variant=variant, **self.models.get(arch, {}))
        if len(set(self.grid.seeds)) != len(self.grid.seeds):
            raise ValueError(f"seeds repeat: {self.grid.seeds}")
        if self.capture.dtype not in ("float16", "float32"):
            raise ValueError(f"capture.dtype must be float16 or float32, got {self.capture.dtype!r}")
        return self

    # ------------------------------------------------------------------ the grid
    def runs(self) -> list[RunSpec]:
        """Every run of the grid. Variants that do not apply to an architecture (no_conv for
        an LSTM) are skipped rather than duplicated."""
        out = []
        for task in self.grid.tasks:
            for arch in self.grid.archs:
                for variant in self.grid.variants:
                    if not _variant_applies(arch, variant):
                        continue
                    for seed in self.grid.seeds:
                        out.append(RunSpec(exp=self, task=task, arch=arch, variant=variant, seed=seed))
        return out

    def train_for(self, task: str, arch: str | None = None) -> TrainConfig:
        """The training settings of ``task`` (and ``arch``): [train], then
        [train_overrides.<task>], then [train_overrides.<task>.<arch>]."""
        from capture.models import ARCHS

        per_task = dict(self.train_overrides.get(task, {}))
        per_arch = {k: per_task.pop(k) for k in list(per_task) if k in ARCHS}
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
        from capture.models import ModelConfig

        return ModelConfig(arch=self.arch, variant=self.variant, **self.exp.models.get(self.arch, {}))

    @property
    def train(self) -> TrainConfig:
        return self.exp.train_for(self.task, self.arch)


def _variant_applies(arch: str, variant: str) -> bool:
    """A variant other than ``default`` (``no_conv``) applies to the architectures with a short
    convolution only; the grid skips the others."""
    from capture.models.config import CONV_ARCHS

    return variant == "default" or arch in CONV_ARCHS


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
