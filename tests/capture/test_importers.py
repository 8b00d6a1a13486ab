"""Importers and export, each with the real library on a tiny model built from a config
(nothing downloaded): TransformerLens, nnsight, SAELens-style ``datasets``, safetensors, npy."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from capture.importers import (
    export_hf_datasets,
    import_hf_datasets,
    import_nnsight,
    import_npy,
    import_safetensors,
    import_transformer_lens,
    nnsight_outputs,
)
from layerstate.cli import main
from store import InvalidArrayError, MissingError, Store, validate
from store.errors import LayerstateError, MissingDependencyError

N, L, VOCAB = 10, 7, 16


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A 2-layer GPT-2 from a config, its TransformerLens caches (batches of 4, 4, 2)."""
    pytest.importorskip("transformer_lens")
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    local = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(local)
    bridge = TransformerBridge.boot_transformers(str(local), hf_model=model, device="cpu")
    tokens = torch.randint(0, VOCAB, (N, L))
    caches, logits = [], []
    with torch.no_grad():
        for i in range(0, N, 4):
            lg, cache = bridge.run_with_cache(tokens[i:i + 4])
            caches.append(cache)
            logits.append(lg)
    return {"model": model, "tokens": tokens, "caches": caches, "logits": logits}


def _labels(tokens: torch.Tensor) -> dict[str, np.ndarray]:
    return {"parity": (np.cumsum(tokens.numpy(), 1) % 2).astype("int32")}


def _files(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and "/c/" in f"/{p.relative_to(path)}"}


def test_transformer_lens_cache_becomes_the_residual_stream(gpt2, tmp_path):
    caches, tokens = gpt2["caches"], gpt2["tokens"]
    res = import_transformer_lens(str(tmp_path / "s.zarr"), "tl", caches, labels=_labels(tokens),
                                  sites=["blocks.*.hook_mlp_out"], logits=gpt2["logits"], task="parity",
                                  dtype="float32", block_size=3)
    assert res.layers == ["embed", "L0", "L1"] and res.sites == ["L0.hook_mlp_out", "L1.hook_mlp_out"]
    st = Store.open(str(tmp_path / "s.zarr"))
    ds = st.open_length("tl", L)
    cat = lambda k: np.concatenate([c[k].numpy() for c in caches])  # noqa: E731
    np.testing.assert_allclose(ds.hidden.sel(layer="embed").values, cat("hook_embed") + cat("hook_pos_embed"))
    np.testing.assert_allclose(ds.hidden.sel(layer="embed").values, cat("blocks.0.hook_resid_pre"), atol=1e-6)
    np.testing.assert_array_equal(ds.hidden.sel(layer="L1").values, cat("blocks.1.hook_resid_post"))
    np.testing.assert_array_equal(ds.site_L0_hook_mlp_out.values, cat("blocks.0.hook_mlp_out"))
    np.testing.assert_array_equal(ds.tokens.values, tokens.numpy())  # from embed.hook_in
    np.testing.assert_array_equal(ds.logits.values, torch.cat(gpt2["logits"]).numpy())
    assert st.run_attrs("tl")["arch"] == "transformer-lens" and validate(st).ok


def test_nnsight_outputs_match_the_transformer_lens_import(gpt2, tmp_path):
    pytest.importorskip("nnsight")
    model, tokens = gpt2["model"], gpt2["tokens"]
    paths = ["transformer.h.1", "transformer.h.0.mlp", "transformer.drop", "transformer.h.0"]
    outs = [nnsight_outputs(model, tokens[i:i + 4], paths) for i in range(0, N, 4)]
    res = import_nnsight(str(tmp_path / "s.zarr"), "nn", outs, tokens=tokens, labels=_labels(tokens),
                         task="parity", dtype="float32")
    assert res.layers == ["embed", "L0", "L1"] and res.sites == ["L0.mlp"]
    ds = Store.open(str(tmp_path / "s.zarr")).open_length("nn", L)
    caches = gpt2["caches"]
    want = np.concatenate([c["blocks.1.hook_resid_post"].numpy() for c in caches])
    np.testing.assert_allclose(ds.hidden.sel(layer="L1").values, want, atol=1e-6)
    np.testing.assert_allclose(ds.site_L0_mlp.values,
                               np.concatenate([c["blocks.0.hook_mlp_out"].numpy() for c in caches]), atol=1e-6)


