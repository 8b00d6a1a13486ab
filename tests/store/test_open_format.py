"""The open store format (docs/store-format.md, "Conformance"): a store another tool wrote
with plain xarray, meeting the MUSTs and nothing else, is read by every analysis; validate
grades what it finds; stores that break a MUST are refused in one line and left untouched.

The example store is the code block of docs/store-format.md itself, executed as it stands.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from layerstate.cli import main
from store import IncompleteError, MissingError, RunConflictError, Store, validate

DOC = Path(__file__).resolve().parents[2] / "docs" / "store-format.md"
RUN = "parity-lstm-s0"
GROUP = f"runs/{RUN}/len_016"

CLAIMS = """
[[claims]]
id = "parity-readable"
statement = "Parity is readable at L1"
kind = "readable_by"
metric = "probe_accuracy"
task = "parity"
arch = "lstm"
layer = "L1"
threshold = 0.6
length = 16
statistic = "mean"  # two seeds: the t with the sequences' sampling floor (the share test needs 5)

[[claims]]
id = "readout-right"
statement = "The stored readout beats 0.9"
kind = "bound"
metric = "accuracy"
task = "parity"
arch = "lstm"
direction = "greater"
threshold = 0.9
length = 16
statistic = "mean"
"""


def example_code() -> str:
    """The example block of the spec, between its markers."""
    text = DOC.read_text()
    m = re.search(r"<!-- example-store: begin -->\s*```python\n(.*?)```\s*<!-- example-store: end -->", text, re.S)
    assert m, "docs/store-format.md lost its example-store block"
    return m.group(1)


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """The documented store, written once by running the documented code in an empty folder."""
    where = tmp_path_factory.mktemp("example")
    import os

    cwd = os.getcwd()
    os.chdir(where)
    try:
        exec(compile(example_code(), str(DOC), "exec"), {"__name__": "example"})
    finally:
        os.chdir(cwd)
    return where / "acts.zarr"


@pytest.fixture
def store_copy(example, tmp_path) -> Path:
    """A copy of the example store a test may change."""
    dst = tmp_path / "acts.zarr"
    shutil.copytree(example, dst)
    return dst


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def files(path: Path) -> dict[str, str]:
    """Every file under ``path`` with the digest of its bytes (to show nothing changed)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def open_rw(path: Path) -> zarr.Group:
    """The root for changing a store as another tool would (its own documents, no snapshot)."""
    return zarr.open_group(str(path), mode="r+", use_consolidated=False)


def reconsolidate(path: Path) -> None:
    """A fresh snapshot of what the nodes say (zarr lists through a stale one otherwise)."""
    for doc in path.rglob("zarr.json"):
        meta = json.loads(doc.read_text())
        if meta.pop("consolidated_metadata", None) is not None:
            doc.write_text(json.dumps(meta))
    zarr.consolidate_metadata(str(path), zarr_format=3)


# ----------------------------------------------------------------------------- the example
def test_the_example_is_plain_xarray_and_meets_the_musts(example):
    code = example_code()
    assert "import store" not in code and "layerstate" not in code.replace('"layerstate/1"', "")
    root = zarr.open_group(str(example), mode="r")
    assert dict(root.attrs) == {"schema": "layerstate/1"}  # no bookkeeping at all
    assert set(root[GROUP].attrs) == set()  # no completion record, no labels, no target
    rep = validate(str(example))
    assert rep.ok, rep.problems
    text = "\n".join(rep.warnings)
    assert "crc32c" in text and "metadata digests" in text


def test_validate_grades_the_example_and_strict_fails_on_its_warnings(example):
    res = cli("validate", example)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[-1].startswith(f"ok: {example}") and "2 warning(s)" in lines[-1]
    assert [ln for ln in lines[:-1] if not ln.startswith("warning: ")] == []
    strict = cli("validate", "--strict", example)
    assert strict.exit_code == 2
    assert "failed validation (2 problem(s)" in strict.output and "(a warning; --strict)" in strict.output


