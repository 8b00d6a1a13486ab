"""Bad input is a project error (a :class:`store.LayerstateError`): one line that names the
problem and the fix, exit code 2 from the command line, nothing stored changed. A builtin
error that escapes the library is a bug: the command line shows it as one (exit 1, its
traceback), never as a "bad input" line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from layerstate.cli import main
from store import InvalidArrayError, LayerstateError, MissingError, RunConflictError, Store
from store.errors import InvalidArgumentError


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(res, *needles: str) -> str:
    """The single ``layerstate: error:`` line of a refused command (exit 2), checked."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    errors = [line for line in res.output.splitlines() if line.startswith("layerstate: error: ")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    line = errors[0]
    assert res.output.rstrip().endswith(line), res.output  # the error is the last thing said
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def refused(exc_type: type[Exception], builtin: type[Exception], match: str):
    """``pytest.raises`` for a project error that is also the builtin callers may catch."""
    assert issubclass(exc_type, LayerstateError) and issubclass(exc_type, builtin)
    return pytest.raises(exc_type, match=match)


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- a bug is a bug
@pytest.mark.parametrize("builtin", [KeyError, ValueError])
def test_an_internal_builtin_error_is_a_bug_not_bad_input(make_store, monkeypatch, builtin):
    """A KeyError from a programming mistake used to exit 2 as if the input were bad; it is a
    bug: exit 1 with the exception (its traceback), with or without --debug."""
    import layerstate.cli.store_commands as store_commands

    st = make_store(n=40)

    def broken(*args, **kwargs):
        raise builtin("'n_layers'")  # what a mistyped dict key looks like

    monkeypatch.setattr(store_commands, "summary", broken)  # where `inspect` reads it
    for args in (("inspect", st.location), ("--debug", "inspect", st.location)):
        res = cli(*args)
        assert res.exit_code == 1 and type(res.exception) is builtin, res.output
        assert "layerstate: error" not in res.output
        assert res.exc_info is not None and res.exc_info[2] is not None  # a traceback to show


def test_a_project_error_is_one_line_and_debug_shows_it(make_store, monkeypatch):
    import layerstate.cli.store_commands as store_commands

    st = make_store(n=40)

    def refuse(*args, **kwargs):
        raise MissingError("run 'x' is not in the store; runs there: r0")

    monkeypatch.setattr(store_commands, "summary", refuse)
    one_line(cli("inspect", st.location), "run 'x' is not in the store; runs there: r0")
    res = cli("--debug", "inspect", st.location)
    assert res.exit_code == 1 and isinstance(res.exception, MissingError)


def test_the_temporary_catch_all_is_gone():
    from layerstate import cli as cli_module

    assert not hasattr(cli_module, "_NOT_YET_PROJECT_ERRORS")
    caught = cli_module.bad_input_types()
    assert KeyError not in caught and ValueError not in caught


# ----------------------------------------------------------------------------- pack
def test_pack_to_a_name_without_zip_is_one_line(make_store, tmp_path):
    st = make_store(n=40)
    before = _files(Path(str(st.location)))
    one_line(cli("pack", st.location, tmp_path / "s.tar"), "must end in .zip", "s.zip")
    assert not (tmp_path / "s.tar").exists() and _files(Path(str(st.location))) == before


def test_packing_a_packed_store_is_one_line(make_store, tmp_path):
    st = make_store(n=40)
    assert cli("pack", st.location, tmp_path / "a.zip").exit_code == 0
    one_line(cli("pack", tmp_path / "a.zip", tmp_path / "b.zip"), "already a packed store",
             "layerstate unpack")
    assert not (tmp_path / "b.zip").exists()


def test_unpacking_a_file_that_is_not_a_zip_is_one_line(tmp_path):
    (tmp_path / "notes.zip").write_text("not a zip")
    one_line(cli("unpack", tmp_path / "notes.zip", tmp_path / "out"), "is not a zip file",
             "layerstate pack")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- probes
@pytest.mark.parametrize("args,needles", [
    (("--runs", "nope"), ("runs ['nope'] are not in the store", "runs there: r0")),
    (("--layers", "L9"), ("layer 'L9' is not in run 'r0'", "pick among them")),
    (("--lengths", "99"), ("run 'r0' has no stored length [99]", "capture the missing ones")),
    (("--folds", "1"), ("folds must be an integer from 2 to 1000", "got 1")),
    (("--target", "nope"), ("label 'nope' does not exist in run 'r0'", "labels there: parity, ones")),
    (("--positions", "99"), ("position 99 is out of range", "pass positions below")),
])
def test_probe_bad_options_are_one_line_and_store_nothing(make_store, args, needles):
    st = make_store(n=40)
    if "--target" not in args:
        args = (*args, "--target", "parity")
    one_line(cli("probe", st.location, *args), *needles)
    assert Store.open(str(st.location)).results() == []


