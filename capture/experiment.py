"""Experiments: a TOML file naming a grid of tasks x architectures x variants x seeds.

Every field is typed and documented (the docs become ``--help`` text and README tables);
rules spanning fields raise in one validator with the valid options listed. A run's
resolved config, and a hash of it, go into the store beside what it produced.

Example (``experiments/quick.toml``)::

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

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capture.tasks import TASKS, get_task

_STRICT = ConfigDict(extra="forbid", frozen=True)


class ExperimentError(ValueError):
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

    @model_validator(mode="after")
    def _choices(self) -> AnalysisConfig:
        if self.probe_positions not in ("all", "last", "pooled"):
            raise ValueError(f"probe_positions must be all, last or pooled, got {self.probe_positions!r}")
        if self.probe_control not in ("permute", "token"):
            raise ValueError(f"probe_control must be permute or token, got {self.probe_control!r}")
        if self.ablate_mode not in ("zero", "mean"):
            raise ValueError(f"ablate_mode must be zero or mean, got {self.ablate_mode!r}")
        if self.probe_method not in ("exact", "screen", "reference"):
            raise ValueError(f"probe_method must be exact, screen or reference, got {self.probe_method!r}")
        return self


class Experiment(BaseModel):
    """A whole experiment file, validated."""

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
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig, description="Probes and interventions.")
    claims: list[dict[str, Any]] = Field(default=[], description="Hypotheses evaluated by `layerstate stats`.")

    @model_validator(mode="after")
    def _names_are_known(self) -> Experiment:
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

    exp: Experiment
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
    return variant == "default" or arch in ("mamba", "mamba2")


def _known(what: str, names: list[str], valid: list[str]) -> None:
    for n in names:
        if n not in valid:
            raise ValueError(f"unknown {what} {n!r}; valid: {', '.join(valid)}")


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file.

    Raises
    ------
    ExperimentError
        One line naming the file, the field and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise ExperimentError(f"experiment file {path} not found; see experiments/quick.toml for an example")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML ({exc})") from None
    return parse_experiment(data, source=str(path))


def parse_experiment(data: dict[str, Any], source: str = "<experiment>") -> Experiment:
    try:
        return Experiment(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling against experiments/quick.toml"
        raise ExperimentError(f"{source}: {where + ': ' if where else ''}{msg}") from None
    except (KeyError, ValueError) as exc:
        raise ExperimentError(f"{source}: {exc}") from None