def test_inspect_lists_labels_and_complete_lengths(example):
    res = cli("inspect", example, "--detail")
    assert res.exit_code == 0, res.output
    assert "INCOMPLETE" not in res.output
    assert res.output.count("labels parity; complete (no completion record)") == 2
    assert "layerstate - (written by another tool)" in res.output


def test_probe_stats_and_report_run_on_the_example(store_copy, tmp_path):
    before = {k: v for k, v in files(store_copy).items() if k.startswith("runs/")}
    res = cli("probe", store_copy, "--positions", "pooled", "--folds", "3")
    assert res.exit_code == 0, res.output
    assert "stored results/probes/parity" in res.output
    acc = Store.open(str(store_copy)).read_result("probes/parity")["accuracy"]
    by_layer = acc.mean([d for d in acc.dims if d != "layer"])
    assert float(by_layer.sel(layer="embed")) < 0.7  # the embedding does not hold the parity
    assert float(by_layer.sel(layer="L1")) > 0.75  # L1 carries it (+2 on feature 0: about 0.84)

    claims = tmp_path / "claims.toml"
    claims.write_text(CLAIMS)
    res = cli("stats", store_copy, "--claims", claims)
    assert res.exit_code == 0, res.output
    # two seeds of 64 sequences: the seeds agree more closely (SD 0.013) than 64 sequences can
    # vouch for, so the interval uses the sampling SD (0.047) and one degree of freedom: not
    # enough to show 0.85 > 0.6 after Holm. The claim is evaluated, its limit stated.
    assert "parity-readable: inconclusive — not shown above 0.6" in res.output
    assert "sampling SD" in res.output
    # the example's logits are the parity itself: both seeds at 1.000, whose interval comes from
    # their 64 sequences each (two perfect seeds of 64 cannot show > 0.9 after Holm either)
    assert "readout-right: inconclusive — not shown above 0.9" in res.output

    res = cli("report", store_copy, "--out", tmp_path / "report")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert "parity-readable" in md and "L1" in md
    # the analyses wrote results (and metadata), never the runs' data
    assert {k: v for k, v in files(store_copy).items() if k.startswith("runs/") and "zarr.json" not in k} == {
        k: v for k, v in before.items() if "zarr.json" not in k}


@pytest.mark.parametrize("command", [["ablate", "--settings", "random:1"], ["patch", "--length", "16"]])
def test_analyses_that_rerun_the_model_refuse_a_store_without_weights(store_copy, command):
    before = files(store_copy)
    res = cli(command[0], store_copy, *command[1:])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"layerstate: error: run {RUN!r} has no trained weights in {store_copy}; the model cannot be "
        "re-run from a stored layer. Train it with `layerstate train`, or, for a store another tool "
        "wrote, add the run's weights as arrays under runs/<id>/weights (docs/store-format.md, S12-S15); "
        "probe, stats and report need no weights"
    ]
    assert files(store_copy) == before


# ----------------------------------------------------------------------------- the target label
def add_label(path: Path, name: str = "ones") -> None:
    """A second label in every length group of the example (integer, (sequence, position))."""
    for rid in ("parity-lstm-s0", "parity-lstm-s1"):
        grp = f"runs/{rid}/len_016"
        tokens = xr.open_zarr(str(path), group=grp)["tokens"].values
        xr.Dataset({name: (("sequence", "position"), np.cumsum(tokens, 1).astype("int32"))}).to_zarr(
            str(path), group=grp, mode="a", zarr_format=3)