def test_probe_planning_errors_are_project_errors(make_store):
    from analysis.probes.plan import check_C, check_options, choose_layers, select_runs

    st = make_store(n=40)
    with refused(InvalidArgumentError, ValueError, r"no runs match the selection .*dict of attributes"):
        select_runs(st, {"arch": "mamba"})
    with refused(MissingError, KeyError, r"runs \['x'\] are not in the store"):
        select_runs(st, ["x"])
    with refused(InvalidArgumentError, ValueError, r"layer index 7 is out of range .*use 0\.\.2 or a name"):
        choose_layers(["embed", "L0", "L1"], 7, "r0")
    with refused(InvalidArgumentError, ValueError, "C .*must be a positive number"):
        check_C(-1)
    for kwargs, message in (
        ({"method": "fast"}, "method must be one of"),
        ({"control": "shuffle"}, "control must be True, False or one of"),
        ({"positions": "first"}, "positions must be one of"),
        ({"positions": [-1]}, "positions must be non-negative integers"),
    ):
        options = {"positions": "all", "method": "exact", "control": False, "folds": 5, "C": None}
        with refused(InvalidArgumentError, ValueError, message):
            check_options(**{**options, **kwargs})


def test_a_label_undefined_everywhere_is_a_project_error(tmp_path):
    from analysis.probes.plan import build_labels

    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    rng = np.random.default_rng(0)
    st.write_length("r0", 6, hidden=rng.standard_normal((8, 6, 2, 4)).astype("float32"),
                    tokens=rng.integers(0, 2, (8, 6)), labels={"never": np.full((8, 6), -1)})
    with refused(InvalidArgumentError, ValueError, "undefined .* probe a label that is defined"):
        build_labels(st, "r0", [6], [], "never", None, 2, 0)


# ----------------------------------------------------------------------------- interventions
@pytest.fixture(scope="module")
def ar(tmp_path_factory):
    """An untrained associative-recall transformer (d_model 16) with one captured length and
    counterfactual twins: enough for ablate and patch to reach their checks."""
    from capture.models import ModelConfig, build_model
    from capture.record import capture_counterfactuals, capture_length
    from capture.tasks import get_task

    task = get_task("assoc_recall", n_keys=8, n_values=8)
    cfg = ModelConfig(arch="transformer", d_model=16, n_layers=1)
    n_classes = task.n_classes[task.target]
    model = build_model(cfg, vocab_size=task.vocab_size, n_classes=n_classes, seed=0)
    st = Store.create(str(tmp_path_factory.mktemp("ar") / "s.zarr"))
    rid = "ar-transformer"
    st.add_run(rid, task="assoc_recall", arch="transformer", seed=0, model_config=cfg.model_dump(),
               task_config=task.model_dump())
    st.write_weights(rid, model.state_dict())
    st.update_run_attrs(rid, vocab_size=task.vocab_size, n_classes=n_classes, target=task.target,
                        status="trained")
    capture_length(st, rid, 12, n_sequences=40)
    capture_counterfactuals(st, rid, 12, n_pairs=8)
    return st, rid


def _copy_store(st: Store, tmp_path: Path) -> Path:
    path = tmp_path / "copy.zarr"
    shutil.copytree(str(st.location), path)
    return path


@pytest.mark.parametrize("command,args,needles", [
    ("ablate", ("--settings", "pca:64"), ("k=64 for 'pca:64' is not within 1..16", "choose k <= 16")),
    ("patch", ("--length", "12", "--positions", "3,99"),
     ("positions [99] are outside 0..11", "pass positions from 0 to 11")),
    ("patch", ("--length", "12", "--corruption", "noise"), ("Gaussian-noise corruption is refused",)),
])
def test_intervention_bad_input_is_one_line_and_changes_nothing(ar, tmp_path, command, args, needles):
    path = _copy_store(ar[0], tmp_path)
    before = _files(path)
    one_line(cli(command, path, *args), *needles)
    assert _files(path) == before


