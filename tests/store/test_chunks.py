"""The whole-chunk fast path writes exactly the bytes zarr writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from store import InvalidArrayError, Store
from store.io.chunks import ChunkWriter, encode_chunk, fast_path_ok
from store.zarrutil import CHECKSUM


def _chunk_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("c/**/*")) if p.is_file()}


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "bool"])
def test_chunk_bytes_equal_zarr(tmp_path, dtype):
    rng = np.random.default_rng(0)
    shape, chunks = (12, 5, 3, 4), (4, 5, 1, 4)
    values = (rng.standard_normal(shape) * 3).astype(dtype)
    arrays = {}
    for name in ("ref", "fast"):
        arrays[name] = zarr.create_array(
            tmp_path / name, shape=shape, chunks=chunks, dtype=dtype, compressors=CHECKSUM,
            fill_value=0, config={"write_empty_chunks": True},
        )
    with zarr.config.set({"array.write_empty_chunks": True}):
        arrays["ref"][:] = values
    cw = ChunkWriter()
    for row in range(3):
        assert cw.write_row(arrays["fast"], row, values[row * 4 : (row + 1) * 4])
    cw.close()
    ref, fast = _chunk_files(tmp_path / "ref"), _chunk_files(tmp_path / "fast")
    assert len(ref) == 3 * 3 and ref == fast
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "fast")[:], values)


def test_checksum_is_crc32c_of_the_data():
    piece = np.arange(6, dtype="<i4").reshape(2, 3)
    out = encode_chunk(piece)
    assert out[:-4].tobytes() == piece.tobytes()
    import google_crc32c

    assert int.from_bytes(out[-4:].tobytes(), "little") == google_crc32c.value(piece.tobytes())


def test_declines_what_it_cannot_write(tmp_path):
    cw = ChunkWriter()
    zstd = zarr.create_array(tmp_path / "z", shape=(8, 4), chunks=(4, 4), dtype="float32",
                             compressors=(ZstdCodec(),))
    assert not fast_path_ok(zstd) and not cw.write_row(zstd, 0, np.zeros((4, 4), "float32"))
    ragged = zarr.create_array(tmp_path / "r", shape=(6, 4), chunks=(4, 4), dtype="float32",
                               compressors=CHECKSUM)
    assert fast_path_ok(ragged)
    # the last row is a partial chunk: zarr must pad it, so the fast path declines
    assert not cw.write_row(ragged, 1, np.zeros((2, 4), "float32"))
    # a wrong-sized block is declined too
    assert not cw.write_row(ragged, 0, np.zeros((3, 4), "float32"))
    cw.close()
    assert not _chunk_files(tmp_path / "r")


def test_writer_output_equals_plain_zarr_writes(tmp_path):
    """A store written by LengthWriter holds the same chunk bytes as zarr's own setitem."""
    rng = np.random.default_rng(1)
    n, L, F = 10, 6, 8
    hidden = rng.standard_normal((n, L, 3, F)).astype("float16")
    tokens = rng.integers(0, 3, (n, L))
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r", task="t", arch="a", seed=0)
    st.write_length("r", L, hidden=hidden, tokens=tokens, labels={"y": tokens % 2}, block_size=4)
    grp = zarr.open_group(tmp_path / "s.zarr" / "runs" / "r" / "len_006", mode="r")
    for var in ("hidden", "tokens", "y", "mask"):
        src = grp[var]
        ref = zarr.create_array(tmp_path / f"ref_{var}", shape=src.shape, chunks=src.chunks,
                                dtype=src.dtype, compressors=CHECKSUM, fill_value=src.fill_value,
                                config={"write_empty_chunks": True})
        with zarr.config.set({"array.write_empty_chunks": True}):
            ref[:] = src[:]
        assert _chunk_files(tmp_path / f"ref_{var}") == _chunk_files(
            tmp_path / "s.zarr" / "runs" / "r" / "len_006" / var
        ), var
    np.testing.assert_array_equal(st.load_length("r", L).hidden.values, hidden)


