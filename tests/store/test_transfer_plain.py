"""pull / push of stores written without layerstate's bookkeeping (docs/store-format.md,
"Conformance"): no ``spec``, no completion records, no crc32c. Every chunk the arrays' own
metadata names is copied as it is stored, a layer subset is taken by the ``layer`` coordinate's
values, chunks the source never stored stay absent (and are not asked for again on a resume),
and the copy is a store that validate passes.

The spec's example store is the documented block itself (the module fixture of
tests/store/test_open_format.py); a larger plain store, chunked one layer per chunk, is written
here with xarray for the byte counts and the kill through the S3 server.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import store.sharing.transfer as T
from store import CorruptStoreError, MissingError, NotAStoreError, Store, validate
from store.sharing.transfer import MARKER, pull, push
from tests.store.test_open_format import example  # noqa: F401  (the spec's example store, as a fixture)
from tests.store.test_transfer import (
    BUCKET,
    CountingProxy,
    _chunk_bytes,
    _files,
    _killed_half_way,
    _options,
)

RUNS = ("parity-lstm-s0", "parity-lstm-s1")
GROUPS = [f"runs/{r}/len_016" for r in RUNS]


def _arrays(path: Path | str, **opts) -> dict[str, zarr.Array]:
    """Every array of a store by path, read through zarr's own listing (no layerstate)."""
    root = zarr.open_group(str(path), mode="r", **opts)
    return dict(root.arrays()) | {f"{g}/{n}": a for g, grp in root.groups() for n, a in _walk(grp)}


def _walk(grp: zarr.Group):
    for name, arr in grp.arrays():
        yield name, arr
    for name, sub in grp.groups():
        for n, a in _walk(sub):
            yield f"{name}/{n}", a


def _same_arrays(a: Path | str, b: Path | str, *, a_opts=None, b_opts=None) -> None:
    """The two stores hold the same arrays: values, dtype, chunking, codecs, attributes."""
    xa, xb = _arrays(a, **(a_opts or {})), _arrays(b, **(b_opts or {}))
    assert sorted(xa) == sorted(xb)
    for name, arr in xa.items():
        other = xb[name]
        assert arr.metadata.to_dict() == other.metadata.to_dict(), name
        np.testing.assert_array_equal(arr[...], other[...], err_msg=name)


def _chunk_files(path: Path) -> dict[str, str]:
    return {k: v for k, v in _files(path).items() if "/c/" in f"/{k}" or k.endswith("/c")}


def _only_crc_warning(rep) -> None:
    """The copy is a valid store whose one warning is the source's lack of checksums (the copy
    is consolidated with digests, so those two SHOULDs of the source are met)."""
    assert rep.ok, rep.problems
    assert len(rep.warnings) == 1 and "without a crc32c checksum codec" in rep.warnings[0], rep.warnings


# ----------------------------------------------------------------------------- the spec's example
def test_pull_of_the_example_copies_every_chunk_as_stored(example, tmp_path):  # noqa: F811
    rep = pull(str(example), tmp_path / "copy")
    assert rep.chunks == rep.copied == 12 and rep.absent == rep.skipped == 0  # 6 arrays x 2 runs
    _same_arrays(example, tmp_path / "copy")
    assert _chunk_files(tmp_path / "copy") == _chunk_files(example)  # bytes as they are (zstd)
    _only_crc_warning(validate(str(tmp_path / "copy")))
    st = Store.open(str(tmp_path / "copy"))
    assert st.run_ids() == list(RUNS) and "copied_from" not in st.attrs
    ds = st.load_length(RUNS[1], 16)
    src = xr.open_zarr(str(example), group=GROUPS[1])
    np.testing.assert_array_equal(ds.hidden.values, src.hidden.values)
    np.testing.assert_array_equal(ds.parity.values, src.parity.values)
    assert list(ds.layer.values) == ["embed", "L0", "L1"]


def test_push_of_the_example_to_a_directory(example, tmp_path):  # noqa: F811
    rep = push(str(example), str(tmp_path / "there.zarr"))
    assert rep.chunks == rep.copied == 12
    _same_arrays(example, tmp_path / "there.zarr")
    assert _chunk_files(tmp_path / "there.zarr") == _chunk_files(example)
    _only_crc_warning(validate(str(tmp_path / "there.zarr")))


