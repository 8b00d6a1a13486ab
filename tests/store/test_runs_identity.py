"""A run's identity survives optional config fields added by later versions (rule S10)."""

import pytest

from store import Store, config_hash, run_identity
from store.contents.runs import same_run
from store.errors import RunConflictError


def _legacy_hash(model_config: dict) -> str:
    # What an older writer stored: every field, unset ones as null.
    return config_hash({"task": "parity", "arch": "transformer", "variant": "default", "seed": 0,
                        "model_config": model_config, "task_config": {"p_one": 0.5}})


def test_unset_fields_are_not_part_of_the_identity():
    a = run_identity("parity", "gru", "default", 0, {"d_model": 8, "window": None}, {})
    b = run_identity("parity", "gru", "default", 0, {"d_model": 8}, {})
    assert config_hash(a) == config_hash(b)
    c = run_identity("parity", "gru", "default", 0, {"d_model": 16}, {})
    assert config_hash(a) != config_hash(c)


def test_a_run_stored_before_a_field_existed_is_the_same_run(tmp_path):
    old_cfg = {"arch": "transformer", "d_model": 8, "conv_kernel": None}
    store = Store.create(tmp_path / "s.zarr")
    store.add_run("r", task="parity", arch="transformer", variant="default", seed=0,
                  model_config=old_cfg, task_config={"p_one": 0.5})
    # Rewrite the stored hash the way an older version computed it (nulls included).
    import zarr
    g = zarr.open_group(str(tmp_path / "s.zarr" / "runs" / "r"), mode="r+")
    g.attrs["config_hash"] = _legacy_hash(old_cfg)
    new_cfg = {**old_cfg, "window": None, "feature_dim": None}  # a later version's fields
    store = Store.open(tmp_path / "s.zarr", mode="r+")
    assert store.add_run("r", task="parity", arch="transformer", variant="default", seed=0,
                         model_config=new_cfg, task_config={"p_one": 0.5}) == "r"
    ident = run_identity("parity", "transformer", "default", 0, new_cfg, {"p_one": 0.5})
    assert same_run(store.run_attrs("r"), ident)
    # A real difference is still refused.
    with pytest.raises(RunConflictError, match="different config"):
        store.add_run("r", task="parity", arch="transformer", variant="default", seed=0,
                      model_config={**new_cfg, "d_model": 16}, task_config={"p_one": 0.5})
