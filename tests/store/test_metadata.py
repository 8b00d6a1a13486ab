"""Metadata faults: every zarr.json checked, named when damaged, repaired from its second copy.

The fault injection runs over a store made by training and capturing a tiny experiment (one
LSTM run, as ``layerstate train`` + ``capture`` make it) plus a stored result: for a sample of
files (the root, the metadata copy file, run groups, a length group and its arrays, weights,
results) it truncates, flips a byte and changes a number inside valid JSON; ``validate`` must
name the file every time, and ``repair`` must give back a store that validates and is byte
for byte the original.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from store import (
    MetadataDamagedError,
    NotAStoreError,
    RepairRefusedError,
    Store,
    repair,
    validate,
)
from tests.conftest import synthetic_arrays

TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["parity"]
archs = ["lstm"]
seeds = [0]

[train]
length = 12
steps = 6
batch_size = 8
eval_every = 6
n_eval = 16
eval_lengths = [12]
n_test = 16
warmup = 1

[capture]
lengths = [12]
n_sequences = 24

[models.lstm]
d_model = 8
n_layers = 1
"""
RUN = "parity-lstm-default-s0"
GROUP = f"runs/{RUN}/len_012"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """A store made as `layerstate train` + `layerstate capture` make it, with one result."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import capture_experiment, train_experiment

    tmp = tmp_path_factory.mktemp("captured")
    (tmp / "tiny.toml").write_text(TINY)
    exp = load_experiment(tmp / "tiny.toml")
    path = tmp / "s.zarr"
    Store.create(str(path), title="tiny")
    list(train_experiment(exp, str(path)))
    capture_experiment(exp.plan, str(path))
    st = Store.open(str(path), mode="r+")
    st.write_result("probes/parity", xr.Dataset(
        {"accuracy": (("run", "layer"), np.array([[0.5, 0.75]]))},
        coords={"run": [RUN], "layer": ["embed", "L0"]}, attrs={"target": "parity"}))
    assert validate(str(path)).ok
    return path


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------- damage
def _numbers(text: str) -> list[int]:
    """Offsets of the numbers of a JSON text that lie outside strings."""
    out, in_str, esc, prev_digit = [], False, False, False
    for i, ch in enumerate(text):
        if in_str:
            esc = not esc and ch == "\\"
            in_str = esc or ch != '"'
            continue
        if ch == '"':
            in_str = True
        digit = ch.isdigit()
        if digit and not prev_digit and text[i - 1] != "-":
            out.append(i)
        prev_digit = digit or (prev_digit and ch in ".eE+-")
    return out


def change_number(raw: bytes, which: int) -> bytes:
    """The ``which``-th number (0 first, -1 last) with its first digit changed; still valid JSON
    and a different document."""
    text = raw.decode()
    for i in _numbers(text)[which:] + _numbers(text)[:which]:
        d = int(text[i])
        new = text[:i] + str(d + 1 if d < 9 else 8) + text[i + 1:]
        try:
            if json.loads(new) != json.loads(text):
                return new.encode()
        except ValueError:
            continue
    raise AssertionError("no number to change")


def flip(raw: bytes, where: float) -> bytes:
    out = bytearray(raw)
    out[int(len(out) * where)] ^= 0x01
    return bytes(out)


DAMAGE = {
    "truncate": lambda raw: raw[: len(raw) // 2],
    "flip-1/3": lambda raw: flip(raw, 1 / 3),
    "flip-2/3": lambda raw: flip(raw, 2 / 3),
    "number-first": lambda raw: change_number(raw, 0),
    "number-last": lambda raw: change_number(raw, -1),
}
#: a sample of every kind of node (and the copy file beside the root)
FILES = [
    "zarr.json",
    "layerstate-metadata.json",
    "runs/zarr.json",
    f"runs/{RUN}/zarr.json",
    f"{GROUP}/zarr.json",
    f"{GROUP}/hidden/zarr.json",
    f"{GROUP}/tokens/zarr.json",
    f"{GROUP}/parity/zarr.json",
    f"{GROUP}/layer/zarr.json",
    f"runs/{RUN}/weights/zarr.json",
    f"runs/{RUN}/weights/head.weight/zarr.json",
    "results/probes/parity/zarr.json",
    "results/probes/parity/accuracy/zarr.json",
]


@pytest.mark.slow
def test_fault_injection_every_case_detected_named_and_repaired_bit_identical(captured, tmp_path, capsys):
    original = _files(captured)
    injected = detected = repaired = 0
    misses = []
    for name in FILES:
        for kind, damage in DAMAGE.items():
            work = tmp_path / f"case{injected}"
            shutil.copytree(captured, work)
            target = work / name
            bad = damage(target.read_bytes())
            assert bad != target.read_bytes()
            target.write_bytes(bad)
            injected += 1
            # metadata only: chunks are not touched here (the chunk checks are tested elsewhere)
            rep = validate(str(work), check_chunks=False)
            if not rep.ok and any(p.startswith(name) for p in rep.problems):
                detected += 1
            else:
                misses.append(f"{name} {kind}: {rep.problems or 'ok'}")
                continue
            repair(str(work), check_chunks=False)
            if validate(str(work), check_chunks=False).ok and _files(work) == original:
                repaired += 1
            else:
                misses.append(f"{name} {kind}: not restored")
            shutil.rmtree(work)
    with capsys.disabled():
        print(f"\nmetadata fault injection: {detected}/{injected} detected and named, "
              f"{repaired}/{injected} repaired bit-identical")
    assert not misses, misses
    assert detected == injected == repaired == len(FILES) * len(DAMAGE)


def test_damage_that_leaves_no_intact_copy_is_refused_and_nothing_changes(captured, tmp_path):
    work = tmp_path / "s.zarr"
    shutil.copytree(captured, work)
    node = work / GROUP / "hidden" / "zarr.json"
    node.write_bytes(node.read_bytes()[:40])  # the node's own file, cut short
    root = work / "zarr.json"
    doc = json.loads(root.read_bytes())  # ... and its snapshot copy changed in place
    doc["consolidated_metadata"]["metadata"][f"{GROUP}/hidden"]["shape"][0] += 1
    root.write_text(json.dumps(doc, indent=2))
    before = _files(work)
    rep = validate(str(work))
    assert any(p.startswith(f"{GROUP}/hidden/zarr.json") and "no intact copy" in p for p in rep.problems)
    with pytest.raises(RepairRefusedError, match=rf"not repaired, nothing changed: {GROUP}/hidden/zarr.json"):
        repair(str(work))
    assert _files(work) == before
    # the root and its copy file both damaged: refused too
    shutil.rmtree(work)
    shutil.copytree(captured, work)
    for name in ("zarr.json", "layerstate-metadata.json"):
        (work / name).write_bytes((work / name).read_bytes()[:100])
    before = _files(work)
    with pytest.raises(RepairRefusedError, match="root's metadata is damaged"):
        repair(str(work))
    assert _files(work) == before


def test_dry_run_lists_the_repairs_and_changes_nothing(captured, tmp_path):
    work = tmp_path / "s.zarr"
    shutil.copytree(captured, work)
    f = work / GROUP / "zarr.json"
    f.write_bytes(change_number(f.read_bytes(), 0))
    before = _files(work)
    rep = repair(str(work), dry_run=True)
    assert rep.actions == [f"restore {GROUP}/zarr.json from its copy in the consolidated snapshot"]
    assert _files(work) == before
    assert repair(str(work)).ok and validate(str(work)).ok


def test_a_damaged_root_is_a_damaged_root_not_another_store(captured, tmp_path):
    work = tmp_path / "s.zarr"
    shutil.copytree(captured, work)
    root = work / "zarr.json"
    good = root.read_bytes()
    for bad in (good[:200], good.replace(b"layerstate/1", b"layerstate/7"),
                good.replace(b'"schema"', b'"schemb"', 1)):
        root.write_bytes(bad)
        with pytest.raises(MetadataDamagedError, match=r"zarr.json \(the store's root metadata\) is damaged.*layerstate repair"):
            Store.open(str(work))
    root.unlink()
    with pytest.raises(MetadataDamagedError, match="the file is missing"):
        Store.open(str(work))
    repair(str(work))
    assert root.read_bytes() == good
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotAStoreError, match="not a layerstate store"):
        Store.open(str(plain))


def test_damaged_metadata_is_named_on_read_and_write(make_store):
    st = make_store(n=32)
    f = Path(str(st.location)) / "runs" / "r0" / "len_012" / "hidden" / "zarr.json"
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
    named = r"runs/r0/len_012/hidden/zarr.json is damaged: not valid JSON: .*layerstate repair"
    for mode in ("r", "r+"):
        with pytest.raises(MetadataDamagedError, match=named):
            Store.open(str(st.location), mode=mode).load_length("r0", 12)
    with pytest.raises(MetadataDamagedError, match=named):
        Store.open(str(st.location), mode="r+").write_length(
            "r0", 12, **synthetic_arrays(np.random.default_rng(0), n=32), block_size=16)


def test_a_write_in_progress_is_not_flagged_as_damage(make_store):
    """Completion records and run attributes move on between consolidations: warnings only."""
    st = make_store(n=32)
    arrs = synthetic_arrays(np.random.default_rng(1), n=48)
    st.add_run("r1", task="parity", arch="lstm", seed=1)

    def block(b):
        s = slice(16 * b, 16 * (b + 1))
        return dict(hidden=arrs["hidden"][s], tokens=arrs["tokens"][s],
                    labels={k: v[s] for k, v in arrs["labels"].items()}, logits=arrs["logits"][s])

    with st.length_writer("r1", 12, n_sequences=48, n_layers=2, n_features=8, labels=["parity", "ones"],
                          n_classes=2, block_size=16) as w:
        w.write_block(0, **block(0))
        w.flush()
        st.consolidate()  # a snapshot taken mid-write
        w.write_block(1, **block(1))
        w.flush()
        with st.deferred_consolidation():
            st.update_run_attrs("r0", metrics={"accuracy": {"12": 0.9}})
            rep = validate(str(st.location), check_chunks=False)
        assert rep.ok, rep.problems
        assert any("runs/r1/len_012/zarr.json: newer than the snapshot (2 of 3 blocks" in x for x in rep.warnings)
        assert any("runs/r0/zarr.json: newer than the snapshot (attributes metrics added" in x for x in rep.warnings)
        w.write_block(2, **block(2))
    rep = validate(str(st.location))
    assert rep.ok and not [x for x in rep.warnings if "snapshot" in x], rep.warnings


def test_damaged_chunks_are_not_repairable_but_can_be_rewritten(make_store):
    st = make_store(n=32, block_size=16)
    root = Path(str(st.location))
    chunk = root / "runs" / "r0" / "len_012" / "hidden" / "c" / "1" / "0" / "0" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[5] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    rep = repair(str(root))
    assert not rep.ok and not rep.actions
    assert rep.unrepairable == [
        "runs/r0/len_012/hidden chunk (1, 0, 0, 0): chunk data has no second copy; re-capture it: "
        "`layerstate repair --forget-damaged` marks its block unwritten, then `layerstate capture` "
        "rewrites it (capture resumes)"]
    rep = repair(str(root), forget_damaged=True)
    assert "mark block(s) 1 of runs/r0/len_012 unwritten" in rep.actions[0]
    st = Store.open(str(root), mode="r+")
    arrs = synthetic_arrays(np.random.default_rng(7), n=32)
    with st.length_writer("r0", 12, n_sequences=32, n_layers=2, n_features=8, labels=["parity", "ones"],
                          n_classes=2, block_size=16) as w:
        assert w.missing_blocks() == [1]  # what a resumed capture rewrites
        s = slice(16, 32)
        w.write_block(1, hidden=arrs["hidden"][s], tokens=arrs["tokens"][s],
                      labels={k: v[s] for k, v in arrs["labels"].items()}, logits=arrs["logits"][s])
    assert validate(str(root)).ok


def test_a_store_without_digests_is_warned_about_and_repair_records_them(make_store):
    st = make_store(n=16)
    copy = Path(str(st.location)) / "layerstate-metadata.json"
    good = copy.read_bytes()
    copy.unlink()
    rep = validate(str(st.location))
    assert rep.ok and any(w.startswith("layerstate-metadata.json: no metadata digests") for w in rep.warnings)
    repair(str(st.location))
    assert copy.read_bytes() == good


# ---------------------------------------------------------------------- command line
def _cli(*args: str):
    from layerstate.cli import main

    return CliRunner().invoke(main, list(args))


def test_cli_validate_names_the_file_and_repair_fixes_it(make_store):
    st = make_store(n=16)
    path = str(st.location)
    f = Path(path) / "runs" / "r0" / "len_012" / "hidden" / "zarr.json"
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
    res = _cli("validate", path)
    assert res.exit_code == 2 and "problem: runs/r0/len_012/hidden/zarr.json: damaged (not valid JSON" in res.output
    res = _cli("probe", path)
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and re.search(
        r"layerstate: error: .*runs/r0/len_012/hidden/zarr.json is damaged: not valid JSON.*layerstate repair", line)
    res = _cli("repair", "--dry-run", path)
    assert res.exit_code == 0 and "would restore runs/r0/len_012/hidden/zarr.json" in res.output
    res = _cli("repair", path)
    assert res.exit_code == 0 and f"repaired {path}: 1 repair(s)" in res.output
    assert _cli("validate", path).exit_code == 0


def test_cli_repair_refusal_is_one_line_exit_2(make_store):
    st = make_store(n=16)
    path = Path(str(st.location))
    for name in ("zarr.json", "layerstate-metadata.json"):
        (path / name).write_bytes(b"{")
    res = _cli("repair", str(path))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "not repaired, nothing changed: zarr.json" in res.output
    res = _cli("inspect", str(path))
    assert res.exit_code == 2 and "zarr.json (the store's root metadata) is damaged" in res.output
