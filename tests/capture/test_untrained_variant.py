"""The untrained baseline ([variants.untrained] train = false): runs for every architecture,
stores the weights its seed's trained run starts from without a training step, records
``untrained = true``, and is captured like any run; names that hide it are refused."""

from __future__ import annotations

import pytest
import torch

import capture.train as train_module
from capture.experiment import ExperimentError, parse_plan
from capture.record import capture_unit
from capture.train import train_run
from store import Store

GRID = {"tasks": ["parity"], "archs": ["transformer", "mamba", "lstm"], "variants": ["default", "untrained"],
        "seeds": [0, 1]}
UNTRAINED = {"untrained": {"train": False}}


def plan(grid=None, variants=None, **over):
    data = {"experiment": {"name": "t"}, "grid": grid or GRID,
            "variants": UNTRAINED if variants is None else variants}
    data.update(over)
    return parse_plan(data, source="exp.toml")


def test_the_untrained_variant_runs_every_cell_with_the_trained_models_config():
    p = plan(models={"mamba": {"d_model": 16}})
    by_id = {r.run_id: r for r in p.runs()}
    assert sorted(by_id) == sorted(f"parity-{a}-{v}-s{s}" for a in GRID["archs"]
                                   for v in GRID["variants"] for s in GRID["seeds"])
    for rid, spec in by_id.items():
        assert spec.untrained == ("-untrained-" in rid)
        if spec.untrained:  # the same model, task and [train] config as its trained twin
            twin = by_id[rid.replace("-untrained-", "-default-")]
            assert spec.model_config() == twin.model_config()
            assert spec.task_config() == twin.task_config() and spec.train == twin.train


def test_an_untrained_variant_of_a_model_variant_keeps_its_base():
    p = plan(grid={**GRID, "variants": ["no_conv", "untrained_no_conv"]},
             variants={"untrained_no_conv": {"train": False, "base": "no_conv"}})
    specs = [r for r in p.runs() if r.variant == "untrained_no_conv"]
    assert {r.arch for r in specs} == {"mamba"} and all(r.untrained for r in specs)
    assert all(r.model_config().variant == "no_conv" for r in specs)


@pytest.mark.parametrize(
    ("variants", "grid_variants", "match"),
    [
        ({"init": {"train": False}}, ["default", "init"],
         r"\[variants.init\] train = false: name an untrained baseline so every report says it, "
         r"e.g. \[variants.untrained\] or \[variants.untrained_init\]"),
        ({"untrained": {}}, ["default", "untrained"],
         r"\[variants.untrained\] is named untrained but trains: set train = false in it, or rename it"),
        ({}, ["default", "untrained"],
         r"variant 'untrained': declare the untrained baseline with a \[variants.untrained\] table saying "
         r"train = false"),
    ],
)
def test_names_that_hide_an_untrained_baseline_are_refused(variants, grid_variants, match):
    with pytest.raises(ExperimentError, match=match) as info:
        plan(grid={**GRID, "variants": grid_variants}, variants=variants)
    assert str(info.value).startswith("exp.toml: ") and "\n" not in str(info.value)


def small_plan():
    return plan(grid={"tasks": ["parity"], "archs": ["lstm"], "variants": ["default", "untrained"],
                      "seeds": [3]},
                models={"lstm": {"d_model": 8, "n_layers": 2}},
                train={"steps": 4, "batch_size": 4, "eval_every": 2, "n_eval": 8, "eval_lengths": [12],
                       "n_test": 8, "length": 12, "warmup": 1, "lr": 0.05},
                capture={"lengths": [12], "n_sequences": 8})


def test_an_untrained_run_stores_its_seeds_starting_point_untrained(tmp_path, monkeypatch):
    """The baseline's weights are exactly those the trained run of the same seed had before its
    first step (recorded as fit starts), not those it ended with; it takes no step."""
    starts: list[tuple[int, dict[str, torch.Tensor]]] = []
    real_fit = train_module.fit

    def recording_fit(model, task, cfg, seed, **kw):
        starts.append((seed, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        return real_fit(model, task, cfg, seed, **kw)

    monkeypatch.setattr(train_module, "fit", recording_fit)
    p = small_plan()
    trained, untrained = sorted(p.runs(), key=lambda r: r.untrained)
    st = Store.create(str(tmp_path / "s.zarr"))
    res_t, res_u = train_run(st, trained), train_run(st, untrained)
    assert [s for s, _ in starts] == [3]  # fit ran for the trained run only
    start = starts[0][1]
    assert (res_u.steps, res_t.steps) == (0, 4)
    base = train_module.rebuild_model(st, res_u.run_id).state_dict()
    done = train_module.rebuild_model(st, res_t.run_id).state_dict()
    assert all(torch.equal(base[k], start[k]) for k in base)
    assert any(not torch.equal(base[k], done[k]) for k in base)  # training moved the trained run
    a_u, a_t = st.run_attrs(res_u.run_id), st.run_attrs(res_t.run_id)
    assert a_u["untrained"] is True and "untrained" not in a_t
    assert a_u["metrics"]["steps"] == 0 and a_u["metrics"]["curve"] == []
    assert (a_u["status"], a_t["status"]) == ("untrained", "trained")  # the run table says which
    assert train_run(st, untrained).skipped
    res = capture_unit(st, untrained, "len", 12)
    assert res.blocks_written and st.load_length(res_u.run_id, 12).hidden.shape[0] == 8
