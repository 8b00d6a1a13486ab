"""An architecture added from outside the packages (docs/guide/extending.md): one registration,
then its config, the experiment grid, training, capture and the patching caveat read it like a
built-in's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import capture.models.registry as registry
from analysis.interventions._common import site_description
from capture.models import ModelConfig, build_model
from capture.models.base import LayerStack
from capture.models.registry import Architecture, register_architecture
from capture.record import capture_length
from capture.train import train_run
from store import Store
from tests.capture.test_train import tiny_experiment


class EMABlock(nn.Module):
    """A causal exponential moving average of a projection: h[t] = a h[t-1] + (1 - a) W x[t]."""

    def __init__(self, width: int):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.decay = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, u = torch.sigmoid(self.decay), self.proj(x)
        h, out = torch.zeros_like(u[:, 0]), []
        for t in range(u.shape[1]):
            h = a * h + (1 - a) * u[:, t]
            out.append(h)
        return torch.stack(out, dim=1)


class EMAModel(LayerStack):
    def __init__(self, cfg: ModelConfig, vocab_size: int, n_classes: int):
        width = cfg.sizes()["hidden_size"]
        super().__init__(cfg.arch, width, cfg.n_layers, cfg)
        self.embed_tokens = nn.Embedding(vocab_size, width)
        self.layers = nn.ModuleList(EMABlock(width) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def run_block(self, index, hidden, context):
        return hidden + self.layers[index](hidden)


EMA = Architecture("ema", "exponential moving averages", EMAModel, sizes=("hidden_size",),
                   defaults=lambda d, given: {"hidden_size": d})


@pytest.fixture
def ema(monkeypatch):
    """The registry with the new architecture, restored afterwards."""
    monkeypatch.setattr(registry, "_ARCHITECTURES", dict(registry._ARCHITECTURES))
    return register_architecture(EMA)


def test_its_config_and_the_caveat_read_its_registration(ema):
    assert registry.names()[-1] == "ema" and registry.names()[0] == "transformer"
    cfg = ModelConfig(arch="ema", d_model=16, n_layers=2)
    assert cfg.sizes() == {"hidden_size": 16} and cfg.model_dump()["hidden_size"] == 16
    with pytest.raises(ValueError, match="n_heads do\\(es\\) not apply to arch 'ema'; its size fields are hidden_size"):
        ModelConfig(arch="ema", n_heads=2)
    with pytest.raises(ValueError, match="applies to mamba, mamba2, .* only, not 'ema'"):
        ModelConfig(arch="ema", variant="no_conv")
    with pytest.raises(ValueError, match="architecture 'ema' is already registered"):
        register_architecture(Architecture("ema", "another", EMAModel))
    with pytest.raises(ValueError, match="gives no defaults"):
        register_architecture(Architecture("ema2", "sizes without defaults", EMAModel, sizes=("hidden_size",)))
    # a state along the positions unless registered otherwise: patching results say so
    assert "recurrent state at later positions" in site_description("ema", "L1", "position 3")
    a, b = (build_model(cfg, vocab_size=4, n_classes=2, seed=3) for _ in range(2))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_an_experiment_trains_and_captures_it(ema, tmp_path):
    with pytest.raises(ValueError, match="ema"):  # unregistered names list the registered ones
        tiny_experiment(arch="emma", models={})
    spec = tiny_experiment(arch="ema", steps=4, models={"ema": {"d_model": 8, "n_layers": 2}}).runs()[0]
    st = Store.create(str(tmp_path / "s.zarr"))
    res = train_run(st, spec)
    assert ModelConfig(**st.run_attrs(res.run_id)["model_config"]).sizes() == {"hidden_size": 8}
    capture_length(st, res.run_id, 12, n_sequences=16)
    ds = Store.open(str(tmp_path / "s.zarr")).open_length(res.run_id, 12)
    assert [str(v) for v in ds.layer.values] == ["embed", "L0", "L1"]
    # what was stored is the trained model's own hidden states on the stored tokens
    model = build_model(ModelConfig(arch="ema", d_model=8, n_layers=2), vocab_size=int(st.run_attrs(res.run_id)["vocab_size"]),
                        n_classes=int(st.run_attrs(res.run_id)["n_classes"]), seed=0)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in st.read_weights(res.run_id).items()})
    with torch.no_grad():
        _, hidden = model.forward_with_hidden(torch.as_tensor(ds.tokens.values[:4].astype(np.int64)))
    np.testing.assert_allclose(ds.hidden.values[:4].astype(np.float32), hidden.numpy(), rtol=1e-2, atol=1e-2)