def test_several_labels_without_a_target_ask_for_one(store_copy):
    add_label(store_copy)
    before = files(store_copy)
    res = cli("probe", store_copy, "--positions", "pooled")
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"layerstate: error: run {RUN!r} length 16 has 2 labels (ones, parity) and declares no target; "
        "pass --target LABEL (Python: target=...) naming the one to analyse"
    ]
    assert files(store_copy) == before
    assert "labels ones, parity (no target declared: pass --target)" in cli("inspect", store_copy).output
    rep = validate(str(store_copy))
    assert rep.ok and any("no declared target" in w for w in rep.warnings)

    from analysis.behaviour import sequence_correctness
    from analysis.probes import probe

    st = Store.open(str(store_copy))
    with pytest.raises(MissingError, match="declares no target"):
        sequence_correctness(st)
    corr = sequence_correctness(st, target="parity")  # the example's logits predict the parity
    assert float(corr.correct.sum()) == float(corr.labelled.sum()) > 0
    with pytest.raises(MissingError, match="label 'nope' does not exist"):
        sequence_correctness(st, target="nope")

    ds = probe(Store.open(str(store_copy), mode="r+"), "ones", positions="pooled", folds=3, save=False)
    assert ds.attrs["target"] == "ones"
    res = cli("probe", store_copy, "--target", "parity", "--positions", "pooled", "--folds", "3")
    assert res.exit_code == 0 and "stored results/probes/parity" in res.output


def test_an_accuracy_claim_names_its_label_when_the_store_declares_none(store_copy, tmp_path):
    add_label(store_copy)
    # 2 seeds of 64 sequences can show > 0.7 (the score test at 0.7), not > 0.9
    readout = CLAIMS.split("[[claims]]")[2].replace("threshold = 0.9", "threshold = 0.7")
    claims = tmp_path / "claims.toml"
    claims.write_text("[[claims]]" + readout)
    res = cli("stats", store_copy, "--claims", claims)
    assert res.exit_code == 2 and "declares no target" in res.output
    claims.write_text("[[claims]]" + readout + 'target = "parity"\n')
    res = cli("stats", store_copy, "--claims", claims)
    assert res.exit_code == 0, res.output
    assert "readout-right: supported" in res.output  # scored on the parity, which the logits predict
    claims.write_text("[[claims]]" + readout.replace('threshold = 0.7', 'threshold = 0.7\ntarget = "ones"'))
    res = cli("stats", store_copy, "--claims", claims)
    assert res.exit_code == 0, res.output
    assert "readout-right: supported" not in res.output  # the running count is not what they predict


def test_a_declared_target_is_the_default(store_copy):
    add_label(store_copy)
    for rid in ("parity-lstm-s0", "parity-lstm-s1"):
        open_rw(store_copy)[f"runs/{rid}/len_016"].attrs["target"] = "parity"
    reconsolidate(store_copy)
    assert not [w for w in validate(str(store_copy)).warnings if "target" in w]
    res = cli("probe", store_copy, "--positions", "pooled", "--folds", "3")
    assert res.exit_code == 0 and "stored results/probes/parity" in res.output


def test_a_target_that_is_not_a_label_is_a_problem(store_copy):
    open_rw(store_copy)[GROUP].attrs["target"] = "depth"
    reconsolidate(store_copy)
    rep = validate(str(store_copy))
    assert f"{GROUP}: target 'depth' is not one of its labels (parity) (S23): name one of them" in rep.problems


# ----------------------------------------------------------------------------- completion records
def test_a_record_that_lists_missing_blocks_is_still_incomplete(store_copy):
    open_rw(store_copy)[GROUP].attrs.update(
        {"n_blocks": 2, "completed_blocks": [0], "complete": False})
    reconsolidate(store_copy)
    assert "len_016: hidden 64x16x3x8 float32" in (out := cli("inspect", store_copy, "--detail").output)
    assert "INCOMPLETE 1/2 blocks" in out
    with pytest.raises(IncompleteError, match="1 of 2 blocks written"):
        Store.open(str(store_copy)).open_length(RUN, 16)
    res = cli("probe", store_copy)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "is incomplete (1 of 2 blocks written)" in res.output
    assert any("incomplete, 1 of 2 blocks written" in w for w in validate(str(store_copy)).warnings)