def test_ablation_settings_and_options_are_project_errors(ar):
    from analysis.interventions import ablation, fit_directions, parse_settings

    st, rid = ar
    for text, message in (("pcb:2", "unknown ablation setting 'pcb:2'; valid forms"),
                          ("pca", "pca needs a size, e.g. 'pca:4'"),
                          ("leace:2", "leace takes no ':k'"),
                          ("pca:two", "k must be integers like 'pca:1,2,4'"),
                          ("matched:random:1", "matched needs the setting it matches")):
        with refused(InvalidArgumentError, ValueError, message):
            parse_settings([text])
    with refused(InvalidArgumentError, ValueError, "for LEACE use analysis.interventions.leace"):
        fit_directions(st, rid, 12, method="leace")
    with refused(InvalidArgumentError, ValueError, r"needs rng=numpy\.random\.default_rng"):
        fit_directions(st, rid, 12, method="random", k=1)
    for kwargs, message in (({"mode": "half"}, "mode must be one of zero, mean"),
                            ({"fit_fraction": 1.5}, r"fit_fraction must be in \(0, 1\)"),
                            ({"folds": 1}, "folds must be >= 2"),
                            ({"refit_rows": 3}, "refit_rows must be >= 10"),
                            ({"settings": ["given"]}, "setting 'given' needs directions=DataArray")):
        with refused(InvalidArgumentError, ValueError, message):
            ablation(st, [rid], [12], **kwargs)
    with refused(InvalidArgumentError, ValueError, "too few to fit on .*capture more sequences"):
        ablation(st, [rid], [12], fit_fraction=0.99)
    with refused(MissingError, KeyError, r"unknown layer\(s\) 'L7' .*stored layers: embed, L0"):
        ablation(st, [rid], [12], layers=["L7"])


def test_given_directions_that_do_not_fit_are_project_errors(ar):
    from analysis.interventions import ablation

    st, rid = ar

    def given(layers, features, dims=("layer", "direction", "feature")):
        return xr.DataArray(np.ones((len(layers), 1, features)), dims=dims, coords={dims[0]: layers})

    with refused(MissingError, KeyError, "given directions have no layer 'L0'.*fit them for every"):
        ablation(st, [rid], [12], settings=["given"], layers=["L0"], directions=given(["embed"], 16))
    with refused(InvalidArrayError, ValueError, "given directions have 8 features; run .* has 16"):
        ablation(st, [rid], [12], settings=["given"], layers=["L0"], directions=given(["L0"], 8))
    with refused(InvalidArrayError, ValueError, r"directions must be \(layer, direction, feature\)"):
        ablation(st, [rid], [12], settings=["given"], layers=["L0"],
                 directions=given(["L0"], 16, ("layer", "row", "feature")))


def test_stored_probe_directions_name_what_is_missing(ar, tmp_path):
    from analysis.interventions import load_probe_directions

    st = Store.open(str(_copy_store(ar[0], tmp_path)), mode="r+")
    rid = ar[1]
    weights = xr.DataArray(np.ones((1, 2, 1, 16)), dims=("run", "layer", "class", "feature"),
                           coords={"run": [rid], "layer": ["embed", "L0"]})
    st.write_result("probes/answer", xr.Dataset({"weights": weights}))
    with refused(InvalidArgumentError, ValueError, "has a 'run' dim; pass the run to pick"):
        load_probe_directions(st, "answer")
    with refused(MissingError, KeyError, "has no run 'other'; it has ar-transformer; fit probes there"):
        load_probe_directions(st, "answer", run_id="other")
    per_position = weights.expand_dims(position=[0])
    st.write_result("probes/other", xr.Dataset({"weights": per_position}))
    with refused(MissingError, KeyError, "holds no pooled probe weights .*re-run `layerstate probe`"):
        load_probe_directions(st, "other")


