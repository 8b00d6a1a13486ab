"""Figures with ten architectures: legends inside the figure, one colour per architecture,
no figure wider than the page."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from reports import figures as F

ARCHS = ["transformer", "mamba", "mamba2", "lstm", "gru", "based", "baseconv", "h3", "hyena", "deltanet"]
TASKS = ["parity", "s3", "dyck", "code_depth"]
FEW_TASKS = TASKS[:2]
LAYERS = ["embed", "L0", "L1", "L2", "L3"]


def _rows(**dims) -> pd.DataFrame:
    keys = list(dims)
    return pd.DataFrame([dict(zip(keys, combo, strict=True)) for combo in itertools.product(*dims.values())])


def _with_values(frame: pd.DataFrame, value: str = "estimate", two_seeds: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    est = rng.uniform(0.3, 0.9, len(frame))
    lower, upper = (f"{value}_lower", f"{value}_upper") if value != "estimate" else ("lower", "upper")
    frame = frame.assign(**{value: est, lower: est - 0.05, upper: est + 0.05})
    if two_seeds:  # every other row: too few seeds, the two seeds' values instead of a band
        few = np.arange(len(frame)) % 2 == 0
        frame[lower] = np.where(few, np.nan, frame[lower])
        frame[upper] = np.where(few, np.nan, frame[upper])
        frame["seed_a"] = np.where(few, est - 0.02, np.nan)
        frame["seed_b"] = np.where(few, est + 0.02, np.nan)
    return frame


def _ten_arch_figures():
    layer_pos = range(len(LAYERS))
    acc = _with_values(_rows(task=TASKS, arch=ARCHS, variant=["default", "no_conv"], length=[40, 80, 120]),
                       two_seeds=True)
    prof = _with_values(_rows(task=FEW_TASKS, arch=ARCHS, variant=["default"], layer_pos=layer_pos), "accuracy",
                        two_seeds=True)
    prof = prof.assign(baseline=0.5, control=0.55, control_lower=0.5, control_upper=0.6)
    drop = _with_values(_rows(task=TASKS, arch=ARCHS, variant=["default"], layer_pos=layer_pos,
                              setting=["probe", "leace"]), "drop")
    drop["clean"] = drop["drop"] + 0.1
    heat = _rows(task=["parity"], arch=ARCHS, variant=["default"], layer=LAYERS, position=range(20))
    heat["estimate"] = np.random.default_rng(1).uniform(-0.1, 1.1, len(heat))
    sites = _with_values(_rows(task=["assoc_recall"], arch=ARCHS, variant=["default"], layer=LAYERS,
                               site=["key", "value", "divider", "query"]), "restoration")
    claims = pd.DataFrame({
        "claim": [f"a-rather-long-claim-identifier-{i}" for i in range(12)],
        "kind": ["difference"] * 12, "verdict": ["supported", "inconclusive", "contradicted", "not evaluable"] * 3,
        "estimate": np.linspace(-0.5, 0.5, 12), "lower": np.linspace(-0.6, 0.4, 12),
        "upper": np.linspace(-0.4, 0.6, 12), "margin": 0.05, "reference": 0.0,
        "seed_a": np.nan, "seed_b": np.nan,
    })
    claims.loc[3, ["lower", "upper", "seed_a", "seed_b"]] = [np.nan, np.nan, -0.3, -0.2]
    return {
        "accuracy_vs_length": F.accuracy_vs_length(acc),
        "accuracy_vs_length_one_task": F.accuracy_vs_length(acc[acc["task"] == "parity"]),
        "profile_grid": F.profile_grid(prof, LAYERS),
        "layer_lines": F.layer_lines(drop, LAYERS, value="drop", ylabel="accuracy drop", row="setting",
                                     reference="clean", zero_line=True),
        "heatmaps": F.heatmaps(heat, value="estimate", title="recovery"),
        "position_lines": F.position_lines(sites, value="restoration", ylabel="restoration", x="site",
                                           series="layer"),
        "forest": F.forest(claims),
    }


@pytest.fixture(scope="module")
def ten_arch_figures():
    return _ten_arch_figures()


def test_no_legend_is_cut_off_and_no_figure_is_wider_than_the_page(ten_arch_figures):
    for name, fig in ten_arch_figures.items():
        assert F.legend_overflow(fig) == [], name
        assert fig.get_figwidth() <= F.PAGE_WIDTH_IN + 1e-9, name
        if name != "heatmaps":
            labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
            assert labels, name
            if name.startswith("accuracy") or name == "layer_lines":
                assert set(ARCHS) <= set(labels), name  # every architecture named in full


def test_the_legend_check_sees_a_legend_that_is_cut_off():
    fig, _ = F._figure(1, 1)
    from matplotlib.lines import Line2D

    fig.legend([Line2D([], [])] * 10, [f"architecture number {i}" for i in range(10)],
               loc="outside lower center", ncol=10)
    assert F.legend_overflow(fig)


def test_a_long_architecture_name_wraps_inside_the_legend():
    frame = _with_values(_rows(task=["parity"], arch=["a-very-long-architecture-name-from-another-tool-" * 2, "lstm"],
                               variant=["default"], length=[40, 80]))
    fig = F.accuracy_vs_length(frame)
    assert F.legend_overflow(fig) == []
    assert any("\n" in t.get_text() for t in fig.legends[0].get_texts())


def test_each_architecture_has_one_colour_in_every_figure(ten_arch_figures):
    colours = [F.arch_colour(a) for a in ARCHS]
    assert len(set(colours)) == len(ARCHS)
    assert F.arch_colour("gpt2") == F.arch_colour("gpt2") and F.arch_colour("gpt2") not in colours
    for name in ("accuracy_vs_length", "layer_lines"):
        fig = ten_arch_figures[name]
        legend = fig.legends[0]
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            if text.get_text() in ARCHS:
                assert to_hex(handle.get_color()) == F.ARCH_COLOURS[text.get_text()].lower(), (name, text)
        drawn = {to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()}
        assert {c.lower() for c in colours} <= drawn, name
    grid = ten_arch_figures["profile_grid"]
    ylabels = {ax.get_ylabel().split("\n")[0]: to_hex(ax.yaxis.label.get_color()) for ax in grid.axes
               if ax.get_ylabel()}
    assert ylabels == {a: F.ARCH_COLOURS[a].lower() for a in ARCHS}


def test_variants_differ_by_line_style_not_colour():
    assert F.variant_style("default", ["no_conv", "default"]) == "-"
    assert F.variant_style("no_conv", ["no_conv", "default"]) == "--"


def test_every_verdict_has_its_own_colour_in_the_forest_legend():
    verdicts = ["supported", "negligible", "equivalent", "inconclusive", "contradicted", "not evaluable"]
    assert list(F.VERDICT_COLOURS) == verdicts
    assert len({to_hex(c) for c in F.VERDICT_COLOURS.values()}) == len(verdicts)
    frame = pd.DataFrame({"claim": verdicts, "kind": "difference", "verdict": verdicts, "estimate": 0.1,
                          "lower": 0.0, "upper": 0.2, "margin": 0.05, "reference": 0.0})
    fig = F.forest(frame)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert labels[: len(verdicts)] == verdicts
    assert F.legend_overflow(fig) == []
