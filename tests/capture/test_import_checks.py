"""Imports refuse inconsistent sources in one line naming the hook and the batch (or file),
leave nothing half-written unmarked, resume where they stopped, and keep their layout.

No model is needed: the batches are TransformerLens-named mappings of numpy arrays (what a
cache holds), and files are written with safetensors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from capture.importers import import_safetensors, import_transformer_lens, writer
from store import IncompleteError, InvalidArrayError, MissingError, RunConflictError, Store

L, W = 5, 6
HOOKS = ("hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post")


def _caches(sizes=(4, 4, 3), seed=0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for m in sizes:
        c = {h: rng.standard_normal((m, L, W)).astype("float32") for h in HOOKS}
        c["tokens"] = rng.integers(0, 9, (m, L))
        out.append(c)
    return out


def _chunks(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and "/c/" in f"/{p.relative_to(path)}"}


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def _group(path: Path, run: str = "r") -> dict:
    return dict(Store.open(str(path), consolidated=False).run_group(run)[f"len_{L:03d}"].attrs)


def test_a_hook_missing_from_a_later_batch_stops_marked_incomplete_and_a_rerun_resumes(tmp_path):
    caches = _caches()

    def batches(broken: bool) -> Iterator[dict[str, np.ndarray]]:
        for i, c in enumerate(caches):
            yield {k: v for k, v in c.items() if not (broken and i == 2 and k == HOOKS[2])}

    target = tmp_path / "s.zarr"
    with pytest.raises(MissingError) as exc:
        import_transformer_lens(str(target), "r", batches(True), n_sequences=11, block_size=4)
    assert "batch 2: hook 'blocks.1.hook_resid_post' is missing (the first batch has it)" in _one_line(exc)
    attrs = _group(target)
    assert attrs["complete"] is False and attrs["completed_blocks"] == [0, 1]  # blocks 0-1 stored
    with pytest.raises(IncompleteError):
        Store.open(str(target)).open_length("r", L)
    res = import_transformer_lens(str(target), "r", batches(False), n_sequences=11, block_size=4)
    assert (res.blocks_written, res.blocks_total) == (1, 3)
    fresh = tmp_path / "fresh.zarr"
    import_transformer_lens(str(fresh), "r", batches(False), n_sequences=11, block_size=4)
    assert _chunks(target) == _chunks(fresh)
    ds = Store.open(str(target)).open_length("r", L)
    np.testing.assert_array_equal(ds.hidden.sel(layer="L1").values,
                                  np.concatenate([c[HOOKS[2]] for c in caches]).astype("float16"))


def test_batches_that_end_early_leave_the_length_incomplete(tmp_path):
    caches = _caches()
    with pytest.raises(InvalidArrayError) as exc:
        import_transformer_lens(str(tmp_path / "s.zarr"), "r", iter(caches[:2]), n_sequences=11, block_size=4)
    assert "the batches end after 8 sequences, fewer than the 11 expected" in _one_line(exc)
    assert _group(tmp_path / "s.zarr")["complete"] is False


@pytest.mark.parametrize("change, message", [
    ("width", "batch 1: hook 'blocks.0.hook_resid_post' has shape (4, 5, 7), the first batch (4, 5, 6)"),
    ("count", "batch 1: hook 'blocks.0.hook_resid_post' has 3 sequences but "),
    ("positions", "batch 0: hook 'tokens' has 4 positions but 'hook_embed' has 5"),
])
def test_inconsistent_batches_in_memory_are_refused_before_anything_is_written(tmp_path, change, message):
    caches = _caches()
    hook = "blocks.0.hook_resid_post"
    if change == "width":
        caches[1][hook] = np.zeros((4, L, W + 1), "float32")
    elif change == "count":
        caches[1][hook] = caches[1][hook][:3]
    else:
        caches[0]["tokens"] = caches[0]["tokens"][:, :4]
    with pytest.raises((InvalidArrayError, MissingError)) as exc:
        import_transformer_lens(str(tmp_path / "s.zarr"), "r", caches)
    assert message in _one_line(exc)
    assert not (tmp_path / "s.zarr").exists()


def _parts(path: Path, sizes=(6, 6, 5), seed=1, edit=None) -> dict[str, np.ndarray]:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    path.mkdir()
    whole: dict[str, list[np.ndarray]] = {}
    for i, m in enumerate(sizes):
        part = {k: rng.standard_normal((m, L, W)).astype("float32") for k in ("embed", "L0", "L1")}
        part["tokens"] = rng.integers(0, 9, (m, L)).astype("int64")
        for k, v in part.items():
            whole.setdefault(k, []).append(v)
        if edit is not None:
            edit(i, part)
        save_file(part, str(path / f"part_{i}.safetensors"))
    return {k: np.concatenate(v) for k, v in whole.items()}


@pytest.mark.parametrize("edit, message", [
    (lambda i, p: p.update(L0=p["L0"][:5]) if i == 1 else None,
     "part_1.safetensors: hook 'L0' has 5 sequences but 'embed' has 6"),
    (lambda i, p: p.update(L1=np.zeros((5, L, W + 2), "float32")) if i == 2 else None,
     "part_2.safetensors: hook 'L1' has shape (5, 5, 8), the first file (6, 5, 6)"),
    (lambda i, p: p.pop("L0") if i == 2 else None,
     "part_2.safetensors: hook 'L0' is missing (the first file has it)"),
])
def test_inconsistent_files_are_refused_and_an_existing_store_is_untouched(tmp_path, make_store, edit, message):
    st = make_store(n=20)
    before = _chunks(Path(str(st.location)))
    _parts(tmp_path / "parts", edit=edit)
    with pytest.raises((InvalidArrayError, MissingError)) as exc:
        import_safetensors(str(st.location), "x", tmp_path / "parts")
    assert message in _one_line(exc)
    assert _chunks(Path(str(st.location))) == before and Store.open(str(st.location)).run_ids() == ["r0"]


def test_blocks_fill_whole_chunks_and_a_resume_keeps_its_layout(tmp_path, monkeypatch):
    whole = _parts(tmp_path / "parts")  # 17 sequences
    monkeypatch.setattr(writer, "TARGET_CHUNK_BYTES", L * W * 2 * 6)  # the default: 6 a block
    res = import_safetensors(str(tmp_path / "a.zarr"), "r", tmp_path / "parts")
    assert _group(tmp_path / "a.zarr")["spec"]["block_size"] == 6  # 17 is prime: the default
    monkeypatch.setattr(writer, "TARGET_CHUNK_BYTES", L * W * 2 * 7)
    whole_16 = {k: v[:16] for k, v in whole.items()}
    from safetensors.numpy import save_file

    (tmp_path / "p16").mkdir()
    save_file(whole_16, str(tmp_path / "p16" / "all.safetensors"))
    res = import_safetensors(str(tmp_path / "b.zarr"), "r", tmp_path / "p16")
    assert _group(tmp_path / "b.zarr")["spec"]["block_size"] == 4 and res.blocks_total == 4  # 16 = 4 x 4
    # an unfinished import with another block size resumes with its own
    real = writer._put
    calls = {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(writer, "_put", dies)
    with pytest.raises(KeyboardInterrupt):
        import_safetensors(str(tmp_path / "c.zarr"), "r", tmp_path / "p16", block_size=3)
    monkeypatch.setattr(writer, "_put", real)
    res = import_safetensors(str(tmp_path / "c.zarr"), "r", tmp_path / "p16")
    assert _group(tmp_path / "c.zarr")["spec"]["block_size"] == 3 and (res.blocks_written, res.blocks_total) == (5, 6)
    ds = Store.open(str(tmp_path / "c.zarr")).open_length("r", L)
    np.testing.assert_array_equal(ds.hidden.sel(layer="L0").values, whole_16["L0"].astype("float16"))


def test_reading_ahead_holds_at_most_one_block_more():
    held, most = [], [0]

    def read(start: int, stop: int) -> dict[str, np.ndarray]:
        held.append(start)
        most[0] = max(most[0], len(held))
        return {"x": np.arange(start, stop)}

    got = []
    for b, arrays in writer._blocks(read, [(0, 2), (2, 4), (4, 6), (6, 7)], [0, 1, 2, 3], ahead=True):
        got.append((b, arrays["x"].tolist()))
        held.pop(0)  # the caller is done with this block
    assert got == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5]), (3, [6])] and most[0] <= 2


def test_a_different_source_does_not_resume_into_an_unfinished_import(tmp_path, monkeypatch):
    _parts(tmp_path / "one", seed=1)
    _parts(tmp_path / "two", seed=2)
    real = writer._put
    calls = {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(writer, "_put", dies)
    with pytest.raises(KeyboardInterrupt):
        import_safetensors(str(tmp_path / "s.zarr"), "r", tmp_path / "one", block_size=4)
    monkeypatch.setattr(writer, "_put", real)
    before = _chunks(tmp_path / "s.zarr")
    with pytest.raises(RunConflictError) as exc:
        import_safetensors(str(tmp_path / "s.zarr"), "r", tmp_path / "two", block_size=4)
    assert "unfinished import of" in _one_line(exc) and str(tmp_path / "one") in str(exc.value)
    assert _chunks(tmp_path / "s.zarr") == before
    res = import_safetensors(str(tmp_path / "s.zarr"), "r", tmp_path / "one", block_size=4)
    assert res.blocks_written == res.blocks_total - 1
    with pytest.raises(RunConflictError, match="holds an import of"):
        import_safetensors(str(tmp_path / "s.zarr"), "r", tmp_path / "two", block_size=4)


def test_sites_that_match_nothing_are_refused_and_matches_become_sites(tmp_path):
    from click.testing import CliRunner

    from layerstate.cli import main

    whole = _parts(tmp_path / "parts")
    target = tmp_path / "s.zarr"
    res = CliRunner().invoke(main, ["import", "safetensors", str(tmp_path / "parts"), str(target), "--run", "z",
                                    "--sites", "blocks.*"])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "sites: no hook/array matches 'blocks.*'; there are: L0, L1, embed" in lines[0]
    assert not target.exists()
    res = CliRunner().invoke(main, ["import", "safetensors", str(tmp_path / "parts"), str(target), "--run", "z",
                                    "--sites", "L1"])
    assert res.exit_code == 0 and "layers embed, L0, sites L1" in res.output, res.output
    ds = Store.open(str(target)).open_length("z", L)
    assert list(ds.layer.values) == ["embed", "L0"]
    np.testing.assert_array_equal(ds.site_L1.values, whole["L1"].astype("float16"))
