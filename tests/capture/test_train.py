"""Training: deterministic per seed, stored as arrays, skipped when done, rebuilt exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capture.experiment import parse_plan as parse_experiment
from capture.train import rebuild_model, train_run
from store import MissingError, RunConflictError, Store
from store.integrity.validation import validate


def tiny_experiment(task="parity", arch="lstm", steps=20, **over):
    data = {
        "experiment": {"name": "tiny"},
        "grid": {"tasks": [task], "archs": [arch], "seeds": [0]},
        "train": {"steps": steps, "batch_size": 16, "eval_every": 10, "n_eval": 32,
                  "eval_lengths": [12, 24], "n_test": 32, "length": 12, "warmup": 2},
        "models": {arch: {"d_model": 16, "n_layers": 2}},
    }
    data.update(over)
    return parse_experiment(data)


def test_same_seed_same_weights_and_everything_is_stored(tmp_path):
    spec = tiny_experiment().runs()[0]
    a, b = Store.create(str(tmp_path / "a.zarr")), Store.create(str(tmp_path / "b.zarr"))
    ra, rb = train_run(a, spec), train_run(b, spec)
    wa, wb = a.read_weights(ra.run_id), b.read_weights(rb.run_id)
    assert list(wa) == list(wb) and all(np.array_equal(wa[k], wb[k]) for k in wa)
    attrs = a.run_attrs(ra.run_id)
    assert attrs["status"] == "trained" and attrs["task"] == "parity" and attrs["arch"] == "lstm"
    assert set(attrs["metrics"]["accuracy"]) == {"12", "24"}
    assert attrs["metrics"]["curve"][0]["step"] == 10
    assert attrs["model_config"]["hidden_size"] == 20  # sizes resolved and recorded
    assert attrs["train_config"]["steps"] == 20 and len(attrs["config_hash"]) == 16


def test_rerun_skips_a_trained_run(tmp_path):
    spec = tiny_experiment().runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    first = train_run(st, spec)
    again = train_run(st, spec)
    assert again.skipped and not first.skipped and again.accuracy == first.accuracy


def test_changed_config_is_refused_not_overwritten(tmp_path):
    st = Store.create(str(tmp_path / "a.zarr"))
    train_run(st, tiny_experiment().runs()[0])
    changed = tiny_experiment(models={"lstm": {"d_model": 8, "n_layers": 2}}).runs()[0]
    with pytest.raises(RunConflictError, match="different config"):
        train_run(st, changed)


def test_a_changed_training_budget_is_refused_not_silently_reused(tmp_path):
    """The config hash leaves [train] out; rerunning with more steps must not return the
    old models as if they were trained with the new budget (train or capture)."""
    from layerstate.pipeline import capture_experiment

    st = Store.create(str(tmp_path / "a.zarr"))
    train_run(st, tiny_experiment().runs()[0])
    longer = tiny_experiment(steps=40)
    with pytest.raises(RunConflictError, match=r"different \[train\] config \(steps: 20 stored, 40 now\).*new store"):
        train_run(st, longer.runs()[0])
    with pytest.raises(RunConflictError, match=r"steps: 20 stored, 40 now"):
        capture_experiment(longer, str(st.location))
    # torch threads change only the speed: still the same run
    base = tiny_experiment()
    more_threads = tiny_experiment(train={**base.train.model_dump(), "threads": 2})
    assert train_run(st, more_threads.runs()[0]).skipped


def test_rebuilt_model_reproduces_the_trained_one(tmp_path):
    spec = tiny_experiment(arch="transformer", steps=5).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    train_run(st, spec)
    m1, m2 = rebuild_model(st, spec.run_id), rebuild_model(Store.open(str(st.location)), spec.run_id)
    tok = torch.randint(0, 2, (3, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(m1(tok), m2(tok), rtol=0, atol=0)


def test_rebuilding_an_untrained_run_names_the_command(tmp_path):
    st = Store.create(str(tmp_path / "a.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    with pytest.raises(MissingError, match="layerstate train"):
        rebuild_model(st, "r0")


def test_train_run_restores_the_callers_torch_thread_count(tmp_path):
    spec = tiny_experiment().runs()[0]  # [train] threads = 1
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train_run(Store.create(str(tmp_path / "a.zarr")), spec)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


class _Stop(Exception):
    pass


def _stop_at(step_to_stop):
    def progress(step, point):
        if step == step_to_stop:
            raise _Stop
    return progress


def _every_eval(base):
    """The same experiment, checkpointing at every evaluation (the clock always says due)."""
    return tiny_experiment(arch=base.grid.archs[0], steps=base.train.steps,
                           train={**base.train.model_dump(), "checkpoint_seconds": 1e-9},
                           models=base.models)


@pytest.mark.parametrize("arch", ["lstm", "mamba"])
def test_an_interrupted_run_resumes_to_the_same_weights_bit_for_bit(tmp_path, arch):
    base = tiny_experiment(arch=arch, steps=40, train={
        "steps": 40, "batch_size": 16, "eval_every": 10, "n_eval": 32, "eval_lengths": [12],
        "n_test": 32, "length": 12, "warmup": 2, "patience": 10, "checkpoint_seconds": 0})
    whole = Store.create(str(tmp_path / "whole.zarr"))
    train_run(whole, base.runs()[0])

    spec = _every_eval(base).runs()[0]
    st = Store.create(str(tmp_path / "cut.zarr"))
    with pytest.raises(_Stop):  # killed at the evaluation of step 30: last checkpoint is 20
        train_run(st, spec, progress=_stop_at(30))
    saved = st.read_checkpoint(spec.run_id)
    assert saved is not None and saved.step == 20 and not st.has_weights(spec.run_id)
    assert {"model", "optimizer", "rng", "best"} <= set(saved.arrays)
    assert validate(str(st.location)).ok  # an unfinished training is a legal store state
    resumed = train_run(st, spec)
    assert not resumed.skipped and resumed.steps == 40 and resumed.resumed_at == (20,)
    from layerstate.present import training_line

    assert "40 steps" in training_line(resumed, 1, 1) and "(resumed from step 20)" in training_line(resumed, 1, 1)
    wa, wb = whole.read_weights(spec.run_id), st.read_weights(spec.run_id)
    assert list(wa) == list(wb) and all(np.array_equal(wa[k], wb[k]) for k in wa)
    a, b = whole.run_attrs(spec.run_id)["metrics"], st.run_attrs(spec.run_id)["metrics"]
    assert a["curve"] == b["curve"] and a["accuracy"] == b["accuracy"]
    assert b["resumed_at_steps"] == [20] and "resumed_at_steps" not in a
    assert st.read_checkpoint(spec.run_id) is None  # finished: the checkpoint is gone
    assert validate(str(st.location)).ok


def test_ctrl_c_stops_at_the_steps_end_checkpointed_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    """SIGINT in the middle of step 13 (not an evaluation step, no checkpoint due): the step
    ends, a checkpoint of step 13 is saved, KeyboardInterrupt; resumed, the weights are those
    of a run never stopped."""
    import signal

    from capture import interrupt, train

    base = tiny_experiment(steps=30, train={
        "steps": 30, "batch_size": 16, "eval_every": 10, "n_eval": 32, "eval_lengths": [12],
        "n_test": 32, "length": 12, "warmup": 2, "checkpoint_seconds": 300})
    spec = base.runs()[0]
    whole = Store.create(str(tmp_path / "whole.zarr"))
    train_run(whole, spec)
    calls, loss = [0], train.masked_loss_and_accuracy

    def counted(*args):
        calls[0] += 1
        if calls[0] == 13:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C would, mid-step
        return loss(*args)

    monkeypatch.setattr(train, "masked_loss_and_accuracy", counted)
    monkeypatch.setattr(interrupt.StopRequest, "pending", False)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, as in a background job
    try:
        st = Store.create(str(tmp_path / "cut.zarr"))
        with pytest.raises(KeyboardInterrupt):
            train_run(st, spec)
    finally:
        signal.signal(signal.SIGINT, before)
    assert signal.getsignal(signal.SIGINT) is before and not interrupt.StopRequest.pending  # not a training process
    saved = st.read_checkpoint(spec.run_id)
    assert saved is not None and saved.step == 13 and not st.has_weights(spec.run_id)
    monkeypatch.setattr(train, "masked_loss_and_accuracy", loss)
    resumed = train_run(st, spec)
    assert resumed.resumed_at == (13,)
    wa, wb = whole.read_weights(spec.run_id), st.read_weights(spec.run_id)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert whole.run_attrs(spec.run_id)["metrics"]["curve"] == st.run_attrs(spec.run_id)["metrics"]["curve"]


def test_a_checkpoint_of_another_training_config_is_not_resumed(tmp_path):
    base = tiny_experiment(steps=30)
    spec = _every_eval(base).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    with pytest.raises(_Stop):
        train_run(st, spec, progress=_stop_at(20))
    assert st.read_checkpoint(spec.run_id).step == 10
    other_lr = tiny_experiment(steps=30, train={**spec.train.model_dump(), "lr": 1e-3}).runs()[0]
    fresh = Store.create(str(tmp_path / "fresh.zarr"))
    train_run(fresh, other_lr)
    train_run(st, other_lr)  # starts over under the new config
    wa, wb = fresh.read_weights(spec.run_id), st.read_weights(spec.run_id)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert "resumed_at_steps" not in st.run_attrs(spec.run_id)["metrics"]


def test_inspect_shows_where_an_interrupted_training_stands(tmp_path):
    from store.inspect import format_summary, summary

    spec = _every_eval(tiny_experiment(steps=30)).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    with pytest.raises(_Stop):
        train_run(st, spec, progress=_stop_at(20))
    info = summary(Store.open(str(st.location)))  # read-only, from the consolidated snapshot
    t = info["runs"][spec.run_id]["training"]
    assert t["step"] == 10 and t["steps"] == 30 and 0 <= t["valid_accuracy"] <= 1
    assert "training: checkpoint at step 10 of 30" in format_summary(info)
    # 20 steps to go at the pace of the first 10
    assert t["seconds_left"] == pytest.approx(t["train_seconds"] / 10 * 20)
    assert f"about {t['seconds_left']:.0f}s of training left" in format_summary(info)
    train_run(st, spec)
    assert summary(Store.open(str(st.location)))["runs"][spec.run_id]["training"] is None