def _cli(*args: str):
    from click.testing import CliRunner

    from layerstate.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_pull_of_one_layer_of_the_example_by_its_coordinate(example, tmp_path):  # noqa: F811
    """The example stores all three layers in one chunk: the chunk is fetched whole, decoded,
    and L1 re-encoded with the array's own codecs, one layer per chunk."""
    res = _cli("pull", example, tmp_path / "one", "--runs", RUNS[0], "--layers", "L1")
    assert res.exit_code == 0, res.output
    assert "1 run(s) (parity-lstm-s0)" in res.output and "5 chunk(s) copied" in res.output
    src = xr.open_zarr(str(example), group=GROUPS[0])
    got = xr.open_zarr(str(tmp_path / "one"), group=GROUPS[0])
    assert list(got.layer.values) == ["L1"] and got.hidden.shape == (64, 16, 1, 8)
    np.testing.assert_array_equal(got.hidden.values, src.hidden.sel(layer=["L1"]).values)
    for name in ("tokens", "parity", "mask", "logits"):
        np.testing.assert_array_equal(got[name].values, src[name].values, err_msg=name)
    hidden = zarr.open_array(str(tmp_path / "one" / GROUPS[0] / "hidden"), mode="r")
    assert hidden.chunks == (64, 16, 1, 8)
    assert [c["name"] for c in hidden.metadata.to_dict()["codecs"]] == ["bytes", "zstd"]  # the source's
    st = Store.open(str(tmp_path / "one"))
    assert st.run_ids() == [RUNS[0]] and st.attrs["copied_from"]["layers"] == ["L1"]
    _only_crc_warning(validate(st))
    bad = _cli("pull", example, tmp_path / "no", "--layers", "L7")
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "layerstate: error: no selected length group has layer 'L7'; layers stored: embed, L0, L1"]
    assert not (tmp_path / "no").exists()


def test_chunks_the_source_never_stored_are_not_an_error_nor_asked_for_twice(
        example, tmp_path, monkeypatch):  # noqa: F811
    src = tmp_path / "acts.zarr"
    shutil.copytree(example, src)
    gone = f"{GROUPS[0]}/tokens/c/0/0"
    (src / gone).unlink()  # never written: reads as the fill value
    whole = pull(str(src), tmp_path / "whole")
    assert whole.absent == 1 and whole.copied == 11
    assert "11 chunk(s) copied, 0 already there, 1 never stored at the source" in T.format_report(whole)
    assert not (tmp_path / "whole" / gone).exists()
    _same_arrays(src, tmp_path / "whole")

    monkeypatch.setattr(T, "ROUND", 2)  # the 12 chunks in 6 rounds; the absent one is in the third
    produce, calls = T.produce, []

    def killed(data, c, where):
        calls.append(c.src)
        if len(calls) == 7:  # in the fourth round, after the marker recorded the absent chunk
            # (the absent chunk never reaches here: calls 1-5 are rounds 1-3, 6-7 round 4)
            raise KeyboardInterrupt
        return produce(data, c, where)

    monkeypatch.setattr(T, "produce", killed)
    with pytest.raises(KeyboardInterrupt):
        pull(str(src), tmp_path / "cut")
    monkeypatch.setattr(T, "produce", produce)
    assert (tmp_path / "cut" / MARKER).exists() and gone in (tmp_path / "cut" / MARKER).read_text()
    with pytest.raises(NotAStoreError):
        Store.open(str(tmp_path / "cut"))

    fetch, asked = T.Side.fetch, []

    def counting(self, keys):
        asked.extend(k for k in keys if "/c/" in k or k.endswith("/c"))
        return fetch(self, keys)

    monkeypatch.setattr(T.Side, "fetch", counting)
    rep = pull(str(src), tmp_path / "cut")
    stored = calls[:5]  # the three rounds before the kill: 6 chunks, one of them absent
    assert gone not in asked and not set(asked) & set(stored)  # nothing stored asked for again
    assert len(asked) == 12 - 5 - 1 and rep.skipped == 5 and rep.absent == 1 and rep.copied == 6
    assert _files(tmp_path / "cut") == _files(tmp_path / "whole")  # bit-identical
    check = validate(str(tmp_path / "cut"))
    assert check.ok, check.problems
    assert any(f"first: {GROUPS[0]}/tokens chunk (0, 0)" in w for w in check.warnings)


def test_a_chunk_without_checksum_that_does_not_decode_is_named(example, tmp_path):  # noqa: F811
    src = tmp_path / "acts.zarr"
    shutil.copytree(example, src)
    chunk = src / GROUPS[1] / "hidden/c/0/0/0/0"
    chunk.write_bytes(chunk.read_bytes()[:1000])  # truncated zstd frame
    res = _cli("pull", src, tmp_path / "copy")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert f"chunk {GROUPS[1]}/hidden/c/0/0/0/0 does not decode with its array's codecs" in res.output
    assert not (tmp_path / "copy" / "zarr.json").exists()
    with pytest.raises(CorruptStoreError, match="does not decode"):
        pull(str(src), tmp_path / "copy2", runs=[RUNS[1]], layers=["L0"])  # a cut decodes it too
    with pytest.raises(MissingError, match="no run 'x'"):
        pull(str(src), tmp_path / "copy3", runs=["x"])