def test_erasure_inputs_are_project_errors():
    from analysis.interventions import erase, inlp, probe_directions, projection_eraser
    from analysis.interventions.erasure import check_k

    rng = np.random.default_rng(0)
    hidden = xr.DataArray(rng.standard_normal((20, 4)), dims=("row", "feature"))
    labels = xr.DataArray(rng.integers(0, 2, 20), dims=("row",))
    with refused(InvalidArrayError, ValueError, "at least two classes.*use more sequences"):
        probe_directions(hidden, xr.zeros_like(labels))
    with refused(InvalidArrayError, ValueError, "labels have dims .*expected the dims of hidden"):
        probe_directions(hidden, labels.rename(row="sample"))
    with refused(InvalidArrayError, ValueError, "hidden must have a 'feature' dim.*rename"):
        probe_directions(hidden.rename(feature="unit"), labels)
    with refused(InvalidArgumentError, ValueError, "INLP needs rounds >= 1"):
        inlp(hidden, labels, rounds=0)
    with refused(InvalidArgumentError, ValueError, r"k=9 for 'pca:9' is not within 1\.\.4.*choose k <= 4"):
        check_k(9, 4, "pca:9")
    with refused(InvalidArrayError, ValueError, r"directions must have dims .*directions\.sel\(layer="):
        projection_eraser(xr.DataArray(np.ones((1, 1, 4)), dims=("layer", "direction", "feature")))
    eraser = projection_eraser(xr.DataArray(np.eye(4)[:1], dims=("direction", "feature")))
    with refused(InvalidArrayError, ValueError, "hidden must have a 'feature' dim"):
        erase(hidden.rename(feature="unit"), eraser)


def test_patching_inputs_are_project_errors(ar):
    from analysis.interventions import classify_mechanism, patched_logits, patching
    from analysis.interventions._common import rebuild

    st, rid = ar
    model = rebuild(st, rid)
    clean = st.load_length(rid, 12, kind="cfclean")[["hidden", "tokens"]]
    bad = st.load_length(rid, 12, kind="cfcorrupt")[["hidden", "tokens"]]
    patch = xr.DataArray(np.zeros((8, 12), bool), dims=("sequence", "position"))
    with refused(MissingError, KeyError, "clean must hold 'hidden' and 'tokens'"):
        patched_logits(model, clean[["tokens"]], bad, "L0", patch)
    with refused(InvalidArrayError, ValueError, "clean has 8 sequences and corrupted 4"):
        patched_logits(model, clean, bad.isel(sequence=slice(4)), "L0", patch)
    with refused(InvalidArrayError, ValueError, r"patch must be a bool DataArray \(sequence, position\)"):
        patched_logits(model, clean, bad, "L0", patch.isel(position=slice(3)))
    with refused(InvalidArgumentError, ValueError, "unknown corruption 'blur'; use 'token'"):
        patching(st, [rid], 12, corruption="blur")
    with refused(InvalidArgumentError, ValueError, "unknown subspace 'pca'; use one of"):
        patching(st, [rid], 12, subspace="pca")
    with refused(InvalidArgumentError, ValueError, "subspace 'given' needs directions=DataArray"):
        patching(st, [rid], 12, subspace="given")
    result = xr.Dataset(coords={"site": ["corrupt", "label"]})
    with refused(InvalidArgumentError, ValueError, "needs sites key, value and query.*classify an"):
        classify_mechanism(result)


def test_interchange_at_sites_a_run_does_not_store_is_a_project_error(ar):
    from analysis.interventions import interchange

    st, rid = ar
    with refused(MissingError, KeyError, "stores no position for site\\(s\\) nowhere; its sites: .*name sites"):
        interchange(st, [rid], 12, sites=["nowhere"])


# ----------------------------------------------------------------------------- tasks
def test_task_errors_are_project_errors(tmp_path):
    from capture.tasks import UnknownTaskError, get_task
    from capture.tasks.assoc_recall import AssocRecallConfig
    from capture.tasks.treecall import TreecallConfig

    with refused(UnknownTaskError, KeyError, "unknown task 'nope'; valid tasks: assoc_recall"):
        get_task("nope")
    assert issubclass(UnknownTaskError, MissingError) and issubclass(UnknownTaskError, ValueError)
    with refused(InvalidArgumentError, ValueError, "invalid parameters for task 'dyck'.*valid parameters"):
        get_task("dyck", k=0)
    with refused(InvalidArgumentError, ValueError, "parity: n must be >= 1 sequences"):
        get_task("parity").build(0, 0, 10)
    with refused(InvalidArgumentError, ValueError, r"treecall: length must be >= 8 \(the task's minimum\)"):
        get_task("treecall").build(0, 2, 7)
    with refused(InvalidArgumentError, ValueError, "n_pairs=16 needs length >= 37.*raise the length"):
        AssocRecallConfig.paper().build(0, 2, 30)
    with refused(InvalidArgumentError, ValueError, "needs k >= 2 bracket types"):
        get_task("dyck", k=1).counterfactual(np.random.default_rng(0), 2, 10)
    with refused(InvalidArgumentError, ValueError, "difficulty must be one of"):
        TreecallConfig.paper("hard")
    with refused(InvalidArgumentError, ValueError, "no sentence of at most 3 terminals.*smaller grammar"):
        get_task("treecall", n_nonterminals=1, max_rhs_len=1).build(0, 1, 8)
    (tmp_path / "empty").mkdir()
    with refused(InvalidArgumentError, ValueError, "no .py files .*give a corpus_dir"):
        get_task("code_depth", corpus_dir=str(tmp_path / "empty")).build(0, 2, 40)
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "tiny.py").write_text("x = 1\n")
    with refused(InvalidArgumentError, ValueError, "tokenizes into a window of 40 tokens.*shorter length"):
        get_task("code_depth", corpus_dir=str(tmp_path / "short"), eval_fraction=0.01).build(0, 2, 40)


