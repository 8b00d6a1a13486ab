"""Every stage follows ``device``: run on the ``meta`` device (tests/capture/meta_device.py),
any tensor built on the CPU beside the model's fails as it would on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capture.device import parse_device
from capture.experiment import TrainConfig
from capture.models import BUILTIN_ARCHS as ARCHS
from capture.models import ModelConfig, build_model
from capture.tasks import get_task
from capture.train import Checkpointer, fit, masked_loss_and_accuracy, train_run
from store import Store
from tests.capture.meta_device import HostReads
from tests.capture.test_train import tiny_experiment

pytestmark = pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter:UserWarning")

TINY = {"d_model": 16, "n_layers": 2}


def _tiny_model(arch: str, task):
    return build_model(ModelConfig(arch=arch, **TINY), task.vocab_size, task.n_classes[task.target], seed=0)


def test_the_loss_builds_labels_and_mask_on_the_logits_device():
    task = get_task("parity")
    batch = task.generate(np.random.default_rng(0), 4, 6)
    logits = torch.zeros((4, 6, 2), device="meta", requires_grad=True)
    with HostReads():
        loss, _ = masked_loss_and_accuracy(logits, batch)
    assert loss.device.type == "meta"


def test_the_harness_catches_a_tensor_left_on_the_cpu():
    """The check itself: a CPU target against meta logits fails as it does on a GPU."""
    logits = torch.zeros((3, 2), device="meta")
    with HostReads(), pytest.raises(RuntimeError, match="device"):
        torch.nn.functional.cross_entropy(logits, torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("arch", ARCHS)
def test_training_runs_on_another_device_for_every_architecture(arch):
    task = get_task("parity")
    model = _tiny_model(arch, task)
    cfg = TrainConfig(steps=2, batch_size=4, length=6, n_eval=4, eval_every=1, warmup=1)
    with HostReads():
        curve, steps = fit(model.to("meta"), task, cfg, 0)  # trains where the model is
    assert steps == 2 and len(curve) == 2
    assert all(p.device.type == "meta" for p in model.parameters())


def test_a_checkpoint_saved_and_resumed_on_another_device(tmp_path):
    """Saving moves state to the host; resuming puts weights, AdamW moments and the
    schedule back beside the model's parameters."""
    spec = tiny_experiment(arch="lstm", steps=4).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    st.add_run(spec.run_id, task=spec.task, arch=spec.arch, variant=spec.variant, seed=spec.seed,
               model_config=spec.model_config().model_dump(), task_config=spec.task_config().model_dump())
    task = spec.task_config()
    cfg = TrainConfig(steps=4, batch_size=4, length=6, n_eval=4, eval_every=1, warmup=1,
                      patience=10, checkpoint_seconds=1e-9)
    clock = iter(range(10**6))
    with HostReads():
        model = _tiny_model("lstm", task).to("meta")
        ck = Checkpointer(st, spec.run_id, cfg, clock=lambda: float(next(clock)))

        def stop(step, point):
            if step == 3:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            fit(model, task, cfg, 0, checkpoint=ck, progress=stop)
        saved = st.read_checkpoint(spec.run_id)
        assert saved is not None and saved.step == 2
        model = _tiny_model("lstm", task).to("meta")
        ck = Checkpointer(st, spec.run_id, cfg, clock=lambda: float(next(clock)))
        curve, steps = fit(model, task, cfg, 0, checkpoint=ck)
    assert steps == 4 and ck.resumed_at == [2] and [p["step"] for p in curve] == [1, 2, 3, 4]


def test_train_run_records_its_device(tmp_path):
    spec = tiny_experiment(arch="gru", steps=2).runs()[0]
    st = Store.create(str(tmp_path / "a.zarr"))
    with HostReads():
        train_run(st, spec, device="meta")
    assert st.run_attrs(spec.run_id)["device"] == "meta"


