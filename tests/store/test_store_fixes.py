"""Three store fixes: validate on sharded arrays, fsync of blocks zarr writes itself, and the
schema versions a reader refuses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from zarr.codecs import Crc32cCodec

from layerstate.cli import main
from store import SchemaVersionError, Store, validate

N, LENGTH = 10, 4  # 10 sequences in shards of 4: the last shard is short
LAYERS = np.array(["embed", "L0", "L1"], dtype=object)
HIDDEN = "runs/r0/len_004/hidden"


def _cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def _files(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _dataset(hidden: np.ndarray) -> xr.Dataset:
    tokens = np.random.default_rng(1).integers(0, 2, (N, LENGTH)).astype("int32")
    return xr.Dataset(
        {"hidden": (("sequence", "position", "layer", "feature"), hidden),
         "tokens": (("sequence", "position"), tokens),
         "parity": (("sequence", "position"), np.cumsum(tokens, axis=1).astype("int32") % 2),
         "mask": (("sequence", "position"), np.ones((N, LENGTH), bool))},
        coords={"layer": LAYERS},
    )


def _hidden() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(N, LENGTH, len(LAYERS), 4)).astype("float32")


def _sharded_store(path: Path, how: str, hidden: np.ndarray) -> None:
    """A store another tool wrote, its ``hidden`` sharded: inner chunks of 2 sequences x one
    layer, shards of 4 sequences x every layer (so 3 shards, the last one short)."""
    root = zarr.open_group(path, mode="w-", zarr_format=3)
    root.attrs["schema"] = "layerstate/1"
    run = root.require_group("runs").create_group("r0")
    run.attrs.update(task="parity", arch="lstm", variant="default", seed=0)
    chunks, shards = (2, LENGTH, 1, 4), (4, LENGTH, len(LAYERS), 4)
    if how == "xarray":
        _dataset(hidden).to_zarr(path, group="runs/r0/len_004", mode="w-", zarr_format=3,
                                 encoding={"hidden": {"chunks": chunks, "shards": shards}})
        return
    # zarr.create_array(shards=...), inner chunks ending in crc32c (S4)
    _dataset(hidden).drop_vars("hidden").to_zarr(path, group="runs/r0/len_004", mode="w-",
                                                  zarr_format=3, consolidated=False)
    arr = zarr.create_array(path, name=HIDDEN, shape=hidden.shape, dtype="float32", chunks=chunks,
                            shards=shards, compressors=Crc32cCodec(), fill_value=float("nan"),
                            dimension_names=["sequence", "position", "layer", "feature"])
    arr[...] = hidden
    zarr.consolidate_metadata(str(path), zarr_format=3)


@pytest.mark.parametrize("how", ["xarray", "zarr"])
def test_a_correct_sharded_array_validates_and_one_nan_is_counted_once(tmp_path, how):
    good = tmp_path / "good.zarr"
    _sharded_store(good, how, _hidden())
    rep = validate(str(good))
    assert rep.ok, rep.problems
    assert not any("non-finite" in p or "not stored" in w for p in rep.problems for w in rep.warnings)
    assert rep.n_chunks >= 3  # the three shards of hidden were decoded
    assert (HIDDEN in rep.unchecksummed) == (how == "xarray")  # zstd alone vs crc32c inside
    res = _cli("validate", good)
    assert res.exit_code == 0, res.output

    values = _hidden()
    values[9, 1, 2, 3] = np.nan  # in the last, short shard
    bad = tmp_path / "bad.zarr"
    _sharded_store(bad, how, values)
    rep = validate(str(bad))
    nonfinite = [p for p in rep.problems if "non-finite" in p]
    assert nonfinite == [f"{HIDDEN}: 1 non-finite value(s) (NaN/inf) in 1 shard(s) (S20): write finite "
                         "values, or set the group attribute nonfinite_allowed=true if they are meant"]
    res = _cli("validate", bad)
    assert res.exit_code == 2 and f"{HIDDEN}: 1 non-finite value(s)" in res.output


def test_a_damaged_or_missing_shard_is_named(tmp_path):
    path = tmp_path / "s.zarr"
    _sharded_store(path, "zarr", _hidden())
    shard = path / HIDDEN / "c" / "1" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[5] ^= 0x10  # a byte of the first inner chunk: its crc32c no longer matches
    shard.write_bytes(bytes(raw))
    rep = validate(str(path))
    assert [p for p in rep.problems if "corrupt" in p] and all(
        p.startswith(f"{HIDDEN}: shard (1, 0, 0, 0) ") for p in rep.problems if "corrupt" in p)
    # shard 1 holds sequences 4-7: blocks (inner chunks of 2 sequences) 2 and 3, both forgotten
    # by repair --forget-damaged, not block 1
    assert rep.damaged_chunks == [(HIDDEN, (1, 0, 0, 0), "runs/r0/len_004", (2, 3))]
    shard.unlink()  # an absent shard of a NaN-filled array reads as 4*4*3*4 NaN (S6, S20)
    rep = validate(str(path))
    assert f"{HIDDEN} shard (1, 0, 0, 0)" in rep.absent
    assert f"{HIDDEN}: 192 non-finite value(s) (NaN/inf) in 1 shard(s)" in " ".join(rep.problems)


# ---------------------------------------------------------------------- fsync of zarr's writes
@pytest.mark.parametrize("path", ["zarr", "fast"])
def test_a_short_last_block_is_fsynced_before_it_is_recorded(tmp_path, monkeypatch, path):
    """Whether the short last block goes through zarr's setitem (as it did before the fast
    path took it; still so for other codecs) or through the padded fast path."""
    import store.io.blocks as pipeline_mod
    from store.io.chunks import ChunkWriter

    if path == "zarr":
        real_row = ChunkWriter.write_row
        monkeypatch.setattr(ChunkWriter, "write_row",
                            lambda self, *a, pad_last=False, **k: real_row(self, *a, **k))
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r", task="t", arch="a", seed=0)
    group = tmp_path / "s.zarr" / "runs" / "r" / "len_006"
    synced: set[Path] = set()
    real = pipeline_mod.make_durable
    rng = np.random.default_rng(0)
    with st.length_writer("r", 6, n_sequences=10, n_layers=1, n_features=8, labels=["y"],
                          block_size=4) as w:

        def spy(paths):
            for p in paths:  # fsynced while its block is not yet recorded
                assert int(Path(p).relative_to(group).parts[2]) not in w._recorded()
            synced.update(Path(p) for p in paths)
            real(paths)

        monkeypatch.setattr(pipeline_mod, "make_durable", spy)
        for b, m in ((0, 4), (1, 4), (2, 2)):  # block 2: sequences 8-9, half a chunk
            tok = rng.integers(0, 2, (m, 6))
            w.write_block(b, hidden=rng.standard_normal((m, 6, 2, 8)), tokens=tok, labels={"y": tok})
    assert w.complete
    variables = ("hidden", "tokens", "y", "mask")
    last = {p for var in variables for p in (group / var / "c" / "2").rglob("*") if p.is_file()}
    assert len(last) == 2 + 3  # hidden: one chunk per layer; tokens, y, mask: one each
    assert last <= synced
    every = {p for var in variables for p in (group / var / "c").rglob("*") if p.is_file()}
    assert len(every) == 3 * 5 and every <= synced


def test_written_files_follow_the_grid_of_store_keys(tmp_path):
    from store.io.blocks import written_files

    plain = zarr.create_array(tmp_path / "a", shape=(10, 3, 4), chunks=(4, 1, 4), dtype="float32")
    got = {str(p.relative_to(tmp_path / "a")) for p in written_files(plain, slice(6, 10))}
    assert got == {f"c/{r}/{k}/0" for r in (1, 2) for k in range(3)}
    sharded = zarr.create_array(tmp_path / "b", shape=(10, 3, 4), chunks=(2, 1, 4), shards=(4, 3, 4),
                                dtype="float32")
    got = {str(p.relative_to(tmp_path / "b")) for p in written_files(sharded, slice(8, 10))}
    assert got == {"c/2/0/0"}  # one shard holds every inner chunk of those rows
    sharded[8:10] = 1.0
    assert all(p.is_file() for p in written_files(sharded, slice(8, 10)))
    memory = zarr.create_array(zarr.storage.MemoryStore(), shape=(4, 2), chunks=(2, 2), dtype="int32")
    assert written_files(memory, slice(0, 4)) == []  # nothing to fsync off a local disk


# ---------------------------------------------------------------------- schema versions
REFUSED = {
    "layerstate/0": "a version of the layerstate schema that does not exist",
    "layerstate/01": "a version of the layerstate schema that does not exist",
    "layerstate/1.1": "a version of the layerstate schema that does not exist",
    "layerstate/2": "newer than this layerstate understands (layerstate/1); upgrade layerstate",
    "othertool/1": "not a layerstate schema",
}


@pytest.mark.parametrize("schema", list(REFUSED))
def test_a_schema_other_than_layerstate_1_is_refused_in_one_line(make_store, schema):
    st = make_store(lengths=(6,), n=8, block_size=4)
    path = Path(str(st.location))
    st.root.attrs["schema"] = schema
    st.consolidate()  # the snapshot and the digests agree: refused for the schema, not as damage
    before = _files(path)
    with pytest.raises(SchemaVersionError) as err:
        Store.open(str(path))
    line = str(err.value)
    assert f"schema {schema!r}" in line and REFUSED[schema] in line and "\n" not in line
    if schema != "layerstate/2":  # the fix: what a layerstate/1 store says, or another reader
        assert '"layerstate/1"' in line
    for args in (["inspect", path], ["validate", path]):
        res = _cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert f"schema {schema!r}" in res.output and REFUSED[schema] in res.output
    assert len(_cli("inspect", path).output.strip().splitlines()) == 1
    res = _cli("pull", path, path.parent / "copy.zarr")  # pull applies the same rule
    assert res.exit_code == 2 and REFUSED[schema] in res.output
    assert not (path.parent / "copy.zarr").exists()
    assert _files(path) == before


def test_layerstate_1_still_opens(make_store):
    st = make_store(lengths=(6,), n=8, block_size=4)
    assert Store.open(str(st.location)).attrs["schema"] == "layerstate/1"


# ---------------------------------------------------------------------- the padded edge chunk
@pytest.mark.parametrize(("dtype", "fill"), [("float16", float("nan")), ("float32", float("nan")),
                                             ("int32", -1), ("bool", False), ("float32", 0.5)])
def test_a_padded_edge_chunk_is_bit_identical_to_zarrs(tmp_path, dtype, fill):
    from store.io.chunks import ChunkWriter
    from store.zarrutil import CHECKSUM

    shape, chunks = (10, 5, 3, 4), (4, 5, 1, 4)  # rows 8-9: half an edge chunk
    values = (np.random.default_rng(3).standard_normal(shape) * 3).astype(dtype)
    arrays = {name: zarr.create_array(tmp_path / name, shape=shape, chunks=chunks, dtype=dtype,
                                      compressors=CHECKSUM, fill_value=fill,
                                      config={"write_empty_chunks": True})
              for name in ("ref", "fast")}
    with zarr.config.set({"array.write_empty_chunks": True}):
        arrays["ref"][:] = values
    cw = ChunkWriter()
    assert cw.write_row(arrays["fast"], 2, values[8:]) is None  # only when asked
    for row in range(3):
        assert cw.write_row(arrays["fast"], row, values[row * 4 : (row + 1) * 4], check_finite=True,
                            pad_last=True)
    assert cw.write_row(arrays["fast"], 2, values[8:9], pad_last=True) is None  # not up to the end
    cw.close()
    ref = {str(p.relative_to(tmp_path / "ref")): p.read_bytes() for p in (tmp_path / "ref" / "c").rglob("*")
           if p.is_file()}
    fast = {str(p.relative_to(tmp_path / "fast")): p.read_bytes() for p in (tmp_path / "fast" / "c").rglob("*")
            if p.is_file()}
    assert len(ref) == 9 and ref == fast
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "fast")[:], values)


def test_a_nan_in_a_short_last_block_is_refused_and_its_padding_is_not(tmp_path):
    from store import InvalidArrayError

    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r", task="t", arch="a", seed=0)
    rng = np.random.default_rng(0)
    blocks = []
    for m in (4, 4, 2):
        tok = rng.integers(0, 2, (m, 6))
        blocks.append(dict(hidden=rng.standard_normal((m, 6, 2, 8)), tokens=tok, labels={"y": tok}))
    bad = dict(blocks[2], hidden=blocks[2]["hidden"].copy())
    bad["hidden"][1, 2, 0, 3] = np.nan

    def writer():
        return st.length_writer("r", 6, n_sequences=10, n_layers=1, n_features=8, labels=["y"],
                                block_size=4)

    with pytest.raises(InvalidArrayError, match="NaN or Inf"), writer() as w:
        w.write_block(0, **blocks[0])
        w.write_block(2, **bad)
    with writer() as w:
        assert w.missing_blocks() == [1, 2]
        for b in (1, 2):
            w.write_block(b, **blocks[b])  # the NaN padding of its edge chunk passes the check
        assert w.complete
    got = st.load_length("r", 6).hidden.values
    np.testing.assert_array_equal(got, np.concatenate([b["hidden"] for b in blocks]).astype("float16"))
    assert validate(str(tmp_path / "s.zarr")).ok


def test_make_durable_syncs_the_directories_that_name_new_chunks(tmp_path, monkeypatch):
    import os

    from store.io import chunks

    arr = tmp_path / "s.zarr" / "runs" / "r" / "len_004" / "hidden"
    files = [arr / "c" / "0" / "0" / str(k) / "0" for k in range(2)]
    for f in files:
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
    opened: list[str] = []
    real_open = os.open

    def spy(path, flags, *a, **k):
        opened.append(str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    chunks.make_durable(files)
    dirs = [p for p in opened if Path(p).is_dir()]
    expected = {str(arr / "c" / "0" / "0" / "0"), str(arr / "c" / "0" / "0" / "1"),
                str(arr / "c" / "0" / "0"), str(arr / "c" / "0"), str(arr / "c"), str(arr)}
    assert set(dirs) == expected  # up to the array's directory, never above it
    assert dirs.index(str(arr)) > dirs.index(str(arr / "c" / "0"))  # deepest first
    other = tmp_path / "plain.bin"
    other.write_bytes(b"y")
    opened.clear()
    chunks.make_durable([other])
    assert [p for p in opened if Path(p).is_dir()] == [str(tmp_path)]