def test_a_flat_code_window_cannot_be_corrupted_and_says_so(tmp_path):
    from capture.tasks import get_task

    (tmp_path / "deep").mkdir()
    # a window starts at the opening bracket, so with max_bracket_depth = 1 no token is below the clip
    (tmp_path / "deep" / "m.py").write_text("(" + " + ".join(["a"] * 400) + ")\n")
    task = get_task("code_depth", corpus_dir=str(tmp_path / "deep"), eval_fraction=0.01,
                    max_bracket_depth=1)
    with refused(InvalidArgumentError, ValueError, "no non-bracket token below the depth clip; raise"):
        task.counterfactual(np.random.default_rng(0), 2, 20)


# ----------------------------------------------------------------------------- experiments and capture
TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["{task}"]
archs = ["lstm"]
seeds = [0]

[train]
length = 12
steps = 4
batch_size = 8
eval_every = 2
n_eval = 16
eval_lengths = [12]
n_test = 16
warmup = 1

[capture]
lengths = [{length}]
n_sequences = 16

[tasks.{task}]
{task_params}

[models.lstm]
d_model = {d_model}
n_layers = 1
"""


AR = "n_keys = 8\nn_values = 8\nn_pairs = 3"  # needs length >= 11


def _experiment(path: Path, task="assoc_recall", length=12, d_model=16, task_params=AR) -> Path:
    path.write_text(TINY.format(task=task, length=length, d_model=d_model, task_params=task_params))
    return path


def test_a_bad_task_parameter_in_an_experiment_is_one_line(tmp_path):
    exp = _experiment(tmp_path / "e.toml", task="dyck", task_params="k = 0")
    one_line(cli("train", exp, "--store", tmp_path / "s.zarr"), "e.toml", "invalid parameters for task 'dyck'",
             "valid parameters: k")
    assert not (tmp_path / "s.zarr").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny trained associative-recall LSTM (4 steps)."""
    tmp = tmp_path_factory.mktemp("trained")
    res = cli("train", _experiment(tmp / "e.toml"), "--store", tmp / "s.zarr")
    assert res.exit_code == 0, res.output
    return tmp / "s.zarr"


@pytest.mark.slow
@pytest.mark.parametrize("change,needles", [
    ({"d_model": 24}, ("no longer matches run 'assoc_recall-lstm-default-s0'",
                       "capture into a new store or restore the experiment file")),
    ({"length": 8}, ("assoc_recall: n_pairs=3 needs length >= 11, got 8", "lower n_pairs or raise the length")),
])
def test_capture_refusals_are_one_line_and_keep_the_store(trained, tmp_path, change, needles):
    path = tmp_path / "s.zarr"
    shutil.copytree(trained, path)
    before = _files(path)
    exp = _experiment(tmp_path / "e.toml", **change)
    one_line(cli("capture", exp, "--store", path), *needles)
    assert cli("validate", path).exit_code == 0
    assert Store.open(str(path)).lengths("assoc_recall-lstm-default-s0") == []
    changed = {k for k in set(_files(path)) | set(before) if _files(path).get(k) != before.get(k)}
    assert all("len_" in k or k.endswith("zarr.json") for k in changed), changed


def test_capture_checks_are_project_errors():
    from capture.record import check_length

    class Model:
        max_length = 64

    with refused(InvalidArgumentError, ValueError, "at most 64 positions.*drop length 100"):
        check_length(Model(), "r0", 100)
    assert issubclass(RunConflictError, ValueError)


def test_unknown_stored_task_is_a_project_error(tmp_path):
    from capture.record import task_of

    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="imported", arch="lstm", seed=0)
    with refused(MissingError, KeyError, "unknown task 'imported'; valid tasks"):
        task_of(st, "r0")
