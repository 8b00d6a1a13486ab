"""Training checkpoints (S46): the newest complete one is read, a half-written one never."""

from __future__ import annotations

import numpy as np
import torch

from store import Store
from store import schema as S


def _sections(scale):
    return {"model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
                      "h": torch.ones(4, dtype=torch.bfloat16) * scale},
            "rng": {"torch": np.arange(5, dtype=np.uint8), "step": np.float32(scale)}}


def test_the_newest_complete_checkpoint_is_read_and_older_ones_removed(tmp_path):
    st = Store.create(str(tmp_path / "a.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    assert st.read_checkpoint("r0") is None
    st.write_checkpoint("r0", 10, _sections(1.0), {"curve": [{"step": 10}], "big": str(2**100)})
    # a writer killed while writing step 20: the group is there, never marked complete
    ck = st.run_group("r0")[S.CHECKPOINT]
    ck.create_group("step_0000020").create_group("model")
    got = st.read_checkpoint("r0")
    assert got is not None and got.step == 10 and got.state["big"] == str(2**100)
    np.testing.assert_array_equal(got.arrays["model"]["w"], np.arange(6).reshape(2, 3))
    assert got.dtypes["model"]["h"] == "bfloat16" and got.arrays["model"]["h"].dtype == np.float32
    assert got.arrays["rng"]["step"].shape == ()  # 0-d arrays round-trip

    st.write_checkpoint("r0", 20, _sections(2.0), {"curve": []})  # replaces the broken one
    names = sorted(n for n, _ in st.run_group("r0")[S.CHECKPOINT].groups())
    assert names == ["step_0000020"]
    got = st.read_checkpoint("r0")
    assert got.step == 20 and got.arrays["model"]["w"][1, 2] == 10.0

    st.delete_checkpoint("r0")
    assert st.read_checkpoint("r0") is None and S.CHECKPOINT not in st.run_group("r0")
    assert Store.open(str(st.location)).run_ids() == ["r0"]