@pytest.mark.parametrize("arch", ["transformer", "mamba2", "lstm"])
def test_interventions_follow_the_models_device(tmp_path, arch):
    """Resuming from a stored layer and the hook-based patching reference run beside a model
    rebuilt on another device (the cells of ablate, patch and interchange)."""
    import xarray as xr

    from analysis.interventions import rebuild
    from analysis.interventions.engine import open_plan
    from analysis.interventions.patch_kernels import patched_logits, patched_logits_reference
    from capture.record import capture_counterfactuals

    spec = tiny_experiment(task="dyck", arch=arch, steps=2,
                           models={arch: {"d_model": 16, "n_layers": 2}}).runs()[0]
    st = Store.create(str(tmp_path / "s.zarr"))
    train_run(st, spec)
    capture_counterfactuals(st, spec.run_id, 12, n_pairs=6)
    clean = st.open_length(spec.run_id, 12, kind="cfclean")
    bad = st.open_length(spec.run_id, 12, kind="cfcorrupt")
    patch = xr.DataArray(np.ones((6, 12), bool), dims=("sequence", "position"))
    with HostReads():
        model = rebuild(st, spec.run_id, "meta")
        for fn in (patched_logits, patched_logits_reference):
            out = fn(model, clean, bad, "L0", patch)
            assert out.shape[:2] == (6, 12)
    plan = open_plan(st, [spec.run_id], [("cfclean", 12)], None, layers_at=("cfclean", 12))
    plan.device = parse_device("meta")
    with HostReads():
        assert plan.model(spec.run_id).compute().module.embedding.weight.device.type == "meta"


def test_a_pretrained_checkpoint_is_evaluated_on_its_device(tmp_path):
    """Without fine-tuning the model must still move to the device before it is evaluated.
    (Fine-tuning a transformers checkpoint cannot run on ``meta``: its ``train()`` asks the
    ``kernels`` hub for the device's kernels, which knows no ``meta``; fine-tuning is
    :func:`fit`, tested above.)"""
    from transformers import GPTNeoXConfig, GPTNeoXModel

    from capture.pretrained import add_pretrained_run

    path = tmp_path / "tiny-pythia"
    cfg = GPTNeoXConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, bos_token_id=None,
                        eos_token_id=None)
    GPTNeoXModel(cfg).save_pretrained(path)
    st = Store.create(str(tmp_path / "s.zarr"))
    with HostReads():
        rid = add_pretrained_run(st, path, "p", task="dyck", device="meta")
    assert st.run_attrs(rid)["device"] == "meta"


def test_a_noised_twin_follows_the_models_device(tmp_path):
    from analysis.interventions import rebuild
    from analysis.interventions.noise import noised_twin
    from capture.record import capture_counterfactuals

    spec = tiny_experiment(task="dyck", arch="gru", steps=2,
                           models={"gru": {"d_model": 16, "n_layers": 2}}).runs()[0]
    st = Store.create(str(tmp_path / "s.zarr"))
    train_run(st, spec)
    capture_counterfactuals(st, spec.run_id, 12, n_pairs=6)
    clean = st.open_length(spec.run_id, 12, kind="cfclean")
    with HostReads():
        twin = noised_twin(rebuild(st, spec.run_id, "meta"), clean)
    assert twin.hidden.shape == (6, 12, 3, clean.sizes["feature"])


@pytest.mark.parametrize("analysis", ["ablation", "patching", "interchange"])
def test_an_intervention_grid_runs_on_the_device_it_is_given_and_records_it(tmp_path, analysis):
    from analysis.compute import compute
    from analysis.interventions import ablation, interchange, patching
    from capture.record import capture_counterfactuals, capture_length

    spec = tiny_experiment(task="dyck", arch="lstm", steps=2,
                           models={"lstm": {"d_model": 16, "n_layers": 2}}).runs()[0]
    st = Store.create(str(tmp_path / "s.zarr"))
    train_run(st, spec)
    capture_length(st, spec.run_id, 12, n_sequences=40)
    capture_counterfactuals(st, spec.run_id, 12, n_pairs=8)
    build = {
        "ablation": lambda: ablation(st, [spec.run_id], [12], settings=["random:1"], refit=False,
                                     device="meta"),
        "patching": lambda: patching(st, [spec.run_id], 12, positions=[0, 5], device="meta"),
        "interchange": lambda: interchange(st, [spec.run_id], 12, device="meta"),
    }[analysis]
    with HostReads():
        lazy = build()
        (done,) = compute([lazy], "sync")  # the mode is this thread's: no worker threads
    assert done.attrs["device"] == "meta"
