"""The opt-in training speed options (issue 55): off, training is what it was; on, it is
recorded, deterministic and resumes bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capture.experiment import TrainConfig
from capture.models import ModelConfig, build_model
from capture.train import Stopping, check_trained_with, train_run, training_forward
from store import RunConflictError, Store
from tests.capture.compile_helpers import TRAIN, Graphs, compile_with, parity_model, parity_tokens
from tests.capture.test_train import _every_eval, _Stop, _stop_at, tiny_experiment


def _stops_at(cfg: TrainConfig, accuracies: list[float]) -> tuple[int, str] | None:
    """Feed a scripted held-out accuracy sequence; (index, reason) of the stop, or None."""
    rule = Stopping(cfg)
    for i, acc in enumerate(accuracies):
        reason = rule.update(acc)
        if reason is not None:
            return i, reason
    return None


CREEPING = [0.50, 0.60, 0.605, 0.611, 0.612, 0.613, 0.614]


def test_the_plateau_rule_stops_when_gains_stay_below_its_delta():
    # after 0.60, every evaluation gains under 0.02 over it: the third such one ends the run
    assert _stops_at(TrainConfig(patience=3, plateau_delta=0.02), CREEPING) == (4, "patience")
    # gains that add up past the delta reset the count: 0.611 is 0.011 over 0.60, and the
    # three after it gain under 0.01 over 0.611
    assert _stops_at(TrainConfig(patience=3, plateau_delta=0.01), CREEPING) == (6, "patience")


def test_without_a_delta_the_old_rule_is_unchanged():
    # every creeping gain is a gain: no stop; a dip counts against patience
    assert _stops_at(TrainConfig(patience=3), CREEPING) is None
    assert _stops_at(TrainConfig(patience=2), [0.5, 0.7, 0.69, 0.7]) == (3, "patience")
    assert _stops_at(TrainConfig(patience=2, target_accuracy=0.9), [0.5, 0.95]) == (1, "target")


def test_a_file_that_does_not_opt_in_records_what_it_did_before(tmp_path):
    st = Store.create(str(tmp_path / "a.zarr"))
    spec = tiny_experiment(steps=10).runs()[0]
    train_run(st, spec)
    attrs = st.run_attrs(spec.run_id)
    assert "compile" not in attrs["train_config"] and "plateau_delta" not in attrs["train_config"]
    assert "stopped_by" not in attrs["metrics"]
    on = tiny_experiment(steps=10, train={**spec.train.model_dump(), "plateau_delta": 0.01}).runs()[0]
    with pytest.raises(RunConflictError, match=r"plateau_delta: 0\.0 stored, 0\.01 now"):
        check_trained_with(st, spec.run_id, on.train)


def test_plateau_runs_record_the_rule_and_why_they_stopped(tmp_path):
    base = tiny_experiment(steps=60)
    spec = tiny_experiment(steps=60, train={**base.train.model_dump(), "plateau_delta": 0.5,
                                            "patience": 2}).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    result = train_run(st, spec)
    attrs = st.run_attrs(spec.run_id)
    assert attrs["train_config"]["plateau_delta"] == 0.5
    # no evaluation can gain 0.5 over the first: the run ends at the second evaluation after it
    assert result.steps == 30 and attrs["metrics"]["stopped_by"] == "patience"
    with pytest.raises(RunConflictError, match=r"plateau_delta: 0\.5 stored, 0\.0 now"):
        check_trained_with(st, spec.run_id, base.train)


# the model and batch shape of a parity run (tests.capture.compile_helpers): Mamba-2's kernels
# are those of the compiled run below, which then loads them from inductor's cache
@pytest.mark.parametrize("arch", ["transformer", "mamba", "mamba2"])
def test_the_compiled_forward_equals_eager_up_to_rounding(arch):
    model, tokens = parity_model(arch), parity_tokens()
    eager = model(tokens)
    grads = torch.autograd.grad(eager.square().sum(), list(model.parameters()))
    compiled = training_forward(model, TrainConfig(compile=True))(tokens)
    compiled_grads = torch.autograd.grad(compiled.square().sum(), list(model.parameters()))
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(compiled_grads, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert training_forward(model, TrainConfig()) is model  # off: the model itself


def test_compiled_plateau_training_is_deterministic_and_resumes_bit_for_bit(tmp_path):
    options = {**TRAIN, "compile": True, "plateau_delta": 0.001}
    base = tiny_experiment(arch="mamba2", steps=TRAIN["steps"], train=options)
    whole, again = Store.create(str(tmp_path / "whole.zarr")), Store.create(str(tmp_path / "again.zarr"))
    train_run(whole, base.runs()[0])
    train_run(again, base.runs()[0])

    spec = _every_eval(base).runs()[0]
    st = Store.create(str(tmp_path / "cut.zarr"))
    with pytest.raises(_Stop):  # killed at the evaluation of step 15: last checkpoint is 10
        train_run(st, spec, progress=_stop_at(15))
    assert st.read_checkpoint(spec.run_id).step == 10
    resumed = train_run(st, spec)
    assert resumed.resumed_at == (10,)
    ws = [s.read_weights(spec.run_id) for s in (whole, again, st)]
    assert all(list(w) == list(ws[0]) and all(np.array_equal(w[k], ws[0][k]) for k in w) for w in ws)
    metrics = [s.run_attrs(spec.run_id)["metrics"] for s in (whole, again, st)]
    assert all(m["curve"] == metrics[0]["curve"] and m["accuracy"] == metrics[0]["accuracy"] for m in metrics)
    assert [p["step"] for p in metrics[0]["curve"]] == [5, 10, 15, 20]
    assert whole.run_attrs(spec.run_id)["train_config"]["compile"] is True


def test_the_transformers_rotary_tables_stay_out_of_the_compiled_graph():
    # traced into the graph, inductor recomputed a sine and a cosine per element of every query
    # and key gradient, and GPT-NeoX's compiled step took 1.8x the eager one
    model = build_model(ModelConfig(arch="transformer", d_model=16, n_layers=2), vocab_size=4,
                        n_classes=3, seed=0).train()
    seen: list[str] = []

    def record(gm, _inputs):
        seen.extend(str(node.target) for node in gm.graph.nodes)
        return gm.forward

    tokens = torch.randint(0, 4, (3, 12), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    torch.compile(model, backend=record, dynamic=False)(tokens)
    torch._dynamo.reset()
    assert any("linear" in target for target in seen)  # the blocks were traced
    assert not any(name in target for target in seen for name in ("cos", "sin"))


def test_one_process_keeps_compiling_model_after_model(monkeypatch):
    # a worker trains run after run; were each new task's embedding and head shapes one more
    # compiled variant of the frames the models share, past dynamo's recompile limit (8 by
    # default; 2 here, so that four models pass it) a later run would run eager: each compiled
    # run starts from empty caches. The limit is dynamo's, whatever the backend: a counting
    # one, the same for every model as inductor is. (torch's own patch, not pytest's
    # monkeypatch: undone by the monkeypatch, dynamo's config hid the setting from every later
    # compile in the process)
    graphs = Graphs()
    compile_with(monkeypatch, graphs)
    torch._dynamo.reset()
    compiled = []
    with torch._dynamo.config.patch(recompile_limit=2):
        for vocab in range(3, 7):  # four tasks' vocabularies
            model = build_model(ModelConfig(arch="transformer", d_model=8, n_layers=1), vocab_size=vocab,
                                n_classes=2, seed=0)
            training_forward(model, TrainConfig(compile=True))(torch.randint(0, vocab, (2, 6))).sum().backward()
            compiled.append(graphs.count)
    torch._dynamo.reset()
    assert all(b > a for a, b in zip([0, *compiled], compiled, strict=False)), compiled  # each model compiled