@pytest.mark.parametrize("dtype", ["float16", "int32", "bool"])
def test_read_whole_equals_zarr_including_edge_and_missing_chunks(tmp_path, dtype):
    from store.io.chunks import read_whole

    rng = np.random.default_rng(2)
    arr = zarr.create_array(tmp_path / "a", shape=(10, 5, 3), chunks=(4, 5, 1), dtype=dtype,
                            compressors=CHECKSUM, fill_value=1, config={"write_empty_chunks": True})
    values = (rng.standard_normal((10, 5, 3)) * 3).astype(dtype)
    arr[:8] = values[:8]  # rows 8-9 (an edge chunk) never written: fill value
    got = read_whole(zarr.open_array(tmp_path / "a", mode="r"))
    np.testing.assert_array_equal(got, arr[:])
    assert got.dtype == arr.dtype


def test_read_whole_refuses_a_damaged_chunk(tmp_path):
    from store.io.chunks import read_whole

    arr = zarr.create_array(tmp_path / "a", shape=(8, 4), chunks=(4, 4), dtype="float32",
                            compressors=CHECKSUM, fill_value=0)
    arr[:] = np.arange(32, dtype="float32").reshape(8, 4)
    f = tmp_path / "a" / "c" / "1" / "0"
    raw = bytearray(f.read_bytes())
    raw[3] ^= 0x40
    f.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum do not match"):
        read_whole(zarr.open_array(tmp_path / "a", mode="r"))
    f.write_bytes(bytes(raw[:10]))
    with pytest.raises(ValueError, match="buffer size"):
        read_whole(zarr.open_array(tmp_path / "a", mode="r"))


def test_fast_paths_on_a_non_local_store():
    """memory:// (any fsspec/zarr store) goes through Store.set/get, with the same bytes."""
    from zarr.storage import MemoryStore

    from store.io.chunks import read_whole

    values = np.random.default_rng(4).standard_normal((8, 6, 2)).astype("float16")
    stores = {name: MemoryStore() for name in ("ref", "fast")}
    arrays = {name: zarr.create_array(st, name="g/a", shape=values.shape, chunks=(4, 6, 1), dtype="float16",
                                      compressors=CHECKSUM, fill_value=0, config={"write_empty_chunks": True})
              for name, st in stores.items()}
    arrays["ref"][:] = values
    cw = ChunkWriter()
    assert cw.write_row(arrays["fast"], 0, values[:4]) and cw.write_row(arrays["fast"], 1, values[4:])
    cw.close()
    keys = sorted(k for k in stores["ref"]._store_dict if "/c/" in k)
    assert len(keys) == 4
    assert all(stores["ref"]._store_dict[k].to_bytes() == stores["fast"]._store_dict[k].to_bytes() for k in keys)
    np.testing.assert_array_equal(read_whole(arrays["fast"]), values)


