"""The ``layerstate`` command: each subcommand is one library call and one presentation.

Options shared by several commands are defined once, below; result text comes from
:mod:`layerstate.present`. Bad input gets one line on stderr and exit code 2 (``--debug``
shows the traceback): the project's own errors (:class:`store.LayerstateError` and its
subclasses — a malformed experiment or claim, a missing run, a corrupt chunk, ...), paths
that do not exist or already exist, and bad option values. Anything else is a bug and
shows its traceback.
"""
# Over 600 lines: one click command per subcommand, each a thin call into the library and one presentation.

from __future__ import annotations

import json
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from layerstate import present

if TYPE_CHECKING:
    from capture.device import Device

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C

#: Paths at the boundary: missing, already there, or not readable.
_PATH_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)


class BadInput(click.ClickException):
    """One line on stderr, exit code 2."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"layerstate: error: {self.message}", err=True)


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from store import LayerstateError

    return (LayerstateError, *_PATH_ERRORS)


def _one_line(exc: BaseException) -> str:
    msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return msg.splitlines()[0] if msg else type(exc).__name__


class _Commands(click.Group):
    """Every command's bad input becomes one line and exit 2, unless --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _bad_input_types() as exc:
            if ctx.params.get("debug"):
                raise
            raise BadInput(_one_line(exc)) from None
        except KeyboardInterrupt:  # Ctrl-C: one line of what is kept and how to go on, exit 130 as a shell's
            if ctx.params.get("debug"):
                raise
            again = " ".join(shlex.quote(a) for a in sys.argv[1:])
            click.echo("layerstate: interrupted: what was written before it is kept (trained runs and their "
                       "checkpoints, captured blocks, stored results); the same command resumes from there"
                       + (f": layerstate {again}" if again else ""), err=True)
            ctx.exit(EXIT_INTERRUPTED)


#: The project's own packages: a warning raised in them is one line, without the source line
#: Python's default format adds (a researcher reads the message, not our code).
_OWN = tuple(str(Path(__file__).resolve().parents[1] / pkg) for pkg in
             ("analysis", "capture", "layerstate", "reports", "store"))
_default_format = warnings.formatwarning


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    line: str | None = None) -> str:
    if str(Path(filename).resolve()).startswith(_OWN):
        return f"layerstate: warning: {message}\n"
    return _default_format(message, category, filename, lineno, line)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.version_option(package_name="layerstate")
def main(debug: bool) -> None:
    """layerstate: where does a sequence model hold its task state, and how sure are we?"""
    warnings.formatwarning = _format_warning


# ----------------------------------------------------------------------------- option types
class _Ints(click.ParamType):
    name = "N,N,..."

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int] | None:
        if isinstance(value, list):
            return value
        try:
            return [int(x) for x in str(value).split(",") if x.strip()] or None
        except ValueError:
            raise BadInput(f"{_flag(param)}: expected comma-separated integers, got {value!r}") from None


class _Seeds(click.ParamType):
    """A seed or an inclusive range of seeds: ``3`` or ``3-195`` (what `plan` prints)."""

    name = "N|A-B"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int]:
        if isinstance(value, list):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise BadInput(f"{_flag(param)}: expected a seed (3) or a range of seeds (3-7), got {value!r}")
        first = int(m.group(1))
        return list(range(first, int(m.group(2) or first) + 1))


class _Positions(_Ints):
    name = "all|last|pooled|N,N,..."

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return value if value in ("all", "last", "pooled") else super().convert(value, param, ctx)


class _Settings(click.ParamType):
    """Ablation settings, ``probe,leace,pca:1,4,random:4`` (``;`` separates too); a number
    after a comma belongs to the sweep before it. Checked by :func:`parse_settings`."""

    name = "SETTINGS"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[str]:
        if isinstance(value, list):
            return value
        from analysis.interventions import parse_settings

        items = [s.strip() for s in re.split(r"[;,](?!\s*\d)", str(value)) if s.strip()]
        try:
            parse_settings(items)
        except ValueError as exc:
            raise BadInput(f"{_flag(param)}: {exc}") from None
        return items


def _flag(param: Any) -> str:
    return "/".join(param.opts) if param is not None else "value"


def _check_device(ctx: Any, param: Any, device: str) -> Device:
    """--device resolved once, as the command line is read (:func:`capture.device.parse_device`):
    the :class:`~capture.device.Device` every stage and analysis of the command then uses."""
    from capture.device import CHOICES, DeviceError, parse_device

    try:
        where = parse_device(device)
    except DeviceError as exc:
        raise BadInput(str(exc)) from None
    if where.type == "meta":  # the tests' stand-in for a GPU, not a place to compute
        raise BadInput(f"unknown device {device!r}; use {CHOICES}")
    return where