# ----------------------------------------------------------------------------- through S3
def _layered_plain_store(path: Path) -> xr.Dataset:
    """A store written with plain xarray and zarr, hidden chunked 32 sequences x one layer
    (256 KiB a chunk, 2 MiB a layer); no layerstate bookkeeping, zstd, no checksums."""
    root = zarr.open_group(str(path), mode="w-", zarr_format=3)
    root.attrs["schema"] = "layerstate/1"
    run = root.require_group("runs").create_group("p")
    run.attrs.update(task="parity", arch="gru", variant="default", seed=0)
    rng = np.random.default_rng(3)
    n, L, F = 256, 32, 64
    tokens = rng.integers(0, 2, (n, L)).astype("int32")
    parity = (np.cumsum(tokens, axis=1) % 2).astype("int32")
    ds = xr.Dataset(
        {"hidden": (("sequence", "position", "layer", "feature"), rng.normal(size=(n, L, 3, F)).astype("float32")),
         "tokens": (("sequence", "position"), tokens),
         "parity": (("sequence", "position"), parity),
         "mask": (("sequence", "position"), np.ones((n, L), bool))},
        coords={"layer": np.array(["embed", "L0", "L1"], dtype=object)},
    )
    enc = {"hidden": {"chunks": (32, L, 1, F)}, **{v: {"chunks": (32, L)} for v in ("tokens", "parity", "mask")}}
    ds.to_zarr(str(path), group="runs/p/len_032", mode="w-", zarr_format=3, encoding=enc)
    return ds


def test_plain_store_pushed_to_s3_pulled_by_layer_and_resumed_after_kill_9(s3_server, tmp_path):
    import s3fs

    host, port = s3_server["client_kwargs"]["endpoint_url"].removeprefix("http://").split(":")
    proxy = CountingProxy(host, int(port))
    via = {**s3_server, "client_kwargs": {**s3_server["client_kwargs"],
                                          "endpoint_url": f"http://127.0.0.1:{proxy.port}"}}
    try:
        local = tmp_path / "plain.zarr"
        ds = _layered_plain_store(local)
        url = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
        rep = push(str(local), url, storage_options=s3_server)
        assert rep.copied == rep.chunks == 8 * 3 + 8 * 3 + 1  # hidden, three labels/masks, layer
        fs = s3fs.S3FileSystem(**s3_server, skip_instance_cache=True)
        key = url.removeprefix("s3://")
        for rel, digest in _chunk_files(local).items():  # every chunk object as it was stored
            import hashlib

            assert hashlib.sha256(fs.cat_file(f"{key}/{rel}")).hexdigest() == digest, rel
        there = Store.open(url, storage_options=s3_server)
        _only_crc_warning(validate(there))

        # one layer: only its chunks on the wire
        proxy.reset()
        one = pull(url, tmp_path / "one", layers=["L0"], storage_options=via)
        down, size = proxy.reset(), sum(f.stat().st_size for f in (tmp_path / "one").rglob("*") if f.is_file())
        assert size > 1.5 * 2**20 and down <= 1.1 * size, (down, size)  # zstd saves ~7% of 2 MiB
        assert one.copied == one.chunks == 8 + 8 * 3
        got = Store.open(str(tmp_path / "one")).load_length("p", 32)
        assert list(got.layer.values) == ["L0"]
        np.testing.assert_array_equal(got.hidden.values, ds.hidden.sel(layer=["L0"]).values)
        np.testing.assert_array_equal(got.parity.values, ds.parity.values)
        _only_crc_warning(validate(str(tmp_path / "one")))

        # killed half-way with kill -9, resumed: nothing stored fetched again, bit-identical
        whole = tmp_path / "whole"
        proxy.reset()
        pull(url, whole, storage_options=via)
        full = proxy.reset()
        killed = tmp_path / "killed"
        _killed_half_way(proxy, ["pull", url, str(killed), *_options(via)], lambda: _chunk_bytes(killed))
        assert (killed / MARKER).exists() and not (killed / "zarr.json").exists()
        held = _chunk_bytes(killed)
        assert held > 2**20
        proxy.reset()
        again = pull(url, killed, storage_options=via)
        down = proxy.reset()
        assert again.skipped > 0 and again.copied + again.skipped == again.chunks
        assert down <= full - held + 64 * 2**10, (down, full, held)
        assert _files(killed) == _files(whole)
        _same_arrays(local, killed)
        _only_crc_warning(validate(str(killed)))
    finally:
        proxy.close()
