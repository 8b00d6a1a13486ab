"""What the tests that compile share. A compile's cost is inductor's (C++ per distinct kernel,
~15-50 s a model on CI's two cores, cached on disk by the kernel's source), not the model's
size: so the tests that need inductor's own numerics compile the model that a tiny parity run
trains, at that run's batch shape, and share its kernels with the training tests of the same
model; the tests about dynamo's graphs, guards, resets and recompiles (backend-independent)
compile with :class:`Graphs`, which runs the graphs as traced."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from capture.models import build_model
from tests.capture.test_train import tiny_experiment

#: The ``[train]`` table of the compiled (and fused) training tests: a run of 20 steps,
#: evaluated every 5, on batches of 8 sequences of 8 tokens, the shape the tests below compile at
TRAIN = {"steps": 20, "batch_size": 8, "eval_every": 5, "n_eval": 16, "eval_lengths": [8], "n_test": 16,
         "length": 8, "warmup": 2, "patience": 10, "checkpoint_seconds": 0}


def parity_model(arch: str) -> torch.nn.Module:
    """The freshly initialised model a tiny parity run of `arch` trains, in training mode."""
    spec = tiny_experiment(arch=arch).runs()[0]
    task = spec.task_config()
    return build_model(spec.model_config(), vocab_size=task.vocab_size, n_classes=task.n_classes[task.target],
                       seed=0).train()


def parity_tokens(seed: int = 1) -> torch.Tensor:
    """A batch of parity tokens in the shape a `TRAIN` run's steps compile at."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (TRAIN["batch_size"], TRAIN["length"]), generator=g)


class Graphs:
    """A ``torch.compile`` backend that counts the graphs it is given (``count``) and the graph
    calls made (``runs``), and runs them as traced."""

    def __init__(self) -> None:
        self.count = 0
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.count += 1

        def run(*args):
            self.runs += 1
            return gm.forward(*args)

        return run


def compile_with(monkeypatch: pytest.MonkeyPatch, backend: Callable | str) -> None:
    """Make ``torch.compile``, as `capture.train.training_forward` calls it, use `backend`.
    One backend object for all the compiles of a test: dynamo reuses a frame compiled for one
    backend only under that same backend, as every compile of a real run uses inductor."""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **options: compile_(model, backend=backend, **options))