def _storage_options(ctx: Any, param: Any, pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep:
            raise BadInput(f"storage option {p!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


# ----------------------------------------------------------------------------- shared options
INTS, POSITIONS, SETTINGS = _Ints(), _Positions(), _Settings()

store_argument = click.argument("store_path", metavar="STORE")
experiment_argument = click.argument("experiment", type=click.Path(dir_okay=False))
storage_option = click.option(
    "--storage-option", "-S", "storage_options", multiple=True, metavar="KEY=VALUE",
    callback=_storage_options,
    help="fsspec option for a store given as a URL (repeatable; values are JSON where they parse), "
         "e.g. -S anon=true or -S 'client_kwargs={\"endpoint_url\": \"http://host:9000\"}'; the same "
         "options open the store on every dask worker, and --results when it is a URL.",
)
device_option = click.option(
    "--device", default="cpu", show_default=True, callback=_check_device,
    help="torch device: cpu, or cuda when a GPU is present (never required).",
)
SCHEDULER_HELP = (
    "Where the work runs: auto (this machine: threads, or one process per core for a long probe "
    "sweep) | threads | processes | sync (one task at a time) | local:N (a local "
    "dask cluster of N one-thread processes, its address and dashboard link printed) | tcp://HOST:PORT (a "
    "running dask.distributed scheduler). An address nobody answers at: one line, exit 2."
)


def scheduler_option(help_text: str = SCHEDULER_HELP):
    """--scheduler, its form checked as the command line is read (no connection yet)."""
    return click.option("--scheduler", default="auto", show_default=True, metavar="SCHEDULER",
                        callback=_check_scheduler, help=help_text)


def _check_scheduler(ctx: Any, param: Any, scheduler: str) -> str:
    from analysis.compute import SchedulerError, check

    try:
        check(scheduler)
    except SchedulerError as exc:
        raise BadInput(f"--scheduler: {exc}") from None
    return scheduler


def _session(scheduler: str):
    """The command's one dask session (:func:`analysis.compute.connect`): a local scheduler
    as it is, else a client (a local cluster started for the command, or a connection to an
    address) closed when the command ends; announcements on stderr."""
    from analysis.compute import connect

    return connect(scheduler, say=lambda line: click.echo(line, err=True))
results_option = click.option(
    "--results", "results", default=None, metavar="DIR|URL",
    help="Keep results in this results store instead of inside STORE (which is then only read); "
         "a STORE that cannot be written gets one beside it (STORE.results.zarr) without this.",
)
lengths_option = click.option("--lengths", type=INTS, default=None,
                              help="Comma-separated lengths (default: all stored).")
_run_filters = (
    click.option("--runs", "runs", multiple=True, help="Run ids (repeatable); default all runs."),
    click.option("--task", "tasks", multiple=True, help="Only runs of this task (repeatable)."),
    click.option("--arch", "archs", multiple=True, help="Only runs of this architecture (repeatable)."),
)


def run_filters(fn):
    """--runs, --task, --arch."""
    for opt in reversed(_run_filters):
        fn = opt(fn)
    return fn


def _open(store_path: str, results: str | None, storage_options: dict):
    """STORE opened for an analysis that writes results (:func:`store.open_analysis`), with
    the -S options for STORE and for --results."""
    from store import PairedStore, open_analysis

    st = open_analysis(store_path, results=results, say=click.echo, storage_options=storage_options,
                       results_options=storage_options)
    if isinstance(st, PairedStore) and st.created:  # a command that fails writes nothing
        click.get_current_context().call_on_close(st.discard_if_unused)
    return st


def _selected_runs(st, runs: tuple[str, ...], tasks: tuple[str, ...], archs: tuple[str, ...]) -> list[str] | None:
    """The runs --runs/--task/--arch name (None: every run)."""
    from store import MissingError

    if runs:
        return list(runs)
    if not (tasks or archs):
        return None
    sel = st.select(**{k: list(v) for k, v in (("task", tasks), ("arch", archs)) if v})
    if not sel:
        from store.errors import did_you_mean

        near = "".join(did_you_mean(v, sorted({str(st.run_attrs(r).get(k)) for r in st.run_ids()}), what=f"--{k}")
                       for k, given in (("task", tasks), ("arch", archs)) for v in given)
        raise MissingError(f"no runs match task={list(tasks)} arch={list(archs)}{near or '; see `layerstate inspect`'}")
    return list(sel)


class _Bars:
    """Progress bars, one at a time (each closed when the next starts); off unless a terminal."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new(self, desc: str, total: int, **kw: Any) -> Any:
        from tqdm.auto import tqdm

        self.close()
        self.bar = tqdm(total=total, desc=desc, leave=False, disable=None, **kw)
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def training(self, desc: str, total: int):
        bar = self.new(desc, total)

        def step(n: int, point: dict) -> None:
            bar.n = n
            bar.set_postfix(valid=f"{point['valid_accuracy']:.3f}")
            bar.refresh()

        return step

    def capture(self, desc: str, total: int):
        return self.new(desc, total, unit="seq").update


# ----------------------------------------------------------------------------- store commands
@main.command()
@store_argument
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--detail", is_flag=True,
              help="List every run and captured group on its own lines (default: one row per cell).")
@results_option
@storage_option
def inspect(store_path: str, as_json: bool, detail: bool, results: str | None, storage_options: dict) -> None:
    """What is inside STORE (and its results store), at a glance: one row per cell (task/arch/variant)
    with its seeds, lengths, layers, labels and state, each note once, and the results."""
    from store import format_summary, open_analysis, summary

    st = open_analysis(store_path, results=results, write=False, storage_options=storage_options,
                       results_options=storage_options)
    info = summary(st)
    failed = present.failed_run_lines(st)
    if as_json:
        click.echo(json.dumps({**info, "did_not_learn": failed}, indent=2, default=str))
        return
    # one write: `layerstate inspect | head` must not fail on a closed pipe after the summary
    click.echo("\n".join([format_summary(info, detail=detail), *(f"failed   {line}" for line in failed)]))


@main.command()
@store_argument
@click.option("--strict", is_flag=True, help="Count warnings (a SHOULD not met) as problems: exit 2 on any.")
@storage_option
def validate(store_path: str, strict: bool, storage_options: dict) -> None:
    """Check every metadata file, STORE's schema, every chunk's checksum and that float data is
    finite: a problem (a MUST of docs/store-format.md broken) exits 2; warnings (a SHOULD not
    met) are listed and exit 0, unless --strict."""
    from store import validate as run_validate

    rep = run_validate(store_path, storage_options=storage_options, strict=strict)
    for line in present.validation_notes(rep):
        click.echo(line, err=True)
    if not rep.ok:
        raise BadInput(present.validation_verdict(rep, store_path))
    click.echo(present.graded_verdict(rep, store_path))


@main.command()
@store_argument
@click.option("--dry-run", is_flag=True, help="List what would be repaired; change nothing.")
@click.option("--forget-damaged", is_flag=True,
              help="Mark blocks holding damaged chunks unwritten, so `layerstate capture` rewrites them.")
@storage_option
def repair(store_path: str, dry_run: bool, forget_damaged: bool, storage_options: dict) -> None:
    """Rebuild damaged metadata from its intact copy (each node's zarr.json <-> the snapshot)."""
    from store import format_repair
    from store import repair as run_repair

    rep = run_repair(store_path, dry_run=dry_run, forget_damaged=forget_damaged,
                     storage_options=storage_options)
    lines = format_repair(rep)
    for line in lines[:-1]:
        click.echo(line)
    if not rep.ok and not dry_run:
        raise BadInput(lines[-1])
    click.echo(lines[-1])


@main.command()
@store_argument
@click.option("--result", "results", multiple=True, metavar="NAME",
              help="A result to remove, e.g. ablation/parity (repeatable).")
@run_filters
@click.option("--captures", is_flag=True,
              help="Remove the selected runs' captures (every kind: activations and counterfactual "
                   "twins), not the runs; with --lengths only those lengths.")
@click.option("--lengths", type=INTS, default=None, help="With --captures: comma-separated lengths.")
@click.option("--yes", is_flag=True, help="Needed to remove whole runs (their weights cannot be "
                                          "recomputed without training again).")
@click.option("--dry-run", is_flag=True, help="List what would be removed; change nothing.")
@click.option("--results", "results_path", default=None, metavar="DIR|URL",
              help="The results store the --result names live in (default: STORE's own results, or the "
                   "results store beside a STORE that cannot be written, e.g. acts.results.zarr beside acts.zip).")
@storage_option
def forget(store_path, results, runs, tasks, archs, captures, lengths, yes, dry_run, results_path,
           storage_options) -> None:
    """Remove results, captures or whole runs from STORE (to capture again with another dtype,
    train a run again with another budget, or drop a stale result). Results of a STORE that
    cannot be written (a zip) are removed from the results store beside it."""
    from store import Store
    from store.contents.forget import forget_plan
    from store.paired import ResultsBeside, results_home

    selected = bool(runs or tasks or archs)
    if not (results or selected):
        raise BadInput("name what to forget: --result NAME, or runs (--runs/--task/--arch), "
                       "with --captures to keep the runs and remove only their captures")
    if lengths and not captures:
        raise BadInput("--lengths applies to --captures; add --captures (whole runs have no lengths "
                       "to choose)")
    if captures and not selected:
        raise BadInput("--captures needs runs: --runs/--task/--arch")
    if results and not selected:  # results only: a read-only STORE keeps them beside it
        st = results_home(store_path, results_path, write=not dry_run, storage_options=storage_options)
        if isinstance(st, ResultsBeside):
            st.check(results)
    else:
        if results_path is not None:
            raise BadInput("--results applies to --result only; forget runs or captures in STORE itself")
        st = Store.open(store_path, mode="r" if dry_run else "r+", storage_options=storage_options)
    ids = _selected_runs(st, runs, tasks, archs) or []
    plan = forget_plan(st, results, ids, captures=captures, lengths=lengths)
    if selected and not captures and not (yes or dry_run):
        raise BadInput(f"removing {len(ids)} whole run(s) ({', '.join(ids[:3])}"
                       f"{' ...' if len(ids) > 3 else ''}) deletes their weights; pass --yes "
                       "(or --captures to remove only their captures, --dry-run to list)")
    for what, remove in plan:
        if not dry_run:
            remove()
        click.echo(f"{'would remove' if dry_run else 'removed'} {what}")
    if dry_run:
        click.echo("dry run: nothing was removed")


@main.command()
@store_argument
@click.argument("out", metavar="OUT.zip")
@click.option("--force", is_flag=True, help="Replace OUT.zip if it exists.")
def pack(store_path: str, out: str, force: bool) -> None:
    """Pack STORE into one zip file that every layerstate command (and xarray) reads."""
    from store import Store
    from store import pack as run_pack

    click.echo(present.packed(store_path, run_pack(Store.open(store_path), out, overwrite=force)))


@main.command()
@click.argument("archive", metavar="ARCHIVE.zip")
@click.argument("target", metavar="DIR")
def unpack(archive: str, target: str) -> None:
    """Unpack a packed store into a new directory DIR (member paths are checked)."""
    from store import unpack as run_unpack

    click.echo(present.unpacked(archive, run_unpack(archive, target)))


# ----------------------------------------------------------------------------- the pipeline
@main.command()
@experiment_argument
@click.option("--store", "store_path", required=True, metavar="DIR|URL",
              help="Store to train into (created if missing); on a dask cluster, a directory every "
                   "worker mounts at the same path or an object-store URL.")
@run_filters
@click.option("--seed", "seeds", multiple=True, type=_Seeds(),
              help="Only runs of this seed, or of a range of seeds such as 3-7 (repeatable): train a grid in "
                   "parts, seed 0 of every cell first.")
@click.option("--jobs", default=1, show_default=True,
              help="Runs trained in parallel on this machine (processes, one thread each; no progress "
                   "bars above 1); a cluster uses its workers.")
@device_option
@scheduler_option(SCHEDULER_HELP + " On a cluster each run is one task; workers write their runs "
                  "into the store.")
@storage_option
def train(experiment: str, store_path: str, runs: tuple[str, ...], tasks: tuple[str, ...],
          archs: tuple[str, ...], seeds: tuple[list[int], ...], jobs: int, device: Device, scheduler: str,
          storage_options: dict) -> None:
    """Train every run of EXPERIMENT, or the part of its grid that --runs/--task/--arch/--seed
    name (skips runs already trained)."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import train_experiment
    from store import Store

    if jobs < 1:
        raise BadInput(f"--jobs must be at least 1, got {jobs}")
    exp = load_experiment(experiment)
    part = exp.plan.select(runs=runs, tasks=tasks, archs=archs, seeds=tuple(s for got in seeds for s in got))
    n = len(part)
    with _session(scheduler) as sched, _Bars() as bars:
        Store.create(store_path, title=exp.experiment.title or exp.experiment.name, exist_ok=True,
                     storage_options=storage_options)
        for i, res in enumerate(train_experiment(exp.plan, store_path, jobs=jobs, device=device,
                                                 progress=bars.training, scheduler=sched,
                                                 storage_options=storage_options, runs=part), 1):
            bars.close()
            click.echo(present.training_line(res, i, n))


@main.command()
@experiment_argument
@click.option("--store", "store_path", required=True, metavar="DIR|URL", help="Store holding the trained runs.")
@device_option
@scheduler_option(SCHEDULER_HELP + " On a cluster each (run, length) is one task; workers write "
                  "into the store, one writer per run at a time.")
@storage_option
def capture(experiment: str, store_path: str, device: Device, scheduler: str, storage_options: dict) -> None:
    """Record every layer of every trained run of EXPERIMENT at every length (resumable)."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import capture_experiment

    exp = load_experiment(experiment)
    with _session(scheduler) as sched, _Bars() as bars:
        results = capture_experiment(exp.plan, store_path, device=device, scheduler=sched,
                                     storage_options=storage_options, progress_factory=bars.capture)
    click.echo(present.capture_line(results, into=store_path))


@main.command()
@experiment_argument
@click.option("--out", "out", required=True, help="Output folder: store.zarr (unless --store) and report/ go there.")
@click.option("--store", "store_path", default=None, metavar="DIR|URL",
              help="The store, if not OUT/store.zarr: e.g. s3://bucket/acts.zarr (with -S options) for "
                   "a cluster whose workers share no filesystem.")
@click.option("--jobs", default=2, show_default=True,
              help="Runs trained in parallel on this machine (processes); a cluster uses its workers.")
@click.option("--task", "tasks", multiple=True,
              help="Run only this task's part of the grid (repeatable): its runs, and the claims "
                   "that read only the tasks named. A grid too big for one sitting is run in parts.")
@click.option("--design", "design", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A TOML file whose [design] (a group-sequential design over seeds) replaces the "
                   "experiment's: the grid is run stage by stage, new seeds only for the cells that "
                   "undecided claims read (docs/sequential.md).")
@device_option
@scheduler_option(SCHEDULER_HELP + " On a cluster each run's training and each (run, length) "
                  "capture is a task, then the analyses run there; claims and the report here.")
@storage_option
def run(experiment: str, out: str, store_path: str | None, jobs: int, tasks: tuple[str, ...], design: str | None,
        device: Device, scheduler: str, storage_options: dict) -> None:
    """The main job: train -> capture -> analyse -> claims -> report (re-run resumes). With a
    [design], stage by stage until every claim is decided or its cells reach their maximum."""
    from layerstate.pipeline import run_experiment

    run_experiment(experiment, out, store=store_path, storage_options=storage_options, scheduler=scheduler,
                   jobs=jobs, device=device, tasks=tasks or None, design=design, say=click.echo)


# ----------------------------------------------------------------------------- analyses
@main.command()
@store_argument
@run_filters
@click.option("--target", default=None,
              help="Label to decode (default: each task's training target; a store of several tasks "
                   "is probed task by task, one result per task).")
@click.option("--layers", default=None, help="Comma-separated layers, e.g. embed,L0,L3 (default all).")
@click.option("--positions", type=POSITIONS, default="all", show_default=True,
              help="all | last | pooled | comma-separated indices.")
@lengths_option
@click.option("--train-length", type=int, default=None, metavar="L",
              help="Fit at length L only and score at the others (default: none, each length is "
                   "fitted and cross-validated on its own).")
@click.option("--folds", default=5, show_default=True, help="k-fold split by sequence.")
@click.option("--method", type=click.Choice(["exact", "screen", "reference"]), default="exact", show_default=True)
@click.option("--control", type=click.Choice(["permute", "token", "none"]), default="permute", show_default=True,
              help="Control task for selectivity (accuracy - control accuracy): permute (each position's "
                   "labels shuffled across sequences; also `layerstate run`'s default, [analysis] "
                   "probe_control), token (Hewitt & Liang: a random class per token type; decodable "
                   "outright when a task has few token types) or none.")
@scheduler_option()
@click.option("--name", default=None,
              help="Result name (default probes/<task>, or probes/<task>.<target> for another label; "
                   "a stored result with other settings is kept and this one stored beside it).")
@results_option
@storage_option
@click.option("--quiet", "-q", is_flag=True,
              help="No work estimate or progress lines on stderr (the results still print).")
def probe(store_path, runs, tasks, archs, target, layers, positions, lengths, train_length, folds,
          method, control, scheduler, name, results, storage_options, quiet) -> None:
    """Fit linear probes on every (run, length, layer, position) of STORE; store results/probes/<task>.

    Says first on stderr how many probe cells it will fit and roughly how long that takes, then
    its progress every 10 s (--quiet: neither). Prints held-out probe accuracy per layer (mean
    over folds and positions) beside chance (the majority class) and the control task's accuracy."""
    from analysis.probes import probe as run_probe
    from analysis.probes import runs_by_task, save_probes, storage_name
    from analysis.probes.plan import select_runs
    from store import schema

    if name is not None:
        try:
            name = schema.result_name(schema.PROBES, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    with _session(scheduler) as sched:
        st = _open(store_path, results, storage_options)
        selected = select_runs(st, _selected_runs(st, runs, tasks, archs))
        groups = runs_by_task(st, selected)
        if name and len(groups) > 1 and target is None:
            from analysis.probes.plan import choose_target
            from store import MissingError

            try:
                choose_target(st, selected, None)
            except MissingError:
                first = next(iter(groups))
                raise BadInput(f"--name names one result, and the selected runs are of {len(groups)} tasks "
                               f"({', '.join(groups)}) trained on different targets: add --task {first} (one "
                               "task, one name), or --target LABEL (a label every run has), or leave --name "
                               "out (one result per task)") from None
        if target is not None and len(groups) > 1:
            _check_target(st, target, groups)
        if name:
            groups = {"": selected}
        for task, ids in groups.items():
            progress = None if quiet else _probe_progress(task if len(groups) > 1 else "")
            ds = run_probe(
                st, target, runs=ids, layers=layers.split(",") if layers else None,
                positions=positions, lengths=lengths, train_length=train_length, folds=folds, method=method,
                control=control, scheduler=sched, save=False, progress=progress,
            )
            stored, note = storage_name(st, ds, name, where=store_path)
            save_probes(st, ds, stored)
            for line in present.probe_lines(ds):
                click.echo(line)
            if note:
                click.echo(note)
            click.echo(present.stored(stored))


def _probe_progress(task: str) -> Any:
    """A probe sweep's size, then its progress every few seconds, on stderr (``task`` names
    the sweep when a store of several tasks is probed task by task)."""
    from analysis.probes.progress import Progress, SweepSize, Tick

    def begin(size: SweepSize) -> None:
        click.echo(present.probe_work_line(size, task), err=True)

    def report(tick: Tick) -> None:
        click.echo(present.probe_progress_line(tick, task), err=True)

    return Progress(report, begin=begin)


def _stored_as(kind: str, name: str) -> str:
    """The result name an analysis stored ``name`` under (:func:`store.schema.result_name`)."""
    from store import schema

    try:
        return schema.result_name(kind, name)
    except ValueError:  # a name the schema would refuse was stored by the analysis as given
        return f"{kind}/{name}"


def _check_target(st, target: str, groups: dict[str, list[str]]) -> None:
    """--target names a label the runs of every selected task have; else one line naming the
    tasks whose runs have it (--task)."""
    lacking, having = {}, []
    for task, ids in groups.items():
        labels = sorted({lab for r in ids for L in st.lengths(r) for lab in st.label_names(r, L)})
        (having.append(task) if target in labels else lacking.update({task: labels}))
    if lacking:
        task, labels = next(iter(lacking.items()))
        fix = (f"add --task {having[0]} to probe only the runs that have it" if having else
               "choose one of those labels")
        raise BadInput(f"label {target!r} does not exist in the runs of task {task!r} (labels there: "
                       f"{', '.join(labels) or 'none'}); {fix}")


@main.command()
@store_argument
@run_filters
@click.option("--target", default=None,
              help="Label to code (default: each task's training target; one result per task).")
@click.option("--layers", default=None, help="Comma-separated layers, e.g. embed,L0,L3 (default all).")
@click.option("--positions", type=POSITIONS, default="last", show_default=True,
              help="last | pooled | all | comma-separated indices (all: one code per position, many cells).")
@lengths_option
@click.option("--method", type=click.Choice(["exact", "reference"]), default="exact", show_default=True,
              help="exact: every block of a layer's cells in one batched fit; reference: scikit-learn per block.")
@click.option("--control", type=click.Choice(["permute", "token", "none"]), default="permute", show_default=True,
              help="Code a control labelling too (permute: each position's labels shuffled across sequences; "
                   "it should compress about 1).")
@scheduler_option()
@click.option("--name", default=None, help="Result name (default mdl/<task>, or mdl/<task>.<target>).")
@results_option
@storage_option
@click.option("--quiet", "-q", is_flag=True, help="No work estimate on stderr (the results still print).")
def mdl(store_path, runs, tasks, archs, target, layers, positions, lengths, method, control, scheduler, name,
        results, storage_options, quiet) -> None:
    """Online codelength of a label (MDL probe, Voita & Titov 2020) per (run, length, layer); store results/mdl/<task>.

    Says first on stderr how many cells it will code and roughly how long that takes (--quiet:
    not). Prints the compression (uniform / online codelength) per layer and the control's."""
    from analysis.probes import plan_mdl, runs_by_task, save_mdl
    from analysis.probes.plan import select_runs
    from analysis.probes.probing import task_attrs
    from store import schema

    if name is not None:
        try:
            name = schema.result_name(schema.MDL, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    with _session(scheduler) as sched:
        st = _open(store_path, results, storage_options)
        selected = select_runs(st, _selected_runs(st, runs, tasks, archs))
        groups = {"": selected} if name else runs_by_task(st, selected)
        if target is not None and len(groups) > 1:
            _check_target(st, target, groups)
        for task, ids in groups.items():
            plan = plan_mdl(st, target, runs=ids, layers=layers.split(",") if layers else None,
                            positions=positions, lengths=lengths, method=method, control=control)
            if not quiet:
                click.echo(present.mdl_work_line(plan, task if len(groups) > 1 else ""), err=True)
            ds = plan.compute(sched)
            ds.attrs.update(task_attrs(st, list(ds.run.values)), command="layerstate mdl")
            stored = save_mdl(st, ds, name)
            for line in present.mdl_lines(ds):
                click.echo(line)
            click.echo(present.stored(stored))


@main.command()
@store_argument
@run_filters
@click.option("--result", default=None,
              help="Probe result whose probes are compared (default: probes/<task> of each task).")
@click.option("--layers", default=None, help="Comma-separated layers, e.g. embed,L0,L3 (default all).")
@lengths_option
@click.option("--inputs", type=click.Choice(["auto", "shared", "rerun"]), default="auto", show_default=True,
              help="How two seeds get states on the same sequences: auto (sequences both hold, else each "
                   "stored model run on the other's), shared, rerun.")
@click.option("--shuffles", type=click.IntRange(min=1), default=20, show_default=True,
              help="Label permutations of the shuffled-label null (probes refitted on each, both seeds alike).")
@click.option("--name", default=None, help="Result name (default stability/<the probe result's name>).")
@results_option
@storage_option
@click.option("--quiet", "-q", is_flag=True, help="No work estimate on stderr (the results still print).")
def stability(store_path, runs, tasks, archs, result, layers, lengths, inputs, shuffles, name, results,
              storage_options, quiet) -> None:
    """How alike the seeds' probe subspaces are per layer, after aligning their states; store results/stability/<task>.

    Reads the full-data probes of a probe result (run `layerstate probe` first). Says first on
    stderr how many seed pairs and layers it compares (--quiet: not). Prints per layer the mean
    overlap over seed pairs with its interval over seeds, the random-subspace null and the
    shuffled-label null (probes of the label permuted across sequences, fitted and mapped alike)."""
    from analysis.probes import plan_stability, runs_by_task, save_stability
    from analysis.probes.plan import select_runs
    from store import schema

    if name is not None:
        try:
            name = schema.result_name(schema.STABILITY, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    st = _open(store_path, results, storage_options)
    selected = select_runs(st, _selected_runs(st, runs, tasks, archs))
    groups = {"": selected} if result else runs_by_task(st, selected)
    for task, ids in groups.items():
        plan = plan_stability(st, result, runs=ids, layers=layers.split(",") if layers else None,
                              lengths=lengths, inputs=inputs, shuffles=shuffles)
        if not quiet:
            click.echo(present.stability_work_line(plan, task if len(groups) > 1 else ""), err=True)
        ds = plan.compute()
        ds.attrs.update(command="layerstate stability")
        stored = save_stability(st, ds, name)
        for line in present.stability_lines(st.read_result(stored), st):
            click.echo(line)
        click.echo(present.stored(stored))


@main.command()
@store_argument
@run_filters
@click.option("--settings", type=SETTINGS, default="probe,leace,pca:1,random:1", show_default=True,
              help="Semicolon- or comma-separated: probe, stored, leace, inlp:k, pca:k, svd:k, random:k "
                   "(k may be a list: pca:1,4), matched:SETTING.")
@click.option("--fit-length", type=int, default=None, help="Fit directions at this length (default: the shortest).")
@lengths_option
@click.option("--mode", type=click.Choice(["zero", "mean"]), default="zero", show_default=True)
@click.option("--matched/--no-matched", default=True, show_default=True,
              help="Also erase, per fitted setting S, a random subspace of S's rank removing as much variance "
                   "(matched:S), and print S's drop beyond it.")
@click.option("--name", default="default", show_default=True, help="Result name: results/ablation/<name>.")
@device_option
@scheduler_option()
@results_option
@storage_option
def ablate(store_path, runs, tasks, archs, settings, fit_length, lengths, mode, matched, name, device, scheduler,
           results, storage_options) -> None:
    """Ablate probe directions / subspaces per layer, re-run the layers above, refit a probe."""
    from analysis.interventions import run_ablation
    from store import schema

    with _session(scheduler) as sched:
        st = _open(store_path, results, storage_options)
        ds = run_ablation(st, name, runs=_selected_runs(st, runs, tasks, archs), settings=settings,
                          fit_length=fit_length, lengths=lengths, mode=mode, matched=matched, scheduler=sched,
                          device=device)
    for line in present.ablation_lines(ds):
        click.echo(line)
    click.echo(present.stored(_stored_as(schema.ABLATION, name)))


@main.command()
@store_argument
@run_filters
@click.option("--length", type=int, default=40, show_default=True, help="Length of the captured counterfactual twins.")
@click.option("--positions", type=INTS, default=None, help="Comma-separated positions (default all).")
@click.option("--interchange", is_flag=True, help="Interchange interventions at named sites (key, value, divider, query).")
@click.option("--subspace", type=click.Choice(["probe", "stored"]), default=None,
              help="Also patch only the target probe's directions (fitted here, or stored by `layerstate probe`), "
                   "beside the whole component.")
@click.option("--corruption", type=click.Choice(["token", "noise"]), default="token", show_default=True,
              help="token: the stored counterfactual twins; noise: Gaussian noise at the edited embedding "
                   "(refused without --allow-noise).")
@click.option("--allow-noise", is_flag=True, help="Accept --corruption noise (off-distribution; docs/interventions.md).")
@click.option("--name", default="default", show_default=True, help="Result name under results/patching or results/interchange.")
@device_option
@scheduler_option()
@results_option
@storage_option
def patch(store_path, runs, tasks, archs, length, positions, interchange, subspace, corruption, allow_noise, name,
          device, scheduler, results, storage_options) -> None:
    """Patch clean activations into corrupted runs and back (layer x position) and measure both."""
    from analysis.interventions import run_interchange, run_patching
    from store import schema

    with _session(scheduler) as sched:
        st = _open(store_path, results, storage_options)
        sel = _selected_runs(st, runs, tasks, archs)
        if interchange:
            ds = run_interchange(st, length, name, runs=sel, subspace=subspace, corruption=corruption,
                                 allow_noise=allow_noise, device=device, scheduler=sched)
            lines, stored = present.interchange_lines(ds), _stored_as(schema.INTERCHANGE, name)
        else:
            ds = run_patching(st, length, name, runs=sel, positions=positions, subspace=subspace,
                              corruption=corruption, allow_noise=allow_noise, device=device, scheduler=sched)
            lines, stored = present.patching_lines(ds), _stored_as(schema.PATCHING, name)
    for line in lines:
        click.echo(line)
    click.echo(present.stored(stored))


@main.command()
@store_argument
@click.option("--task", "tasks", multiple=True, help="Only the runs of this task (repeatable); default every task.")
@scheduler_option()
@results_option
@storage_option
def behaviour(store_path: str, tasks: tuple[str, ...], scheduler: str, results: str | None,
              storage_options: dict) -> None:
    """Measure each model's own readout accuracy; store results/behaviour/<task> (what claims
    and the report read): counts per sequence, accuracy per run and length, seed-level intervals."""
    from analysis.behaviour import measured_lengths, store_behaviour
    from store import schema

    with _session(scheduler):
        st = _open(store_path, results, storage_options)
        measured = {r for rs in measured_lengths(st, st.run_ids()).values() for r in rs}
        by_task: dict[str, list[str]] = {}
        for r in st.run_ids():
            task = str(st.run_attrs(r).get("task"))
            if r in measured and (not tasks or task in tasks):
                by_task.setdefault(task, []).append(r)
        if not by_task:
            raise BadInput(f"no run{' of ' + ', '.join(tasks) if tasks else ''} in {store_path} has a complete "
                           "captured length with logits; run `layerstate capture` first")
        for task, ids in by_task.items():
            for line in present.behaviour_lines(store_behaviour(st, task, ids), st):
                click.echo(line)
            click.echo(present.stored(schema.behaviour_name(task)))


@main.command()
@store_argument
@click.option("--claims", "claims_file", type=click.Path(dir_okay=False), required=True,
              help="An experiment TOML (its [[claims]], checked against its grid) or a TOML file of [[claims]] tables.")
@click.option("--result", "result_names", multiple=True, metavar="[TASK=]NAME",
              help="The probe result the claims that name none read, where a task has several (repeatable): "
                   "TASK=NAME, or NAME for every task it holds, e.g. --result dyck=dyck-2.")
@results_option
@scheduler_option(SCHEDULER_HELP + " Claims are evaluated here, in one process (Holm's correction "
                  "needs every claim's test at once, and each takes milliseconds): an address is only "
                  "checked, so a script can hand every command the same --scheduler.")
@storage_option
def stats(store_path: str, claims_file: str, result_names: tuple[str, ...], results: str | None, scheduler: str,
          storage_options: dict) -> None:
    """Evaluate declared claims on STORE's results; writes results/claims (all or nothing)."""
    from analysis.claims import evaluate_stored_claims
    from analysis.claims.choose import check_choices, with_results
    from analysis.claims.evaluate import stored_probe_profiles
    from analysis.compute import reachable
    from layerstate.experiment import load_claims

    reachable(scheduler)
    st = _open(store_path, results, storage_options)
    claims = with_results(st, load_claims(claims_file), result_names)
    check_choices(st, claims, stored_probe_profiles(st))
    for line in present.claim_lines(evaluate_stored_claims(st, claims)):
        click.echo(line)


@main.command()
@click.argument("parts", nargs=-1, required=True, metavar="PART...")
@click.option("--claims", "claims_file", type=click.Path(dir_okay=False), required=True,
              help="The experiment TOML the parts were run from (every claim it declares is the family).")
@click.option("--out", "out", default=None, metavar="DIR",
              help="Folder for claims.csv (full precision) and claims.md (the verdict table).")
@storage_option
def combine(parts: tuple[str, ...], claims_file: str, out: str | None, storage_options: dict) -> None:
    """One verdict table for a grid run in parts (`layerstate run --task`): each claim from the
    PART that evaluated it, Holm-corrected once over the file's whole family.

    PART: a part's store (its results/claims), its report folder, or the report's
    tables/claims.csv. Each part alone counted the other parts' tests with p = 1; the
    combined p-values can only be lower. A profile claim comparing tasks of several parts is
    decided on the part stores read as one, or else from the per-seed profiles each part kept
    (results/claim_profiles, a report's tables/claim_profiles.csv); any other claim no part
    evaluated stays not evaluable. Each undecided claim says what its part's seed planner
    (results/seed_plan, a report's tables/seed_plan.csv) said deciding it would cost.
    """
    from analysis.claims.combine import combine_parts, read_part, read_plan, read_profiles
    from layerstate.experiment import UNTESTABLE, load_claims
    from store.view import StoreView

    with warnings.catch_warnings():
        # what a profile claim can reach with the file's [grid] seeds: the parts hold their own
        # seeds (a design's, often more), and each undecided row says what would decide it
        warnings.filterwarnings("ignore", message=UNTESTABLE, category=UserWarning)
        claims = load_claims(claims_file)
    kept = [(p, read_profiles(p, storage_options=storage_options)) for p in parts]
    res = combine_parts(claims, [(p, read_part(p, storage_options=storage_options)) for p in parts],
                        view=StoreView.open(parts, storage_options=storage_options),
                        profiles=[(p, k) for p, k in kept if k is not None],
                        plans=[(p, k) for p in parts if (k := read_plan(p, storage_options=storage_options)) is not None])
    for line in present.claim_lines(res):
        click.echo(line)
    if out is not None:
        for path in present.write_claims_table(res, out, claims_file):
            click.echo(f"wrote {path}")


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--store", "store_path", required=True, metavar="STORE",
              help="The store holding the stages' seeds (a directory, a zip or a URL).")
@click.option("--design", "design_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A TOML file whose [design] replaces EXPERIMENT's.")
@click.option("--task", "tasks", multiple=True,
              help="Only this task's part (repeatable): the claims reading only these tasks; the others stay "
                   "in the Holm families, never rejected here.")
@results_option
@storage_option
def sequential(experiment: str, store_path: str, design_path: str | None, tasks: tuple[str, ...],
               results: str | None, storage_options: dict) -> None:
    """Decide EXPERIMENT's claims stage by stage under its [design] (a group-sequential design
    over seeds) on the seeds STORE holds, and say which cells the next stage trains. Nothing is
    written (`layerstate run --design` trains the stages and stores them)."""
    from analysis.claims.sequential import evaluate_sequential
    from layerstate.experiment import load_claims, load_design, load_experiment
    from store import open_analysis

    design = load_design(design_path or experiment)
    if design is None:
        raise BadInput(f"{design_path or experiment} declares no [design]; add one (first_seeds, stage_seeds, "
                       "max_seeds, spending) before training the first stage (docs/sequential.md)")
    absent: list = []
    if tasks:
        part = load_experiment(experiment).part(tasks)
        claims, absent = part.claims, part.absent_claims
    else:
        claims = load_claims(experiment)
    st = open_analysis(store_path, results=results, write=False, say=click.echo,
                       storage_options=storage_options, results_options=storage_options)
    for line in present.sequential_lines(evaluate_sequential(st, claims, design, absent=absent),
                                 next_step=_next_stage(experiment, store_path, design_path, tasks)):
        click.echo(line)


def _next_stage(experiment: str, store_path: str, design_path: str | None, tasks: tuple[str, ...]) -> str:
    """How to train a design's next stage: the `run` command that does it, or (a claims file, not
    an experiment) what to do by hand."""
    from capture.experiment import ExperimentError
    from layerstate.experiment import load_experiment

    try:
        load_experiment(experiment)
    except ExperimentError:
        return ("train them into the store (seeds in the experiment's [grid], `layerstate train` and "
                "`layerstate capture`, then the analyses the claims read), then run this again")
    return present.design_command(experiment, store_path, design_path, tasks)


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--store", "store_path", required=True, metavar="STORE",
              help="The store whose seeds the plan starts from (a directory, a zip or a URL).")
@click.option("--power", default=0.8, show_default=True, type=click.FloatRange(0.5, 0.99),
              help="The power each claim's test should reach at its margin.")
@click.option("--design", "design_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A TOML file whose [design] replaces EXPERIMENT's (as `sequential --design`).")
@click.option("--result", "result_names", multiple=True, metavar="[TASK=]NAME",
              help="The probe result the claims that name none read, where a task has several (repeatable): "
                   "TASK=NAME, or NAME for every task it holds, e.g. --result dyck=dyck-2.")
@results_option
@storage_option
def plan(experiment: str, store_path: str, power: float, design_path: str | None, result_names: tuple[str, ...],
         results: str | None, storage_options: dict) -> None:
    """How many seeds each claim of EXPERIMENT needs for its test to reach --power, and their CPU
    time, from the seeds STORE holds (each claim at its margin and its Holm level; a cell's cost
    from its runs' stored training times). Under a [design] (EXPERIMENT's or --design's) it reads
    what `sequential` decides: a claim the design decided needs no seeds, and the design's next
    stage is the next step. Nothing is written."""
    from analysis.claims.choose import check_choices, with_results
    from analysis.claims.evaluate import stored_probe_profiles
    from analysis.claims.planner import design_decisions, failed_seed_notes, make_plan
    from analysis.claims.sequential import evaluate_sequential
    from layerstate.experiment import load_claims, load_design
    from store import open_analysis
    from store.view import StoreView

    design = load_design(design_path or experiment)
    st = open_analysis(store_path, results=results, write=False, say=click.echo,
                       storage_options=storage_options, results_options=storage_options)
    claims = with_results(st, load_claims(experiment), result_names)
    check_choices(st, claims, stored_probe_profiles(st))
    run = evaluate_sequential(st, claims, design) if design is not None else None
    decided = design_decisions(run) if run is not None else None
    planned: Any = st
    if run is not None and run.incomplete:
        # the next stage's seeds are trained but the results do not all hold them (an interrupted
        # `run --design`): planned on the seeds the last decided stage read, not on a mix
        planned = StoreView([st], seed_below=run.stages[-1].seeds) if run.stages else None
    if planned is not None:
        made = make_plan(planned, claims, power=power, decided=decided)
        for line in present.plan_lines(made, experiment, store_path):
            click.echo(line)
        for line in failed_seed_notes(planned, claims, made, power=power, decided=decided):
            click.echo(f"did not learn: {line}")
    if run is not None:  # the design's own next step, as `sequential` says it
        lines = list(present.sequential_lines(run, next_step=_next_stage(experiment, store_path, design_path, ())))
        click.echo("under its design: " + lines[-1])


@main.command()
@store_argument
@click.option("--out", "out", required=True, help="Folder for index.html, report.md, figures/, tables/.")
@click.option("--force", is_flag=True, help="Replace an earlier report in --out.")
@click.option("--no-chunk-check", is_flag=True, help="Skip verifying every chunk's checksum (huge stores).")
@click.option("--result", "shown", multiple=True, metavar="[TASK=]NAME",
              help="A probe result to show for its task when a task has several (repeatable), e.g. "
                   "dyck=dyck-2 or probes/dyck-2; default: probes/<task>, else the newest. The section names each.")
@results_option
@scheduler_option(SCHEDULER_HELP + " The report reads stored results and draws its figures here, "
                  "in one process: an address is only checked, so a script can hand every command "
                  "the same --scheduler.")
@storage_option
def report(store_path: str, out: str, force: bool, no_chunk_check: bool, shown: tuple[str, ...],
           results: str | None, scheduler: str, storage_options: dict) -> None:
    """Write a self-contained HTML report (and Markdown, figures, CSV tables) of STORE."""
    from analysis.compute import reachable
    from reports import build_report
    from store import open_analysis

    reachable(scheduler)
    st = open_analysis(store_path, results=results, write=False, storage_options=storage_options,
                       results_options=storage_options)
    from reports.readout import choose_probe_results, probe_results

    shown = tuple(s.rpartition("=")[2] for s in shown)  # TASK=NAME as stats and plan take it: the name says the task
    choose_probe_results(st, probe_results(st), shown)  # a name that is not stored: one line
    path = build_report(st, out, force=force, check_chunks=not no_chunk_check, results=shown)
    click.echo(present.report_line(path))


# ----------------------------------------------------------------------------- interoperability
def _names(ctx: Any, param: Any, values: tuple[str, ...]) -> list[str] | None:
    """A repeatable option whose values may also be comma-separated; None when not given."""
    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    return out or None


def _names_option(flag: str, help_text: str):
    return click.option(flag, multiple=True, callback=_names, metavar="A,B,...", help=help_text)


def _subset_options(fn):
    """--runs, --lengths, --layers: what to copy or export (default: everything)."""
    for opt in reversed((
        _names_option("--runs", "Run ids (comma-separated or repeated); default all."),
        click.option("--lengths", type=INTS, default=None, help="Comma-separated lengths; default all."),
        _names_option("--layers", "Layers, e.g. embed,L3; default all."),
    )):
        fn = opt(fn)
    return fn


@main.command("import")
@click.argument("fmt", metavar="FORMAT")
@click.argument("source", metavar="SOURCE")
@store_argument
@click.option("--run", "run_id", required=True, help="Run id the activations are stored under.")
@click.option("--task", default="imported", show_default=True, help="Task name recorded with the run.")
@click.option("--arch", default=None, help="Architecture recorded with the run (default: FORMAT).")
@click.option("--seed", default=0, show_default=True, help="Seed recorded with the run.")
@click.option("--variant", default="default", show_default=True)
@click.option("--labels", "labels_path", default=None, metavar="FILE",
              help="Labels (and tokens): CSV/Parquet keyed by sequence,position, or .npz/.safetensors arrays.")
@_names_option("--layers", "Source names that make the layers, in order (default: found from the names).")
@_names_option("--sites", "Source names (globs) stored as extra sites, e.g. 'blocks.*.hook_mlp_out'.")
@click.option("--target", default=None, metavar="LABEL",
              help="The label analyses decode by default (default: the first label column).")
@click.option("--logits", default=None, metavar="NAME",
              help="The source array holding the model's logits, (sequence, position, class) "
                   "(default: one named 'logits', if there is one).")
@click.option("--dtype", type=click.Choice(["float16", "float32"]), default="float16", show_default=True)
@click.option("--allow-nonfinite", is_flag=True,
              help="Store NaN/Inf values instead of refusing them (recorded in the store; validate warns).")
def import_(fmt, source, store_path, run_id, task, arch, seed, variant, labels_path, layers, sites,
            target, logits, dtype, allow_nonfinite) -> None:
    """Import activations another tool wrote (FORMAT: transformer-lens, nnsight, saelens,
    safetensors, npy) into STORE (created if missing; resumes an unfinished import). The names
    and shapes each format expects: docs/guide/importers.md."""
    from capture.importers import format_import, import_source

    res = import_source(fmt, source, store_path, run_id, layers=layers, sites=sites, labels=labels_path,
                        dtype=dtype, allow_nonfinite=allow_nonfinite, task=task, seed=seed, variant=variant,
                        target=target, logits=logits, **({"arch": arch} if arch else {}))
    click.echo(format_import(res))


@main.command()
@store_argument
@click.argument("out", metavar="OUT")
@click.option("--format", "fmt", type=click.Choice(["hf-datasets"]), default="hf-datasets", show_default=True)
@_subset_options
@storage_option
def export(store_path, out, fmt, runs, lengths, layers, storage_options) -> None:
    """Export STORE (or the selected runs/lengths/layers) as Hugging Face datasets, OUT/<run>/len_<L>/."""
    from capture.importers import export_hf_datasets

    paths = export_hf_datasets(store_path, out, runs=runs, lengths=lengths, layers=layers,
                               storage_options=storage_options)
    click.echo(f"{out}: {len(paths)} dataset(s) ({', '.join(str(p.relative_to(out)) for p in paths)}), "
               "each readable by datasets.load_from_disk")


@main.command()
@click.argument("url", metavar="URL")
@click.argument("target", metavar="DIR")
@_subset_options
@click.option("--no-weights", is_flag=True, help="Leave the runs' weights behind.")
@storage_option
def pull(url, target, runs, lengths, layers, no_weights, storage_options) -> None:
    """Copy a subset of the store at URL into a new local store DIR, fetching only its chunks
    (each checked as it arrives: its crc32c, or a decode where the store has no checksums; run again to resume)."""
    from store.sharing.transfer import format_report
    from store.sharing.transfer import pull as run_pull

    click.echo(format_report(run_pull(url, target, runs=runs, lengths=lengths, layers=layers,
                                      weights=not no_weights, storage_options=storage_options)))


@main.command()
@click.argument("source", metavar="DIR")
@click.argument("url", metavar="URL")
@_subset_options
@click.option("--no-weights", is_flag=True, help="Leave the runs' weights behind.")
@storage_option
def push(source, url, runs, lengths, layers, no_weights, storage_options) -> None:
    """Copy the local store DIR (or a subset) to URL, every chunk checksummed (run again to resume)."""
    from store.sharing.transfer import format_report
    from store.sharing.transfer import push as run_push

    click.echo(format_report(run_push(source, url, runs=runs, lengths=lengths, layers=layers,
                                      weights=not no_weights, storage_options=storage_options)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
