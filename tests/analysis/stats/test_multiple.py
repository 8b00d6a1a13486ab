"""Holm and Benjamini-Hochberg over named dims, against hand-computed values."""

import gc

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats import adjust_pvalues

P = [0.01, 0.04, 0.03, 0.005]


def test_holm_matches_hand_computed_values():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max
    res = adjust_pvalues(xr.DataArray(P, dims="task"), method="holm")
    np.testing.assert_allclose(res.p_adjusted, [0.03, 0.06, 0.06, 0.02])
    assert res.reject.values.tolist() == [True, False, False, True]
    assert res.attrs["method"].startswith("Holm") and res.attrs["family_size"] == 4


def test_benjamini_hochberg_matches_hand_computed_values():
    # sorted p * 4 / rank = 0.02, 0.02, 0.04, 0.04 -> running min from the top
    res = adjust_pvalues(xr.DataArray(P, dims="task"), method="bh")
    np.testing.assert_allclose(res.p_adjusted, [0.02, 0.04, 0.04, 0.02])
    assert res.reject.values.all()
    assert res.attrs["method"].startswith("Benjamini-Hochberg")


def test_families_span_only_the_named_dims_and_nan_is_left_out():
    p = xr.DataArray(
        [[0.01, np.nan, 0.04], [0.01, 0.02, 0.03]],
        dims=("arch", "task"),
        coords={"arch": ["mamba", "lstm"], "task": ["parity", "s3", "dyck"]},
    )
    res = adjust_pvalues(p, dims=["task"])
    # mamba: a family of 2 (NaN untested): 0.01 * 2 = 0.02, 0.04 * 1 = 0.04
    np.testing.assert_allclose(res.p_adjusted.sel(arch="mamba"), [0.02, np.nan, 0.04])
    # lstm: 0.01 * 3, 0.02 * 2, 0.03 * 1 -> 0.03, 0.04, 0.04
    np.testing.assert_allclose(res.p_adjusted.sel(arch="lstm"), [0.03, 0.04, 0.04])
    assert res.p_adjusted.dims == ("arch", "task")
    assert list(res.task.values) == ["parity", "s3", "dyck"]
    whole = adjust_pvalues(p)  # one family of 5 tests
    assert whole.attrs["family_size"] == 5
    # sorted 0.01, 0.01, 0.02, 0.03, 0.04 times 5..1 = 0.05, 0.04, 0.06, 0.06, 0.04 -> max
    np.testing.assert_allclose(whole.p_adjusted, [[0.05, np.nan, 0.06], [0.05, 0.06, 0.06]])


def test_dask_backed_pvalues_give_the_same_correction():
    p = xr.DataArray(np.linspace(0.001, 0.2, 12).reshape(3, 4), dims=("arch", "task"))
    eager = adjust_pvalues(p, dims=["task"], method="bh")
    lazy = adjust_pvalues(p.chunk({"arch": 1}), dims=["task"], method="bh")
    assert lazy.p_adjusted.chunks is not None
    xr.testing.assert_allclose(lazy.compute(), eager)


def test_adjust_pvalues_rejects_bad_inputs_with_pinned_messages():
    p = xr.DataArray(P, dims="task")
    with pytest.raises(ValueError, match="unknown method 'bonferonni'; valid options: 'holm'"):
        adjust_pvalues(p, method="bonferonni")
    with pytest.raises(ValueError, match=r"Dimensions \('layer',\) not found in pvalues"):
        adjust_pvalues(p, dims=["layer"])
    with pytest.raises(TypeError, match="pvalues must be an xarray.DataArray"):
        adjust_pvalues(np.array(P))


@settings(max_examples=200, deadline=None)
@given(p=st.lists(st.sampled_from([1e-6, 0.001, 0.01, 0.0125, 0.025, 0.05, 0.3, 1.0])
                  | st.floats(0.0, 1.0), min_size=1, max_size=30),
       alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_our_holm_is_statsmodels_holm_bit_for_bit(p, alpha):
    from statsmodels.stats.multitest import multipletests

    from analysis.stats.multiple import holm_np

    gc.freeze()  # statsmodels' Holm runs gc.collect(): let it skip the session's objects
    try:
        ref_reject, ref_adj, _, _ = multipletests(np.array(p), alpha=alpha, method="holm")
    finally:
        gc.unfreeze()
    reject, adj = holm_np(np.array(p), alpha)
    assert np.array_equal(adj, ref_adj) and np.array_equal(reject, ref_reject)