def test_cli_imports_saved_caches_with_a_label_table(gpt2, tmp_path):
    from safetensors.torch import save_file

    batches = tmp_path / "caches"
    batches.mkdir()
    for i, c in enumerate(gpt2["caches"]):
        keep = {k: v.clone() for k, v in c.items() if "resid_post" in k or "embed" in k}  # hooks share memory
        save_file(keep, str(batches / f"batch_{i}.safetensors"))
    lab = _labels(gpt2["tokens"])["parity"]
    seq, pos = np.nonzero(np.ones((N, L), bool))
    pd.DataFrame({"sequence": seq, "position": pos, "parity": lab[seq, pos]}).to_parquet(tmp_path / "labels.parquet")
    out = CliRunner().invoke(main, ["import", "transformer-lens", str(batches), str(tmp_path / "s.zarr"),
                                    "--run", "gpt2-parity-s0", "--task", "parity", "--arch", "gpt2",
                                    "--labels", str(tmp_path / "labels.parquet")])
    assert out.exit_code == 0, out.output
    assert "run 'gpt2-parity-s0' length 7: 10 sequences, layers embed, L0, L1" in out.output
    ds = Store.open(str(tmp_path / "s.zarr")).open_length("gpt2-parity-s0", L)
    np.testing.assert_array_equal(ds.parity.values, lab)
    np.testing.assert_array_equal(ds.tokens.values, gpt2["tokens"].numpy())


def test_cli_imports_saved_nnsight_outputs(gpt2, tmp_path):
    pytest.importorskip("nnsight")
    from safetensors.torch import save_file

    model, tokens = gpt2["model"], gpt2["tokens"]
    paths = ["transformer.drop", "transformer.h.0", "transformer.h.1"]
    (tmp_path / "outs").mkdir()
    for i in range(0, N, 4):
        outs = nnsight_outputs(model, tokens[i:i + 4], paths)
        save_file({**{k: v.contiguous() for k, v in outs.items()}, "input_ids": tokens[i:i + 4].contiguous()},
                  str(tmp_path / "outs" / f"batch_{i // 4}.safetensors"))
    lab = _labels(tokens)["parity"]
    np.savez(tmp_path / "labels.npz", parity=lab)
    out = CliRunner().invoke(main, ["import", "nnsight", str(tmp_path / "outs"), str(tmp_path / "s.zarr"),
                                    "--run", "gpt2-nn", "--task", "parity", "--labels", str(tmp_path / "labels.npz")])
    assert out.exit_code == 0, out.output
    assert "run 'gpt2-nn' length 7: 10 sequences, layers embed, L0, L1" in out.output
    ds = Store.open(str(tmp_path / "s.zarr")).open_length("gpt2-nn", L)
    want = np.concatenate([c["blocks.1.hook_resid_post"].numpy() for c in gpt2["caches"]])
    np.testing.assert_allclose(ds.hidden.sel(layer="L1").values, want.astype("float16"), atol=2e-3)
    np.testing.assert_array_equal(ds.tokens.values, tokens.numpy())
    np.testing.assert_array_equal(ds.parity.values, lab)


