"""The ``layerstate`` command: each subcommand is one library call and one presentation.

Options shared by several commands are defined once, below; result text comes from
:mod:`layerstate.present`. Bad input gets one line on stderr and exit code 2 (``--debug``
shows the traceback): the project's own errors (:class:`store.LayerstateError` and its
subclasses — a malformed experiment or claim, a missing run, a corrupt chunk, ...), paths
that do not exist or already exist, and bad option values. Anything else is a bug and
shows its traceback.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm.auto import tqdm

from analysis.compute import SchedulerError, check, connect
from analysis.interventions import parse_settings
from capture.device import CHOICES, DeviceError, parse_device
from store import LayerstateError, MissingError, PairedStore, open_analysis
from store.errors import did_you_mean

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


def bad_input_types() -> tuple[type[BaseException], ...]:
    return (LayerstateError, *_PATH_ERRORS)


def _one_line(exc: BaseException) -> str:
    msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return msg.splitlines()[0] if msg else type(exc).__name__


class _Commands(click.Group):
    """Every command's bad input becomes one line and exit 2, unless --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except bad_input_types() as exc:
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
_OWN = tuple(str(Path(__file__).resolve().parents[2] / pkg) for pkg in
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


class SeedRange(click.ParamType):
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
    try:
        check(scheduler)
    except SchedulerError as exc:
        raise BadInput(f"--scheduler: {exc}") from None
    return scheduler


def scheduler_session(scheduler: str):
    """The command's one dask session (:func:`analysis.compute.connect`): a local scheduler
    as it is, else a client (a local cluster started for the command, or a connection to an
    address) closed when the command ends; announcements on stderr."""
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


def open_for_analysis(store_path: str, results: str | None, storage_options: dict):
    """STORE opened for an analysis that writes results (:func:`store.open_analysis`), with
    the -S options for STORE and for --results."""
    st = open_analysis(store_path, results=results, say=click.echo, storage_options=storage_options,
                       results_options=storage_options)
    if isinstance(st, PairedStore) and st.created:  # a command that fails writes nothing
        click.get_current_context().call_on_close(st.discard_if_unused)
    return st


def selected_runs(st, runs: tuple[str, ...], tasks: tuple[str, ...], archs: tuple[str, ...]) -> list[str] | None:
    """The runs --runs/--task/--arch name (None: every run)."""
    if runs:
        return list(runs)
    if not (tasks or archs):
        return None
    sel = st.select(**{k: list(v) for k, v in (("task", tasks), ("arch", archs)) if v})
    if not sel:
        near = "".join(did_you_mean(v, sorted({str(st.run_attrs(r).get(k)) for r in st.run_ids()}), what=f"--{k}")
                       for k, given in (("task", tasks), ("arch", archs)) for v in given)
        raise MissingError(f"no runs match task={list(tasks)} arch={list(archs)}{near or '; see `layerstate inspect`'}")
    return list(sel)


class ProgressBars:
    """Progress bars, one at a time (each closed when the next starts); off unless a terminal."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __enter__(self) -> ProgressBars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new(self, desc: str, total: int, unit: str = "it") -> Any:
        self.close()
        self.bar = tqdm(total=total, desc=desc, leave=False, disable=None, unit=unit)
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
