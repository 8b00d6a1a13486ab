"""analysis.intervals: the run -> seed reshaping used by every interval in the report."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from analysis.intervals import _by_seed_dim


def test_runs_become_seeds_even_when_the_result_carries_its_own_seed_coordinate():
    # Intervention results carry per-run factor coordinates (task, arch, seed, ...); the
    # rename of run -> seed must not clash with them.
    runs = ["parity-lstm-default-s0", "parity-lstm-default-s1"]
    da = xr.DataArray(
        np.arange(6.0).reshape(2, 3), dims=("run", "sequence"),
        coords={"run": runs, "seed": ("run", [0, 1]), "arch": ("run", ["lstm", "lstm"])},
    )
    grp = pd.DataFrame({"seed": [0, 1]}, index=runs)
    out = _by_seed_dim(da, grp)
    assert out.dims == ("seed", "sequence")
    assert list(out["seed"].values) == [0, 1]
    assert set(out.coords) == {"seed"}
    np.testing.assert_array_equal(out.values, da.values)


def test_bound_claims_are_judged_against_their_threshold_within_their_metrics_range():
    from reports.claims import claim_range, claims_frame

    assert claim_range("bound", "accuracy") == (0.0, 1.0)
    assert claim_range("bound", "ablation_drop") == (-1.0, 1.0)
    assert claim_range("difference", "probe_accuracy") == (-1.0, 1.0)
    assert claim_range("bound", "probe_stability") == (0.0, 1.0)
    ds = xr.Dataset(
        {
            "statement": ("claim", ["LSTM perfect at len120"]),
            "kind": ("claim", ["bound"]),
            "test": ("claim", ["one-sided t"]),
            "verdict": ("claim", ["supported"]),
            "estimate": ("claim", [0.995]),
            "lower": ("claim", [0.97]),
            "upper": ("claim", [1.02]),
            "reference_mean": ("claim", [0.99]),
            "n_seeds": ("claim", [3]),
            "metric": ("claim", ["accuracy"]),
        },
        coords={"claim": ["f1-lstm"]},
    )
    row = claims_frame(ds).iloc[0]
    assert row["reference"] == 0.99
    assert row["upper"] <= 1.0  # clipped to what an accuracy can take
