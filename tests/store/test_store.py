"""The store contract: layout, round trips, chunking, lazy reads, runs and weights."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from store import (
    IncompleteError,
    InvalidArrayError,
    MissingError,
    NotAStoreError,
    RunConflictError,
    SchemaVersionError,
    Store,
)
from tests.conftest import synthetic_arrays


def test_round_trip_preserves_values_dims_and_coords(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"), title="rt")
    st.add_run("r0", task="parity", arch="lstm", seed=3)
    arrs = synthetic_arrays(np.random.default_rng(1), n=50, length=12)
    st.write_length("r0", 12, **arrs, block_size=16)

    ds = Store.open(str(tmp_path / "s.zarr")).open_length("r0", 12)
    assert ds.hidden.dims == ("sequence", "position", "layer", "feature")
    assert list(ds.layer.values) == ["embed", "L0", "L1"]
    np.testing.assert_array_equal(ds.position.values, np.arange(12))
    np.testing.assert_array_equal(ds.sequence.values, np.arange(50))
    np.testing.assert_array_equal(ds.hidden.values, arrs["hidden"].astype("float16"))
    np.testing.assert_array_equal(ds.parity.values, arrs["labels"]["parity"])
    np.testing.assert_array_equal(ds.tokens.values, arrs["tokens"])
    assert ds.mask.dtype == bool and ds.mask.values.all()
    assert ds.logits.dims == ("sequence", "position", "class")
    assert ds.attrs["run"]["seed"] == 3 and ds.attrs["target"] == "parity"


def test_float32_on_request(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(1), n=10)
    st.write_length("r0", **arrs, dtype="float32")
    ds = st.open_length("r0", 12)
    assert ds.hidden.dtype == np.float32
    np.testing.assert_array_equal(ds.hidden.values, arrs["hidden"])


def test_reads_are_lazy_and_aligned_with_stored_chunks(make_store):
    st = make_store(n=64, block_size=16)
    ds = st.open_length("r0", 12)
    assert ds.hidden.chunks is not None  # dask-backed
    # dask chunks equal stored chunks: 16 sequences, all positions, ONE layer, all features
    assert ds.hidden.data.chunksize == (16, 12, 1, 8)
    assert ds.hidden.encoding["chunks"] == (16, 12, 1, 8)


def test_default_chunks_are_megabytes_and_one_layer(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    with st.length_writer("r0", 40, n_sequences=2000, n_layers=4, n_features=128,
                          labels=["parity"]) as w:
        chunk = w.group["hidden"].chunks
    nbytes = np.prod(chunk) * 2
    assert chunk[2] == 1 and chunk[1] == 40 and chunk[3] == 128
    assert 1 * 2**20 <= nbytes <= 8 * 2**20


def test_xarray_dataarrays_with_named_dims_in_any_order(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(2), n=8)
    hid = xr.DataArray(arrs["hidden"], dims=("sequence", "position", "layer", "feature"))
    st.write_length("r0", hidden=hid.transpose("layer", "feature", "sequence", "position"),
                    tokens=arrs["tokens"], labels=arrs["labels"])
    np.testing.assert_array_equal(
        st.open_length("r0", 12).hidden.values, arrs["hidden"].astype("float16")
    )


def test_append_in_odd_batches_equals_one_write(tmp_path):
    arrs = synthetic_arrays(np.random.default_rng(5), n=70)
    a = Store.create(str(tmp_path / "a.zarr"))
    a.add_run("r0", task="parity", arch="lstm", seed=0)
    a.write_length("r0", **arrs, block_size=16)
    b = Store.create(str(tmp_path / "b.zarr"))
    b.add_run("r0", task="parity", arch="lstm", seed=0)
    with b.length_writer("r0", 12, n_sequences=70, n_layers=2, n_features=8,
                         labels=["parity", "ones"], n_classes=2, block_size=16) as w:
        for lo, hi in [(0, 7), (7, 30), (30, 31), (31, 70)]:
            w.append(hidden=arrs["hidden"][lo:hi], tokens=arrs["tokens"][lo:hi],
                     labels={k: v[lo:hi] for k, v in arrs["labels"].items()},
                     logits=arrs["logits"][lo:hi])
    xr.testing.assert_identical(a.open_length("r0", 12).load().drop_attrs(),
                                b.open_length("r0", 12).load().drop_attrs())


def test_runs_table_and_selection(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    for i, (task, arch) in enumerate([("parity", "lstm"), ("s3", "lstm"), ("s3", "mamba")]):
        st.add_run(f"r{i}", task=task, arch=arch, seed=i)
    assert st.select(task="s3") == ["r1", "r2"]
    assert st.select(task="s3", arch=["mamba", "gru"]) == ["r2"]
    assert st.select(arch="lstm", seed=0) == ["r0"]
    table = st.runs()
    assert list(table.index) == ["r0", "r1", "r2"] and table.loc["r2", "arch"] == "mamba"
    with pytest.raises(KeyError, match="no attribute 'colour'.*filter on one of"):
        st.select(colour="red")


def test_add_run_is_idempotent_but_refuses_a_different_config(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0, model_config={"d": 128})
    st.add_run("r0", task="parity", arch="lstm", seed=0, model_config={"d": 128})  # same: fine
    with pytest.raises(RunConflictError, match="different config"):
        st.add_run("r0", task="parity", arch="lstm", seed=0, model_config={"d": 64})
    assert st.run_attrs("r0")["model_config"] == {"d": 128}


def test_weights_round_trip_torch_and_numpy(tmp_path):
    torch = pytest.importorskip("torch")
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    sd = {"emb.weight": torch.randn(16, 8), "layers.0.bias": torch.arange(5.0),
          "head.weight": torch.randn(3, 8, dtype=torch.bfloat16)}
    st.write_weights("r0", sd)
    back = Store.open(str(tmp_path / "s.zarr")).read_weights("r0")
    assert list(back) == list(sd)
    np.testing.assert_array_equal(back["emb.weight"], sd["emb.weight"].numpy())
    np.testing.assert_array_equal(back["head.weight"], sd["head.weight"].float().numpy())
    assert st.root["runs/r0/weights"].attrs["dtypes"]["head.weight"] == "bfloat16"
    with pytest.raises(RunConflictError, match="already has weights"):
        st.write_weights("r0", sd)


def test_results_round_trip(make_store):
    st = make_store()
    res = xr.Dataset({"accuracy": (("layer", "fold"), np.random.default_rng(0).random((3, 4)))},
                     coords={"layer": ["embed", "L0", "L1"]}, attrs={"method": "probe"})
    st.write_result("probes/parity", res)
    st.write_result("flags", xr.Dataset({"trivial": ("x", np.zeros(3, bool))}))  # all fill value
    assert st.results() == ["flags", "probes/parity"]
    from store import validate

    assert validate(st).ok, validate(st).problems
    back = st.read_result("probes/parity")
    from store.contents.results import MADE_ATTRS

    assert set(MADE_ATTRS) <= set(back.attrs)  # who and what made it, stamped as it is written
    back.attrs = {k: v for k, v in back.attrs.items() if k not in MADE_ATTRS}
    xr.testing.assert_identical(back, res)
    with pytest.raises(MissingError, match="no result 'nope'.*probes/parity"):
        st.read_result("nope")


def test_root_attributes_record_schema_and_provenance(make_store):
    a = make_store().attrs
    assert a["schema"] == "layerstate/1"
    assert {"title", "created", "tool_version", "provenance"} <= set(a)
    assert "numpy" in a["provenance"]["packages"]


# ----------------------------------------------------------------------- bad input
def test_path_that_is_not_a_store(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hi")
    with pytest.raises(NotAStoreError, match="not a layerstate store"):
        Store.open(str(tmp_path / "plain"))
    with pytest.raises(NotAStoreError, match="does not exist"):
        Store.open(str(tmp_path / "missing"))


def test_create_never_overwrites(tmp_path, make_store):
    st = make_store()
    with pytest.raises(RunConflictError, match="already exists and is a store"):
        Store.create(str(st.location))
    assert Store.open(str(st.location)).run_ids() == ["r0"]


def test_newer_schema_is_refused(make_store):
    st = make_store()
    st.root.attrs["schema"] = "layerstate/99"
    st.consolidate()
    with pytest.raises(SchemaVersionError, match="newer than this layerstate.*upgrade"):
        Store.open(str(st.location))


def test_missing_run_and_length_name_what_exists(make_store):
    st = make_store(lengths=(12,))
    with pytest.raises(MissingError, match="run 'zz' is not in .*runs there: r0"):
        st.open_length("zz", 12)
    with pytest.raises(MissingError, match="no len group for length 40; stored lengths: 12"):
        st.open_length("r0", 40)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: a.update(hidden=a["hidden"][..., 0]), r"hidden has 3 dims"),
        (lambda a: a.update(tokens=a["tokens"][:-1]), r"tokens has shape \(9, 12\); expected \(10, 12\)"),
        (lambda a: a["labels"].update(parity=a["labels"]["parity"][:, :-1]), r"label 'parity' has shape"),
        (lambda a: a.update(tokens=a["tokens"].astype(str)), r"tokens must be integers"),
        (lambda a: a.update(hidden=a["hidden"].astype(object)), r"hidden must be a numeric array"),
    ],
)
def test_malformed_arrays_are_refused_and_nothing_is_written(tmp_path, change, match):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(0), n=10)
    change(arrs)
    with pytest.raises(InvalidArrayError, match=match):
        st.write_length("r0", 12, **arrs)
    with pytest.raises((IncompleteError, MissingError)):  # nothing readable was stored
        st.open_length("r0", 12)


def test_nan_hidden_refused_unless_allowed_and_recorded(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(0), n=10)
    arrs["hidden"][3, 4, 1, 0] = np.nan
    with pytest.raises(InvalidArrayError, match="NaN or Inf.*sequence 3, position 4, layer L0.*allow_nonfinite"):
        st.write_length("r0", 12, **arrs)
    st.add_run("r1", task="parity", arch="lstm", seed=1)
    st.write_length("r1", 12, **arrs, allow_nonfinite=True)
    assert st.open_length("r1", 12).attrs["nonfinite_allowed"] is True


def test_values_beyond_float16_are_refused_not_stored_as_inf(tmp_path):
    """A finite float32 state above 65504 would become Inf in the float16 cast: refused, with
    the fix (store float32), naming the run and length (a grid's capture has many) and the
    first bad cell of the right block."""
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(0), n=10)
    arrs["hidden"] = arrs["hidden"].astype("float32")
    arrs["hidden"][7, 2, 2, 1] = 1e5
    with pytest.raises(InvalidArrayError,
                       match=r"^run 'r0', length 12: hidden exceeds the float16 range \(\|x\| up to 1e\+05, first at sequence 7, "
                             r"position 2, layer L1\); store it as float32"):
        st.write_length("r0", 12, **arrs, block_size=4)
    # the unfinished float16 group (block 0 was written) is replaced when written as float32
    with pytest.warns(UserWarning, match=r"replacing the unfinished len_012 of run 'r0'.*dtype"):
        st.write_length("r0", 12, **arrs, block_size=4, dtype="float32")
    assert float(st.load_length("r0", 12).hidden.max()) == 1e5
    # logits overflow the same way
    st.add_run("r1", task="parity", arch="lstm", seed=1)
    big = {**arrs, "hidden": np.clip(arrs["hidden"], -10, 10),
           "logits": np.full(arrs["logits"].shape, 7e4, "float32")}
    with pytest.raises(InvalidArrayError, match="logits exceeds the float16 range"):
        st.write_length("r1", 12, **big)


def test_overflow_checks_cover_sites_and_float32_and_keep_half_written_groups(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(0), n=8)
    site = np.zeros((8, 12, 3), "float32")
    site[5, 1, 0] = 1e5
    spec = {"site_L0_cell": (("position", "f"), (12, 3), "float16")}
    with st.length_writer("r0", 12, n_sequences=8, n_features=8, n_layers=2, labels=["parity", "ones"],
                          n_classes=2, block_size=4, extra=spec) as w:
        w.write_block(0, **arrs_block(arrs, 0, 4), extra={"site_L0_cell": site[:4]})
        with pytest.raises(InvalidArrayError, match=r"site_L0_cell exceeds the float16 range.*sequence 5, position 1"):
            w.write_block(1, **arrs_block(arrs, 4, 8), extra={"site_L0_cell": site[4:]})
    # block 0 is finished: a different layout other than the dtype is refused, not replaced
    with pytest.raises(RunConflictError, match="different layout"):
        st.length_writer("r0", 12, n_sequences=8, n_features=8, n_layers=2, labels=["parity", "ones"],
                         n_classes=2, block_size=2, extra=spec)
    # float32 storage that overflows: the advice is not "store float32"
    st.add_run("r1", task="parity", arch="lstm", seed=1)
    huge = {**arrs, "hidden": arrs["hidden"].astype("float64")}
    huge["hidden"][0, 0, 0, 0] = 1e39
    with pytest.raises(InvalidArrayError, match=r"hidden exceeds the float32 range.*rescale the values or fix the model"):
        st.write_length("r1", 12, **huge, dtype="float32")


def arrs_block(arrs, a, b):
    return {"hidden": arrs["hidden"][a:b], "tokens": arrs["tokens"][a:b], "logits": arrs["logits"][a:b],
            "labels": {k: v[a:b] for k, v in arrs["labels"].items()}}


def test_rewriting_a_length_with_a_different_layout_is_refused(make_store):
    st = make_store(n=64)
    arrs = synthetic_arrays(np.random.default_rng(9), n=32)
    with pytest.raises(RunConflictError, match="different layout"):
        st.write_length("r0", 12, **arrs)
    assert st.open_length("r0", 12).sizes["sequence"] == 64


def test_read_only_store_refuses_writes(make_store):
    st = Store.open(str(make_store().location))
    with pytest.raises(PermissionError, match="read-only"):
        st.add_run("r9", task="parity", arch="lstm", seed=0)


def test_deferred_consolidation_snapshots_once_at_the_end(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    with st.deferred_consolidation():
        st.add_run("r0", task="parity", arch="lstm", seed=0)
        st.add_run("r1", task="parity", arch="lstm", seed=1)
        # the read-only snapshot has not moved yet ...
        assert Store.open(str(tmp_path / "s.zarr")).run_ids() == []
    # ... and holds both runs once the block ends
    assert Store.open(str(tmp_path / "s.zarr")).run_ids() == ["r0", "r1"]


def test_torch_tensors_are_accepted_wherever_arrays_are(tmp_path):
    torch = pytest.importorskip("torch")
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    arrs = synthetic_arrays(np.random.default_rng(3), n=8)
    hidden = torch.from_numpy(arrs["hidden"]).to(torch.bfloat16)  # numpy has no bfloat16
    st.write_length("r0", hidden=hidden, tokens=torch.from_numpy(arrs["tokens"]),
                    labels={k: torch.from_numpy(v) for k, v in arrs["labels"].items()},
                    logits=torch.from_numpy(arrs["logits"]))
    np.testing.assert_array_equal(st.open_length("r0", 12).hidden.values,
                                  hidden.float().numpy().astype("float16"))
