"""The behaviour section says an untrained baseline's accuracy is chance by construction and no
model's behaviour, rather than showing it as if it were one."""

from __future__ import annotations

import numpy as np

from reports.behaviour import behaviour
from reports.snapshot import take_snapshot
from store import Store
from tests.conftest import synthetic_arrays


def _store(path, untrained: bool) -> Store:
    st = Store.create(str(path), title="baseline")
    rng = np.random.default_rng(0)
    for variant in ("default", "untrained") if untrained else ("default",):
        for seed in (0, 1):
            rid = f"parity-lstm-{variant}-s{seed}"
            st.add_run(rid, task="parity", arch="lstm", variant=variant, seed=seed, target="parity",
                       **({"untrained": True} if variant == "untrained" else {}))
            st.write_length(rid, 12, **synthetic_arrays(rng, n=24, length=12), block_size=12, target="parity")
    return st


def test_the_behaviour_section_names_the_untrained_baseline(tmp_path):
    sec = behaviour(take_snapshot(_store(tmp_path / "b.zarr", untrained=True)))
    notes = [n for n in sec.notes if n.startswith("Untrained baselines")]
    assert len(notes) == 1 and "parity/lstm/untrained" in notes[0] and "chance by construction" in notes[0]
    assert "parity/lstm/default" not in notes[0]
    trained_only = behaviour(take_snapshot(_store(tmp_path / "t.zarr", untrained=False)))
    assert not [n for n in trained_only.notes if n.startswith("Untrained baselines")]
