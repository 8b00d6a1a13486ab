"""A writer's store on a local disk is walked with the operating system's own calls, not
through zarr's event loop one node at a time: the consolidated snapshot it writes is zarr's,
byte for byte, and the result names it lists are those zarr's walk finds; a damaged node
document still fails naming the file."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from store import Store
from store.contents.results import result_names
from store.errors import MetadataDamagedError
from store.metadata import digests


def _store(make_store):
    st = make_store(runs=("r0", "r1"), lengths=(8, 12), n=16)
    ds = xr.Dataset({"acc": (("run", "layer"), np.arange(4.0).reshape(2, 2))}, coords={"run": ["r0", "r1"]})
    st.write_result("probes/parity", ds)
    st.write_result("probes/dyck", ds)
    st.write_result("claims", ds)
    st.write_result("claims/extra", ds)  # a result whose group also holds another result
    zarr.open_group(st.root.store, path="results/empty", mode="a", zarr_format=3)  # holds no array
    (st.root.store.root / "results" / "not-a-node").mkdir()  # a folder zarr does not recognise
    return st


def test_the_snapshot_written_is_zarrs_byte_for_byte(make_store, monkeypatch):
    st = _store(make_store)
    st.consolidate()
    root = st.root.store.root
    ours = (root / "zarr.json").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(zarr.storage.LocalStore(root))
    assert (root / "zarr.json").read_bytes() == ours
    # and the fast path was the one taken: zarr's own is never called
    called = []
    monkeypatch.setattr(digests.zarr, "consolidate_metadata", lambda zs: called.append(zs))
    st.write_result("probes/s3", xr.Dataset({"x": ("run", [1.0])}))
    snapshot, _ = digests.snapshot_entries(json.loads((root / "zarr.json").read_bytes()))
    assert not called and "results/probes/s3" in snapshot


def test_result_names_are_those_zarrs_walk_finds(make_store):
    st = _store(make_store)
    assert st.root.metadata.consolidated_metadata is None  # a writer: no snapshot to list from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's walk warns of the folder it does not recognise
        walked = sorted(path for path, node in st.root["results"].members(max_depth=None)
                        if isinstance(node, zarr.Group) and any(True for _ in node.arrays()))
    assert result_names(st.root) == walked == ["claims", "claims/extra", "probes/dyck", "probes/parity"]
    assert Store.open(str(st.root.store.root)).results() == walked  # read-only: from the snapshot


def test_a_damaged_node_document_fails_naming_the_file(make_store):
    st = _store(make_store)
    doc = st.root.store.root / "results" / "claims" / "acc" / "zarr.json"
    doc.write_bytes(doc.read_bytes().replace(b'"float64"', b'"flaot64"'))
    with pytest.raises(MetadataDamagedError, match=r"results/claims/acc/zarr.json is damaged.*layerstate repair"):
        st.consolidate()