def test_a_writer_never_replaces_a_group_another_tool_wrote(store_copy):
    before = files(store_copy)
    st = Store.open(str(store_copy), mode="r+")
    with pytest.raises(RunConflictError, match="written by another tool"):
        st.length_writer(RUN, 16, n_sequences=64, n_features=8, labels=["parity"], n_layers=2)
    assert {k: v for k, v in files(store_copy).items() if k.startswith("runs/")} == {
        k: v for k, v in before.items() if k.startswith("runs/")}


def test_a_layout_cut_short_by_a_kill_is_incomplete_not_complete(make_store, monkeypatch):
    """layerstate's own writer creates a group with an empty record first, so a group whose
    arrays were half created never reads as written in one go."""
    import store.io.layout as layout

    st = make_store(n=32, block_size=16)

    def killed(grp, spec, length):
        grp.create_array("hidden", shape=(1,), dtype="float32")
        raise KeyboardInterrupt

    monkeypatch.setattr(layout, "_create_arrays", killed)
    with pytest.raises(KeyboardInterrupt):
        st.write_length("r0", 20, hidden=np.zeros((32, 20, 3, 8), "float32"),
                        tokens=np.zeros((32, 20), int), labels={"parity": np.zeros((32, 20), int)})
    monkeypatch.undo()
    with pytest.raises(IncompleteError, match="0 of"):
        st.open_length("r0", 20)
    rep = validate(st)
    assert rep.ok and "runs/r0/len_020: layout never finished (writer killed while creating it)" in rep.warnings
    st.write_length("r0", 20, hidden=np.ones((32, 20, 3, 8), "float32"), tokens=np.zeros((32, 20), int),
                    labels={"parity": np.zeros((32, 20), int)}, block_size=16)  # the resume replaces it
    assert float(st.load_length("r0", 20).hidden.min()) == 1.0


# ----------------------------------------------------------------------------- graded validate
def test_nan_written_by_another_tool_is_a_problem_naming_array_and_count(store_copy):
    arr = zarr.open_array(str(store_copy / GROUP / "hidden"), mode="r+")
    arr[0, 0, 0, :3] = np.nan
    arr[5, 2, 1, 0] = np.inf
    res = cli("validate", store_copy)
    assert res.exit_code == 2
    assert (f"problem: {GROUP}/hidden: 4 non-finite value(s) (NaN/inf) in 1 chunk(s) (S20): write finite "
            "values, or set the group attribute nonfinite_allowed=true if they are meant") in res.output


def test_chunks_another_tool_did_not_store_are_noted_and_read_as_nan_are_a_problem(store_copy):
    (store_copy / GROUP / "tokens" / "c" / "0" / "0").unlink()  # reads as its fill value, 0
    rep = validate(str(store_copy))
    assert rep.ok, rep.problems
    assert (f"{GROUP}: 1 chunk(s) not stored (first: {GROUP}/tokens chunk (0, 0)), read as their fill value "
            "(S6): write every chunk (zarr's write_empty_chunks=True)") in rep.warnings
    (store_copy / GROUP / "hidden" / "c" / "0" / "0" / "0" / "0").unlink()  # reads as NaN
    rep = validate(str(store_copy))
    assert [p for p in rep.problems if "non-finite" in p] == [
        f"{GROUP}/hidden: {64 * 16 * 3 * 8} non-finite value(s) (NaN/inf) in 1 chunk(s) (S20): write finite "
        "values, or set the group attribute nonfinite_allowed=true if they are meant"]


