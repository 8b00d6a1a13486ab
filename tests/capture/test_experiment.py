"""Capture's sections of an experiment: typed, validated, with one-line errors that list
valid options (the whole file, claims included, is tested in tests/layerstate/test_experiment.py)."""

from __future__ import annotations

import pytest

from capture.experiment import ExperimentError, parse_plan


def minimal(**over):
    data = {"experiment": {"name": "t"}, "grid": {"tasks": ["parity"], "archs": ["lstm"]}}
    for k, v in over.items():
        data[k] = v
    return data


def test_grid_expands_and_skips_variants_that_do_not_apply():
    exp = parse_plan(minimal(grid={"tasks": ["parity", "s3"], "archs": ["lstm", "mamba"],
                                         "variants": ["default", "no_conv"], "seeds": [0, 1]}))
    ids = [r.run_id for r in exp.runs()]
    assert len(ids) == 2 * (1 + 2) * 2  # lstm: default only; mamba: default + no_conv
    assert "s3-mamba-no_conv-s1" in ids and "parity-lstm-no_conv-s0" not in ids


def test_per_task_training_overrides():
    exp = parse_plan(minimal(train={"steps": 10}, train_overrides={"parity": {"steps": 99}}))
    assert exp.runs()[0].train.steps == 99 and exp.train.steps == 10


def test_per_task_and_architecture_training_overrides():
    exp = parse_plan(minimal(
        grid={"tasks": ["parity", "s3"], "archs": ["lstm", "mamba"], "seeds": [0]},
        train={"steps": 10, "lr": 0.01},
        train_overrides={"s3": {"steps": 50, "lstm": {"steps": 300, "batch_size": 7}}},
    ))
    got = {r.run_id: (r.train.steps, r.train.batch_size, r.train.lr) for r in exp.runs()}
    default_batch = exp.train.batch_size
    assert got == {
        "parity-lstm-default-s0": (10, default_batch, 0.01),
        "parity-mamba-default-s0": (10, default_batch, 0.01),
        "s3-lstm-default-s0": (300, 7, 0.01),
        "s3-mamba-default-s0": (50, default_batch, 0.01),
    }


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (minimal(grid={"tasks": ["parityy"], "archs": ["lstm"]}),
         r"unknown task 'parityy'; valid: assoc_recall, code_depth, dyck, parity, s3, treecall"),
        (minimal(grid={"tasks": ["parity"], "archs": ["rnn"]}),
         r"unknown architecture 'rnn'; valid: transformer, mamba, mamba2, lstm, gru"),
        (minimal(train={"stepz": 3}), r"train.stepz: unknown field"),
        (minimal(train={"steps": 0}), r"train.steps: Input should be greater than or equal to 1"),
        (minimal(tasks={"dyck": {"k": 2}}), r"\[tasks.dyck\] names something not in the grid"),
        (minimal(grid={"tasks": ["parity"], "archs": ["lstm"]}, train_overrides={"parity": {"gru": {"steps": 5}}}),
         r"\[train_overrides.parity.gru\] names an architecture not in the grid"),
        (minimal(grid={"tasks": ["parity"], "archs": ["lstm"]}, train_overrides={"parity": {"lstm": {"stepz": 5}}}),
         r"stepz"),
        (minimal(tasks={"parity": {"colour": 1}}), r"colour"),
        (minimal(grid={"tasks": ["parity"], "archs": ["lstm"], "seeds": [1, 1]}), r"seeds repeat"),
    ],
)
def test_bad_experiments_get_one_line_errors(data, match):
    with pytest.raises(ExperimentError, match=match) as info:
        parse_plan(data)
    assert "\n" not in str(info.value)


def test_the_plan_holds_no_analysis_or_claims():
    with pytest.raises(ExperimentError, match=r"analysis: unknown field"):
        parse_plan(minimal(analysis={"probe": False}))