def test_saelens_cache_directory_and_export_round_trip(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    acts = rng.standard_normal((N, L, 8)).astype("float32")
    toks = rng.integers(0, VOCAB, (N, L)).astype("int32")
    feats = datasets.Features({"blocks.1.hook_resid_pre": datasets.Array2D(shape=(L, 8), dtype="float32"),
                               "token_ids": datasets.Sequence(datasets.Value("int32"), length=L)})
    src = tmp_path / "sae_cache"
    datasets.Dataset.from_dict({"blocks.1.hook_resid_pre": acts, "token_ids": toks},
                               features=feats).save_to_disk(str(src))
    res = import_hf_datasets(str(tmp_path / "s.zarr"), "sae", src, block_size=4)
    assert res.layers == ["L0"] and res.labels == ["token"]  # resid_pre of block 1 = output of block 0
    ds = Store.open(str(tmp_path / "s.zarr")).open_length("sae", L)
    np.testing.assert_array_equal(ds.hidden.values[:, :, 0], acts.astype("float16"))
    np.testing.assert_array_equal(ds.tokens.values, toks)
    paths = export_hf_datasets(str(tmp_path / "s.zarr"), tmp_path / "out", layers=["L0"])
    assert paths == [tmp_path / "out" / "sae" / "len_007"]
    back = datasets.load_from_disk(str(paths[0]))
    assert back.features["L0"].shape == (L, 8) and back.features["token_ids"].length == L  # SAELens' checks
    np.testing.assert_array_equal(np.asarray(back.with_format("numpy")["L0"]), acts.astype("float16"))
    again = import_hf_datasets(str(tmp_path / "s.zarr"), "sae-back", paths[0])
    assert again.labels == ["token"]
    np.testing.assert_array_equal(Store.open(str(tmp_path / "s.zarr")).open_length("sae-back", L).hidden.values,
                                  ds.hidden.values)
    res = CliRunner().invoke(main, ["export", str(tmp_path / "s.zarr"), str(tmp_path / "out")])
    assert res.exit_code == 2 and "exists" in res.output
    res = CliRunner().invoke(main, ["export", str(tmp_path / "s.zarr"), str(tmp_path / "out2"), "--runs", "sae",
                                    "--layers", "L0", "--format", "hf-datasets"])
    assert res.exit_code == 0 and "1 dataset(s) (sae/len_007)" in res.output, res.output
    res = CliRunner().invoke(main, ["export", str(tmp_path / "s.zarr"), str(tmp_path / "out3"), "--layers", "L5"])
    assert res.exit_code == 2 and "layers stored: L0" in res.output and not (tmp_path / "out3").exists()


def _write_parts(path: Path, rng: np.random.Generator, sizes=(6, 6, 5), width=8, drop=None) -> dict:
    from safetensors.numpy import save_file

    path.mkdir()
    whole: dict[str, list[np.ndarray]] = {"embed": [], "L0": [], "L1": [], "tokens": []}
    for i, m in enumerate(sizes):
        part = {k: rng.standard_normal((m, L, width)).astype("float32") for k in ("embed", "L0", "L1")}
        part["tokens"] = rng.integers(0, VOCAB, (m, L)).astype("int64")
        for k, v in part.items():
            whole[k].append(v)
        if drop is not None and i == drop[0]:
            del part[drop[1]]
        save_file(part, str(path / f"part_{i}.safetensors"))
    return {k: np.concatenate(v) for k, v in whole.items()}


def test_safetensors_import_resumes_after_a_crash(tmp_path, monkeypatch):
    from capture.importers import files

    whole = _write_parts(tmp_path / "parts", np.random.default_rng(1))
    calls = {"n": 0}
    real = files.SafetensorsSource._slice

    def flaky(self, i, name, lo, hi, out=None):
        calls["n"] += 1
        if calls["n"] > 9:
            raise OSError("disk went away")
        return real(self, i, name, lo, hi, out)

    monkeypatch.setattr(files.SafetensorsSource, "_slice", flaky)
    with pytest.raises(OSError):
        import_safetensors(str(tmp_path / "a.zarr"), "r", tmp_path / "parts", block_size=4)
    monkeypatch.setattr(files.SafetensorsSource, "_slice", real)
    st = Store.open(str(tmp_path / "a.zarr"), consolidated=False)
    assert not st.run_group("r")["len_007"].attrs["complete"]  # marked: readers refuse it
    res = import_safetensors(str(tmp_path / "a.zarr"), "r", tmp_path / "parts", block_size=4)
    assert 0 < res.blocks_written < res.blocks_total == 5
    import_safetensors(str(tmp_path / "b.zarr"), "r", tmp_path / "parts", block_size=4)
    assert _files(tmp_path / "a.zarr") == _files(tmp_path / "b.zarr")
    ds = Store.open(str(tmp_path / "a.zarr")).open_length("r", L)
    np.testing.assert_array_equal(ds.hidden.sel(layer="L1").values, whole["L1"].astype("float16"))
    np.testing.assert_array_equal(ds.tokens.values, whole["tokens"])


def test_npy_directory_with_a_csv_label_table(tmp_path):
    rng = np.random.default_rng(2)
    d = tmp_path / "npy"
    d.mkdir()
    arrays = {k: rng.standard_normal((N, L, 4)).astype("float32") for k in ("embed", "L0", "L1", "L10")}
    for k, v in arrays.items():
        np.save(d / f"{k}.npy", v)
    pd.DataFrame({"sequence": [0, 3], "position": [1, 6], "depth": [2, 5], "token": [7, 9]}).to_csv(
        tmp_path / "labels.csv", index=False)
    res = import_npy(str(tmp_path / "s.zarr"), "n", d, labels=str(tmp_path / "labels.csv"))
    assert res.layers == ["embed", "L0", "L1", "L10"] and res.labels == ["depth"]
    ds = Store.open(str(tmp_path / "s.zarr")).open_length("n", L)
    assert ds.depth.values[3, 6] == 5 and ds.depth.values[0, 0] == -1 and ds.tokens.values[0, 1] == 7
    assert int(ds["mask"].sum()) == 2


def test_bad_sources_are_one_line_and_write_nothing(gpt2, tmp_path):
    caches = list(gpt2["caches"])
    broken = [caches[0], {k: v for k, v in caches[1].items() if k != "blocks.1.hook_resid_post"}]
    with pytest.raises(MissingError, match=r"batch 1: hook 'blocks.1.hook_resid_post' is missing \(the first batch has it\)"):
        import_transformer_lens(str(tmp_path / "s.zarr"), "x", broken, labels=None)
    assert not (tmp_path / "s.zarr").exists()
    short = {k: (v[:3] if k == "blocks.0.hook_resid_post" else v) for k, v in caches[0].items()}
    with pytest.raises(InvalidArrayError, match="batch 0: hook .* has 3 sequences but .* has 4"):
        import_transformer_lens(str(tmp_path / "s.zarr"), "x", [short])
    rng = np.random.default_rng(3)
    _write_parts(tmp_path / "missing", rng, drop=(2, "L1"))
    with pytest.raises(MissingError, match=r"part_2.safetensors: hook 'L1' is missing \(the first file has it\)"):
        import_safetensors(str(tmp_path / "s.zarr"), "x", tmp_path / "missing")
    wide = tmp_path / "wide"
    wide.mkdir()
    np.save(wide / "embed.npy", np.zeros((4, L, 8), "float32"))
    np.save(wide / "L0.npy", np.zeros((4, L, 9), "float32"))
    with pytest.raises(InvalidArrayError, match="hook 'embed' has width 8 but 'L0' has 9"):
        import_npy(str(tmp_path / "s.zarr"), "x", wide, tokens=np.zeros((4, L), int))
    assert not (tmp_path / "s.zarr").exists()


def test_cli_bad_import_input(tmp_path, make_store):
    st = make_store(n=40)
    before = _files(Path(str(st.location)))
    (tmp_path / "x.txt").write_text("not activations")
    _write_parts(tmp_path / "parts", np.random.default_rng(4), drop=(1, "L0"))
    for args, msg in [
        (["import", "safetensors", str(tmp_path / "parts"), str(st.location), "--run", "z"],
         "part_1.safetensors: hook 'L0' is missing (the first file has it)"),
        (["import", "pickle", str(tmp_path / "x.txt"), str(st.location), "--run", "z"],
         "unknown import format 'pickle'; formats: nnsight, npy, saelens, safetensors, transformer-lens"),
        (["import", "safetensors", str(tmp_path / "x.txt"), str(st.location), "--run", "z"],
         "is not a safetensors file"),
        (["import", "npy", str(tmp_path / "nothing"), str(st.location), "--run", "z"], "does not exist"),
    ]:
        res = CliRunner().invoke(main, args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and msg in lines[0], res.output
    assert _files(Path(str(st.location))) == before and Store.open(str(st.location)).run_ids() == ["r0"]


def test_a_missing_library_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r"needs the Python package 'datasets': pip install 'layerstate\[interop\]'"):
        import_hf_datasets(str(tmp_path / "s.zarr"), "x", tmp_path)


def test_cli_refuses_nan_in_an_import_unless_allowed(tmp_path):
    """A NaN in the source: one line naming where and the flag, exit 2, the run's group left
    incomplete (a rerun with --allow-nonfinite completes it, recorded, and validate warns)."""
    d = tmp_path / "npy"
    d.mkdir()
    rng = np.random.default_rng(5)
    arrays = {k: rng.standard_normal((N, L, 4)).astype("float32") for k in ("embed", "L0")}
    arrays["L0"][2, 3, 1] = np.nan
    for k, v in arrays.items():
        np.save(d / f"{k}.npy", v)
    np.savez(tmp_path / "labels.npz", tokens=rng.integers(0, 5, (N, L)))
    store = str(tmp_path / "s.zarr")
    args = ["import", "npy", str(d), store, "--run", "n", "--labels", str(tmp_path / "labels.npz")]
    res = CliRunner().invoke(main, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "NaN or Inf (first at sequence 2, position 3, layer L0)" in lines[0]
    assert "--allow-nonfinite" in lines[0]
    with pytest.raises(LayerstateError, match="incomplete|not complete|missing"):
        Store.open(store).open_length("n", L)
    res = CliRunner().invoke(main, [*args, "--allow-nonfinite"])
    assert res.exit_code == 0, res.output
    ds = Store.open(store).open_length("n", L)
    assert np.isnan(ds.hidden.sel(layer="L0").values[2, 3, 1])
    assert np.array_equal(ds.hidden.sel(layer="embed").values, arrays["embed"].astype("float16"))
    res = CliRunner().invoke(main, ["validate", store])
    assert res.exit_code == 0 and "allow_nonfinite" in res.output, res.output
