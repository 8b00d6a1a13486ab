"""MDL probes (online code): the batched code equals the plain scikit-learn loop, a planted label
compresses where it is planted and nowhere else, a shuffled label does not compress."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.probes import mdl_probe
from analysis.probes.cells import C_GRID
from analysis.probes.mdl import (
    CodeInput,
    block_ends,
    cell_codes,
    mixture_weight,
    reference_cell_code,
)
from tests.analysis.probes.test_probes import make


def planted_rows(rng, n=400, d=12, K=3, strength=2.0):
    y = rng.integers(0, K, n)
    X = rng.standard_normal((n, d)).astype(np.float32) * rng.uniform(0.5, 3, d).astype(np.float32) + 4
    X[:, :K] += strength * np.eye(K, dtype=np.float32)[y]
    return X, y, rng.permutation(n)


def test_block_ends_follow_voita_titov_portions():
    assert block_ends(1000).tolist() == [1, 2, 4, 8, 16, 32, 63, 125, 250, 500, 1000]
    # a small cell: portions that round alike make one block, the first holds one sequence
    assert block_ends(30).tolist() == [1, 2, 4, 8, 15, 30]
    with pytest.raises(ValueError, match="at least one sequence"):
        block_ends(0)


@pytest.mark.parametrize("C", [1.0, C_GRID])
def test_batched_code_equals_scikit_learn_loop(C):
    rng = np.random.default_rng(1)
    X, y, rank = planted_rows(rng)
    ours = cell_codes([CodeInput(X, y, None, rank)], 3, C)[0]
    ref = reference_cell_code(X, y, rank, 3, C)
    assert ours.converged and ref.converged
    np.testing.assert_array_equal(ours.block_end, ref.block_end)
    np.testing.assert_array_equal(ours.block_C, ref.block_C)  # the same C chosen for every block
    # to the precision of the fits (float32 L-BFGS vs float64 scikit-learn, tol 1e-4)
    np.testing.assert_allclose(ours.block_bits, ref.block_bits, atol=0.2)
    assert abs(ours.codelength - ref.codelength) < 1e-3 * ref.codelength


def test_planted_label_compresses_and_shuffled_one_does_not():
    rng = np.random.default_rng(2)
    X, y, rank = planted_rows(rng, n=600, strength=3.0)
    shuffled = rng.permutation(y)
    code = cell_codes([CodeInput(X, y, shuffled, rank)], 3, C_GRID)[0]
    assert code.compression > 1.5
    control = code.uniform / code.control_codelength
    assert 0.9 < control < 1.02
    assert code.uniform == pytest.approx(600 * np.log2(3))
    # the first block is sent with the uniform code
    assert code.block_bits[0] == pytest.approx(np.log2(3))


def test_class_the_training_blocks_never_saw_costs_finite_bits():
    rng = np.random.default_rng(3)
    X, y, rank = planted_rows(rng, n=200, K=3)
    y = np.where(rank < 50, np.minimum(y, 1), y)  # class 2 first appears after 50 sequences
    code = cell_codes([CodeInput(X, y, None, rank)], 3, 1.0)[0]
    assert np.isfinite(code.codelength)
    # one training row: the mixture weight keeps an unseen class at K / (n + K) / K
    assert mixture_weight(1, 3) == pytest.approx(0.75)


def test_store_sweep_finds_the_planted_layer_and_stores_intervals(tmp_path):
    st = make(tmp_path, runs=("r0", "r1", "r2"), n=240, lengths=(8,), positions=(3, 4, 5, 7))
    ds = mdl_probe(st, "y", positions="last", save=True, scheduler="sync")
    prof = ds.compression_profile.sel(length=8)
    assert (prof.sel(layer="L1") > 2.5).all()  # the planted layer (last position 7 is planted)
    assert (abs(prof.sel(layer=["embed", "L0"]) - 1) < 0.1).all()
    assert (abs(ds.control_compression_profile - 1) < 0.1).all()
    assert st.results() == ["mdl/toy"]
    stored = st.read_result("mdl/toy")
    assert stored.attrs["interval_metrics"] == ["compression", "control_compression"]
    est = stored.compression_estimate.sel(length=8).isel(cell=0)
    lo, hi = stored.compression_lower.sel(length=8).isel(cell=0), stored.compression_upper.sel(length=8).isel(cell=0)
    assert int(stored.compression_n_seeds.sel(length=8, layer="L1").isel(cell=0)) == 3
    assert float(lo.sel(layer="L1")) < float(est.sel(layer="L1")) < float(hi.sel(layer="L1"))
    np.testing.assert_allclose(float(est.sel(layer="L1")), float(prof.sel(layer="L1").mean()))
    assert float(lo.sel(layer="L1")) > float(hi.sel(layer="embed"))


def test_store_sweep_per_position_and_reference_method_agree(tmp_path):
    st = make(tmp_path, runs=("r0",), n=160, lengths=(8,), positions=(3,))
    fast = mdl_probe(st, "y", positions=[2, 3], layers=["L1"], C=1.0, scheduler="sync")
    slow = mdl_probe(st, "y", positions=[2, 3], layers=["L1"], C=1.0, method="reference", scheduler="sync")
    comp = fast.compression.sel(run="r0", length=8, layer="L1")
    assert float(comp.sel(position=3)) > 2 > 1.1 > float(comp.sel(position=2))
    np.testing.assert_allclose(fast.codelength, slow.codelength, rtol=1e-3)


def test_bad_method_is_one_line(tmp_path):
    st = make(tmp_path, runs=("r0",), n=40, lengths=(8,))
    with pytest.raises(ValueError, match="method must be 'exact' or 'reference'"):
        mdl_probe(st, "y", method="screen")