def _new_store(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r", task="t", arch="a", seed=0)
    return st


def _writer(st, **kw):
    return st.length_writer("r", 6, n_sequences=12, n_layers=1, n_features=8, labels=["y"], block_size=4, **kw)


def _block(b):
    rng = np.random.default_rng(b)
    tok = rng.integers(0, 2, (4, 6))
    return dict(hidden=rng.standard_normal((4, 6, 2, 8)), tokens=tok, labels={"y": tok})


def test_a_block_is_recorded_only_after_its_chunks_are_stored(tmp_path, monkeypatch):
    """Blocks are stored one behind the caller; a chunk that fails keeps its block unrecorded."""
    st = _new_store(tmp_path)
    real = ChunkWriter._encode_and_set
    failing_key = "/tokens/c/1/"

    def failing(self, store, key, *args):
        if failing_key in key:
            raise OSError("disk full (simulated)")
        return real(self, store, key, *args)

    monkeypatch.setattr(ChunkWriter, "_encode_and_set", failing)
    with pytest.raises(OSError, match="disk full"), _writer(st) as w:
        w.write_block(0, **_block(0))
        w.write_block(1, **_block(1))  # returns: tokens are stored in the background
        w.write_block(2, **_block(2))  # settles block 1, whose failure surfaces here
    with _writer(st) as w:
        assert w.completed_blocks() == {0}  # a write_block that raised records nothing
        w.write_block(2, **_block(2))
    # a float chunk is checked before write_block returns, so its failure surfaces at once
    failing_key = "/hidden/c/1/"
    with pytest.raises(OSError, match="disk full"), _writer(st) as w:
        w.write_block(1, **_block(1))
    monkeypatch.setattr(ChunkWriter, "_encode_and_set", real)
    with _writer(st) as w:
        assert w.missing_blocks() == [1]
        w.write_block(1, **_block(1))
        assert w.complete
    got = st.load_length("r", 6).hidden.values
    np.testing.assert_array_equal(got, np.concatenate([_block(b)["hidden"] for b in range(3)]).astype("float16"))


def test_an_error_after_write_block_still_records_the_stored_block(tmp_path):
    st = _new_store(tmp_path)
    with pytest.raises(RuntimeError), _writer(st) as w:
        w.write_block(0, **_block(0))
        raise RuntimeError("the model crashed on block 1")
    with _writer(st) as w:
        assert w.missing_blocks() == [1, 2]


def test_a_resumed_writer_removes_temp_files_of_killed_chunk_writes(tmp_path):
    st = _new_store(tmp_path)
    with pytest.raises(RuntimeError), _writer(st) as w:
        w.write_block(0, **_block(0))
        raise RuntimeError("killed")
    stray = tmp_path / "s.zarr" / "runs" / "r" / "len_006" / "hidden" / "c" / "1" / "0" / "0" / "0.abc.partial"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"half a chunk")
    with _writer(st) as w:
        assert not stray.exists()
        for b in w.missing_blocks():
            w.write_block(b, **_block(b))
    assert not list((tmp_path / "s.zarr").rglob("*.partial"))


def test_a_refused_rewrite_leaves_the_recorded_block_intact(tmp_path):
    st = _new_store(tmp_path)
    bad = _block(0)
    bad["hidden"] = bad["hidden"].copy()
    bad["hidden"][2, 3, 1, 4] = np.nan
    bad["tokens"] = bad["tokens"] + 1  # a valid array that must not replace the stored one
    with _writer(st) as w:
        w.write_block(0, **_block(0))
        with pytest.raises(InvalidArrayError, match="NaN or Inf"):
            w.write_block(0, **bad)  # block 0 is still being stored: checked before anything
        for b in (1, 2):
            w.write_block(b, **_block(b))
    ds = st.load_length("r", 6)
    np.testing.assert_array_equal(ds.hidden.values[:4], _block(0)["hidden"].astype("float16"))
    np.testing.assert_array_equal(ds.tokens.values[:4], _block(0)["tokens"])


def test_every_chunk_file_is_fsynced_before_its_block_is_recorded(tmp_path, monkeypatch):
    import store.io.blocks as pipeline_mod

    st = _new_store(tmp_path)
    synced: set[str] = set()
    real = pipeline_mod.make_durable
    with _writer(st) as w:

        def spy(paths):
            for p in paths:  # a block's files are fsynced while it is not yet recorded
                row = int(Path(p).relative_to(tmp_path / "s.zarr" / "runs" / "r" / "len_006").parts[2])
                assert row not in w._recorded()
            synced.update(str(p) for p in paths)
            real(paths)

        monkeypatch.setattr(pipeline_mod, "make_durable", spy)
        for b in range(3):
            w.write_block(b, **_block(b))
    group = tmp_path / "s.zarr" / "runs" / "r" / "len_006"
    written = {str(p) for var in ("hidden", "tokens", "y", "mask") for p in (group / var / "c").rglob("*") if p.is_file()}
    assert len(written) == 3 * 2 + 3 * 3 and written <= synced
