"""Bootstrap draws through ArviZ: DataTree, summary table, ETI and a forest plot file."""

import matplotlib

matplotlib.use("Agg")  # headless: no display is ever needed

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from analysis.stats import (  # noqa: E402
    draws_to_datatree,
    eti,
    hierarchical_bootstrap,
    interval_table,
    plot_forest,
    simulate_paired_accuracy,
    summarise,
)


@pytest.fixture(scope="module")
def result():
    ds = simulate_paired_accuracy(0, n_datasets=2, n_sequences=(20, 40))
    return hierarchical_bootstrap(ds.correct, ds.labelled, rng=1, n_boot=400, ci_level=0.9)


def test_datatree_puts_draws_in_posterior_with_chain_and_draw(result):
    tree = draws_to_datatree(result.draws)
    post = tree["posterior"].to_dataset()
    assert post["estimate"].dims[:2] == ("chain", "draw")
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == 400
    assert post.attrs["method"] == "seed-level t" and "not a Bayesian" in post.attrs["draws_kind"]


def test_summary_and_eti_match_numpy_quantiles_at_the_bootstrap_level(result):
    table = summarise(result.draws)
    assert {"mean", "sd", "eti90_lb", "eti90_ub"} <= set(table.columns)  # ci_prob from attrs
    assert len(table) == 4
    bounds = eti(result.draws)["estimate"]
    expected = result.draws.quantile([0.05, 0.95], "draw")
    np.testing.assert_allclose(bounds.sel(ci_bound="lower"), expected.sel(quantile=0.05))
    np.testing.assert_allclose(bounds.sel(ci_bound="upper"), expected.sel(quantile=0.95))
    np.testing.assert_allclose(
        np.sort(table["mean"].values), np.sort(result.draws.mean("draw").values.ravel())
    )


def test_forest_plot_renders_a_png_file_without_display(result, tmp_path):
    both = {
        "reference": result.draws.sel(condition="reference"),
        "treatment": result.draws.sel(condition="treatment"),
    }
    path = plot_forest(both, tmp_path / "forest.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_interval_table_is_flat_and_names_its_method(result):
    table = interval_table(result.interval)
    assert len(table) == 4 and set(table["method"]) == {"seed-level t"}
    assert (table["ci_level"] == 0.9).all()


def test_summary_rejects_draws_without_a_draw_dim():
    with pytest.raises(ValueError, match=r"Dimensions \('draw',\) not found in draws"):
        summarise(xr.DataArray(np.zeros(3), dims="seed"))
    with pytest.raises(TypeError, match="draws must be an xarray DataArray, Dataset or dict"):
        summarise(np.zeros(3))