def test_nan_in_a_layerstate_store_is_a_problem_and_allowed_when_declared(make_store):
    st = make_store(n=32, block_size=16)
    grp = st.run_group("r0")["len_012"]
    grp["logits"][3, 4, 1] = -np.inf
    rep = validate(Store.open(str(st.location)))
    assert rep.problems == ["runs/r0/len_012/logits: 1 non-finite value(s) (NaN/inf) in 1 chunk(s) (S20): "
                            "write finite values, or set the group attribute nonfinite_allowed=true if "
                            "they are meant"]
    grp.attrs["nonfinite_allowed"] = True
    st.consolidate()
    rep = validate(Store.open(str(st.location)))
    assert not rep.problems and any("allow_nonfinite" in w for w in rep.warnings)


def test_a_store_without_a_consolidated_snapshot_is_a_warning(tmp_path):
    path = tmp_path / "plain.zarr"
    root = zarr.open_group(str(path), mode="w-", zarr_format=3)
    root.attrs["schema"] = "layerstate/1"
    root.require_group("runs").create_group("r").attrs.update(task="t", arch="a", variant="v", seed=0)
    n, L = 8, 4
    xr.Dataset(
        {"hidden": (("sequence", "position", "layer", "feature"), np.ones((n, L, 1, 2), "float32")),
         "tokens": (("sequence", "position"), np.zeros((n, L), "int32")),
         "y": (("sequence", "position"), np.zeros((n, L), "int32")),
         "mask": (("sequence", "position"), np.ones((n, L), bool))},
        coords={"layer": np.array(["embed"], dtype=object)},
    ).to_zarr(str(path), group="runs/r/len_004", mode="w-", zarr_format=3, consolidated=False)
    rep = validate(str(path))
    assert rep.ok, rep.problems
    assert any("holds no consolidated snapshot" in w for w in rep.warnings)


# ----------------------------------------------------------------------------- bad input
def _drop_hidden(path: Path) -> None:
    del open_rw(path)[GROUP]["hidden"]


def _rename_dims(path: Path) -> None:
    ds = xr.open_zarr(str(path), group=GROUP).load()
    shutil.rmtree(path / GROUP)
    ds.rename({"position": "time"}).to_zarr(str(path), group=GROUP, mode="w-", zarr_format=3)


def _short_label(path: Path) -> None:
    grp = open_rw(path)[GROUP]
    del grp["parity"]
    grp.create_array("parity", shape=(64, 15), dtype="int32", dimension_names=["sequence", "position"])[...] = 0


def _undimensioned(path: Path) -> None:
    open_rw(path)[GROUP].create_array("extra", shape=(64,), dtype="int32")[...] = 1


def _schema_2(path: Path) -> None:
    open_rw(path).attrs["schema"] = "layerstate/2"


BAD = {
    "missing hidden": (_drop_hidden, f"{GROUP}: no variable 'hidden' (sequence, position, layer, feature) "
                                     "(docs/store-format.md, S17): rewrite the group with it"),
    "wrong dim names": (_rename_dims, f"{GROUP}/hidden: dims (sequence, time, layer, feature), expected "
                                      "(sequence, position, layer, feature) (S17): name the dims as the "
                                      "spec does when writing it"),
    "label shape": (_short_label, f"{GROUP}/parity: shape (64, 15) does not match tokens (64, 16) in "
                                  "(sequence, position) (S17)"),
    "no dimension names": (_undimensioned, f"{GROUP}/extra: no dimension_names (S2): xarray cannot open "
                                           "the group; write every array with its dims named"),
    "schema 2": (_schema_2, "uses schema 'layerstate/2', newer than this layerstate understands "
                            "(layerstate/1); upgrade layerstate"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_store_breaking_a_must_is_refused_in_one_line_and_left_untouched(store_copy, case):
    breaks, message = BAD[case]
    breaks(store_copy)
    reconsolidate(store_copy)
    before = files(store_copy)
    for args in (["probe", store_copy, "--positions", "pooled"], ["validate", store_copy]):
        res = cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output, (args, res.output)
        if args[0] == "probe":
            assert len(res.output.strip().splitlines()) == 1, res.output
        assert files(store_copy) == before, args
    if case == "schema 2":
        res = cli("inspect", store_copy)
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and message in res.output
