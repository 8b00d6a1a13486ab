"""Pretrained checkpoints from a local directory become runs that capture like any other."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capture.experiment import TrainConfig
from capture.pretrained import add_pretrained_run
from capture.record import capture_length
from capture.train import rebuild_model
from store import Store


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import GPTNeoXConfig, GPTNeoXModel

    path = tmp_path_factory.mktemp("ckpt") / "tiny-pythia"
    cfg = GPTNeoXConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, bos_token_id=None,
                        eos_token_id=None)
    with torch.random.fork_rng():  # a fixed random checkpoint, global state left alone
        torch.manual_seed(0)
        GPTNeoXModel(cfg).save_pretrained(path)
    return path


def test_checkpoint_fine_tuned_stored_rebuilt_and_captured(checkpoint, tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    ft = TrainConfig(length=12, steps=5, batch_size=8, eval_every=5, n_eval=16, eval_lengths=[12],
                     n_test=16, warmup=1)
    rid = add_pretrained_run(st, checkpoint, "dyck-pythia-tiny", task="dyck", fine_tune=ft)
    a = st.run_attrs(rid)
    assert a["variant"] == "pretrained" and a["arch"] == "transformer"
    assert a["model_config"]["hf_config"]["hidden_size"] == 16 and a["metrics"]["steps"] == 5
    model = rebuild_model(st, rid)
    capture_length(st, rid, 12, n_sequences=10)
    ds = st.load_length(rid, 12)
    assert list(ds.layer.values) == ["embed", "L0", "L1"] and ds.hidden.shape == (10, 12, 3, 16)
    logits, _ = model.forward_with_hidden(torch.as_tensor(ds.tokens.values.astype("int64")))
    np.testing.assert_allclose(ds.logits.values, logits.detach().numpy(), atol=2e-2, rtol=1e-2)


def test_missing_checkpoint_and_too_small_vocabulary(checkpoint, tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    with pytest.raises(FileNotFoundError):
        add_pretrained_run(st, tmp_path / "nope", "r", task="parity")
    with pytest.raises(ValueError, match="vocabulary has 32"):
        add_pretrained_run(st, checkpoint, "r", task="assoc_recall")
    assert st.run_ids() == []
