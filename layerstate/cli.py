"""The ``layerstate`` command: a thin layer over the library.

Each subcommand parses its options, calls one library function and prints the result.
Library errors become one line on stderr and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"layerstate: error: {self.message}", err=True)


def _user_errors() -> tuple[type[BaseException], ...]:
    from store.errors import LayerstateError

    return (LayerstateError, ValueError, KeyError, FileNotFoundError, PermissionError, TypeError, OSError)


def boundary(fn: Callable) -> Callable:
    """Turn library exceptions into one line and exit 2, unless --debug was given."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return fn(*args, **kwargs)
        except _user_errors() as exc:
            if ctx.find_root().params.get("debug"):
                raise
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise BadInput(str(msg).splitlines()[0] if str(msg) else type(exc).__name__) from None

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.version_option(package_name="layerstate")
def main(debug: bool) -> None:
    """layerstate: where does a sequence model hold its task state, and how sure are we?"""
    import warnings

    # Zarr warns on every consolidated-metadata read/write that v3 has no spec for it yet;
    # we use it deliberately (NOTES.md) and say so in the docs, so the CLI keeps quiet.
    warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")


storage_option = click.option(
    "--storage-option", "-S", "storage_options", multiple=True, metavar="KEY=VALUE",
    help="fsspec option for remote stores (repeatable), e.g. -S anon=true.",
)


def _opts(pairs: tuple[str, ...]) -> dict:
    out: dict[str, Any] = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep:
            raise ValueError(f"storage option {p!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


@main.command()
@click.argument("store_path", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@storage_option
@boundary
def inspect(store_path: str, as_json: bool, storage_options: tuple[str, ...]) -> None:
    """What is inside STORE, at a glance: runs, lengths, shapes, dtypes, labels, size."""
    from store import Store, format_summary, summary

    info = summary(Store.open(store_path, storage_options=_opts(storage_options)))
    click.echo(json.dumps(info, indent=2, default=str) if as_json else format_summary(info))


@main.command()
@click.argument("store_path", metavar="STORE")
@storage_option
@boundary
def validate(store_path: str, storage_options: tuple[str, ...]) -> None:
    """Check STORE's schema and every chunk's checksum; exit 2 if anything is wrong."""
    from store import Store
    from store import validate as run_validate

    rep = run_validate(Store.open(store_path, storage_options=_opts(storage_options)))
    for w in rep.warnings:
        click.echo(f"warning: {w}", err=True)
    if not rep.ok:
        for p in rep.problems:
            click.echo(f"problem: {p}", err=True)
        raise BadInput(
            f"{store_path} failed validation ({len(rep.problems)} problem(s), first: {rep.problems[0]})"
        )
    click.echo(f"ok: {store_path} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified)")


@main.command()
@click.argument("store_path", metavar="STORE")
@click.argument("out", metavar="OUT.zip")
@click.option("--force", is_flag=True, help="Replace OUT.zip if it exists.")
@boundary
def pack(store_path: str, out: str, force: bool) -> None:
    """Pack STORE into one zip file that every layerstate command (and xarray) reads."""
    from store import Store
    from store import pack as run_pack

    path = run_pack(Store.open(store_path), out, overwrite=force)
    click.echo(f"packed {store_path} -> {path} ({path.stat().st_size / 2**20:.1f} MB)")


@main.command()
@click.argument("archive", metavar="ARCHIVE.zip")
@click.argument("target", metavar="DIR")
@boundary
def unpack(archive: str, target: str) -> None:
    """Unpack a packed store into a new directory DIR (member paths are checked)."""
    from store import unpack as run_unpack

    click.echo(f"unpacked {archive} -> {run_unpack(archive, target)}")


device_option = click.option(
    "--device", default="cpu", show_default=True,
    help="torch device: cpu, or cuda when a GPU is present (never required).",
)


def _device(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda was given but no CUDA GPU is available; use --device cpu")
    elif device != "cpu":
        raise ValueError(f"unknown device {device!r}; use cpu or cuda[:N]")
    return device


def _open_or_create(path: str, title: str):
    from store import Store

    return Store.create(path, title=title, exist_ok=True)


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--store", "store_path", required=True, help="Store to train into (created if missing).")
@device_option
@boundary
def train(experiment: str, store_path: str, device: str) -> None:
    """Train every run of EXPERIMENT (skips runs already trained)."""
    from tqdm.auto import tqdm

    from capture.experiment import load_experiment
    from capture.train import train_run

    exp = load_experiment(experiment)
    st = _open_or_create(store_path, exp.experiment.title or exp.experiment.name)
    specs = exp.runs()
    for i, spec in enumerate(specs, 1):
        bar = tqdm(total=spec.train.steps, desc=f"[{i}/{len(specs)}] {spec.run_id}", leave=False,
                   disable=None)

        def progress(step: int, point: dict, bar=bar) -> None:
            bar.n = step
            bar.set_postfix(valid=f"{point['valid_accuracy']:.3f}")
            bar.refresh()

        res = train_run(st, spec, device=_device(device), progress=progress)
        bar.close()
        accs = " ".join(f"L{k}={v:.3f}" for k, v in sorted(res.accuracy.items()))
        state = "already trained" if res.skipped else f"{res.steps} steps, {res.seconds:.0f}s"
        click.echo(f"{spec.run_id}: {state}; accuracy {accs}")


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--store", "store_path", required=True, help="Store holding the trained runs.")
@device_option
@boundary
def capture(experiment: str, store_path: str, device: str) -> None:
    """Record every layer of every trained run of EXPERIMENT at every length (resumable)."""
    from tqdm.auto import tqdm

    from capture.experiment import load_experiment
    from capture.record import capture_experiment
    from store import Store

    exp = load_experiment(experiment)
    st = Store.open(store_path, mode="r+")
    bars = []

    def factory(desc: str, total: int):
        bar = tqdm(total=total, desc=desc, leave=False, disable=None, unit="seq")
        bars.append(bar)
        return bar.update

    results = capture_experiment(st, exp, device=_device(device), progress_factory=factory)
    for b in bars:
        b.close()
    done = sum(r.blocks_written for r in results)
    click.echo(f"captured {len(results)} groups into {store_path} ({done} blocks written, "
               f"{sum(r.blocks_total for r in results) - done} already there)")


@main.command()
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, help="Output folder: store.zarr and report/ go there.")
@click.option("--jobs", default=2, show_default=True, help="Runs trained in parallel (processes).")
@device_option
@boundary
def run(experiment: str, out: str, jobs: int, device: str) -> None:
    """The main job: train -> capture -> analyse -> claims -> report (re-run resumes)."""
    from layerstate.pipeline import run_experiment

    run_experiment(experiment, out, jobs=jobs, device=_device(device), say=click.echo)


def _select_runs(st, runs, tasks, archs):
    if runs:
        return list(runs)
    if tasks or archs:
        sel = st.select(**{k: list(v) for k, v in (("task", tasks), ("arch", archs)) if v})
        if not sel:
            raise ValueError(f"no runs match task={list(tasks)} arch={list(archs)}; see `layerstate inspect`")
        return sel
    return None


def _ints(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",")] if text else None


run_filters = [
    click.option("--runs", "runs", multiple=True, help="Run ids (repeatable); default all runs."),
    click.option("--task", "tasks", multiple=True, help="Only runs of this task (repeatable)."),
    click.option("--arch", "archs", multiple=True, help="Only runs of this architecture (repeatable)."),
]


def with_run_filters(fn):
    for opt in reversed(run_filters):
        fn = opt(fn)
    return fn


@main.command()
@click.argument("store_path", metavar="STORE")
@with_run_filters
@click.option("--target", default=None, help="Label to decode (default: the runs' training target).")
@click.option("--layers", default=None, help="Comma-separated layers, e.g. embed,L0,L3 (default all).")
@click.option("--positions", default="all", show_default=True, help="all | last | pooled | comma-separated indices.")
@click.option("--lengths", default=None, help="Comma-separated lengths (default all stored).")
@click.option("--train-length", type=int, default=None, help="Fit at this length, score at the others.")
@click.option("--folds", default=5, show_default=True, help="k-fold split by sequence.")
@click.option("--method", type=click.Choice(["exact", "screen", "reference"]), default="exact", show_default=True)
@click.option("--scheduler", default=None, help="dask.distributed scheduler address (default: local threads).")
@click.option("--name", default=None, help="Result name (default probes/<target>).")
@boundary
def probe(store_path, runs, tasks, archs, target, layers, positions, lengths, train_length, folds,
          method, scheduler, name) -> None:
    """Fit linear probes on every (run, length, layer, position) of STORE; store results/probes/…"""
    from analysis.probes import probe as run_probe
    from store import Store

    st = Store.open(store_path, mode="r+")
    selection = _select_runs(st, runs, tasks, archs)
    pos = positions if positions in ("all", "last", "pooled") else [int(p) for p in positions.split(",")]
    ds = run_probe(
        st, target, runs=selection, layers=layers.split(",") if layers else None, positions=pos,
        lengths=[int(x) for x in lengths.split(",")] if lengths else None, train_length=train_length,
        folds=folds, method=method, scheduler=scheduler, save=True, name=name,
    )
    prof = ds.profile
    for r in ds.run.values:
        for L in ds.length.values:
            p = prof.sel(run=r, length=L)
            line = " ".join(f"{lay}={v:.3f}" for lay, v in zip(ds.layer.values, p.values, strict=True))
            click.echo(f"{r} L={L}: {line}  best {ds.best_layer.sel(run=r, length=L).item()}")
    click.echo(f"stored results/{name or 'probes/' + str(ds.attrs.get('target', target))}")


@main.command()
@click.argument("store_path", metavar="STORE")
@with_run_filters
@click.option("--settings", default="probe,leace,pca:1,random:1", show_default=True,
              help="Semicolon- or comma-separated: probe, stored, leace, inlp:k, pca:k, svd:k, random:k.")
@click.option("--fit-length", type=int, default=None, help="Fit directions at this length (default: the shortest).")
@click.option("--lengths", default=None, help="Comma-separated lengths to ablate at (default all stored).")
@click.option("--mode", type=click.Choice(["zero", "mean"]), default="zero", show_default=True)
@click.option("--name", default="default", show_default=True, help="Result name: results/ablation/<name>.")
@click.option("--scheduler", default="threads", show_default=True, help="threads, sync, or a dask.distributed address.")
@boundary
def ablate(store_path, runs, tasks, archs, settings, fit_length, lengths, mode, name, scheduler) -> None:
    """Ablate probe directions / subspaces per layer, re-run the layers above, refit a probe."""
    from analysis.interventions import run_ablation
    from store import Store

    st = Store.open(store_path, mode="r+")
    parts = [p for p in settings.replace(";", ",").split(",") if p]
    merged: list[str] = []  # "pca:1,4" arrives as "pca:1", "4": glue bare numbers back on
    for p in parts:
        if p.isdigit() and merged and ":" in merged[-1]:
            merged[-1] += f",{p}"
        else:
            merged.append(p)
    ds = run_ablation(st, name, runs=_select_runs(st, runs, tasks, archs), settings=merged,
                      fit_length=fit_length, lengths=_ints(lengths), mode=mode, scheduler=scheduler)
    drop = ds.accuracy_drop
    for r in ds.run.values:
        for setting in ds.setting.values:
            vals = drop.sel(run=r, setting=setting).isel(length=0).values
            line = " ".join(f"{lay}={v:+.3f}" for lay, v in zip(ds.layer.values, vals, strict=True))
            click.echo(f"{r} [{setting}] accuracy drop: {line}")
    click.echo(f"stored results/ablation/{name}")


@main.command()
@click.argument("store_path", metavar="STORE")
@with_run_filters
@click.option("--length", type=int, default=40, show_default=True, help="Length of the captured counterfactual twins.")
@click.option("--positions", default=None, help="Comma-separated positions (default all).")
@click.option("--interchange", is_flag=True, help="Interchange interventions at named sites (key, value, divider, query).")
@click.option("--name", default="default", show_default=True, help="Result name under results/patching or results/interchange.")
@click.option("--scheduler", default="threads", show_default=True)
@boundary
def patch(store_path, runs, tasks, archs, length, positions, interchange, name, scheduler) -> None:
    """Patch clean activations into corrupted runs (layer x position) and measure recovery."""
    from analysis.interventions import run_interchange, run_patching
    from store import Store

    st = Store.open(store_path, mode="r+")
    sel = _select_runs(st, runs, tasks, archs)
    if interchange:
        ds = run_interchange(st, length, name, runs=sel, scheduler=scheduler)
        for r in ds.run.values:
            click.echo(f"{r}: mechanism {ds.mechanism.sel(run=r).item()}")
        click.echo(f"stored results/interchange/{name}")
        return
    ds = run_patching(st, length, name, runs=sel, positions=_ints(positions), scheduler=scheduler)
    for r in ds.run.values:
        rec = ds.recovery.sel(run=r)
        best = rec.where(rec == rec.max()).argmax(...)  # the most restoring site
        lay, pos = ds.layer.values[int(best["layer"])], ds.position.values[int(best["position"])]
        click.echo(f"{r}: max recovery {float(rec.max()):.3f} at layer {lay}, position {pos}")
    click.echo(f"stored results/patching/{name}")


@main.command()
@click.argument("store_path", metavar="STORE")
@click.option("--claims", "claims_file", type=click.Path(dir_okay=False), required=True,
              help="An experiment TOML (its [[claims]]) or a TOML file of [[claims]] tables.")
@boundary
def stats(store_path: str, claims_file: str) -> None:
    """Evaluate declared claims on STORE's results; writes results/claims (all or nothing)."""
    import tomllib

    from analysis.claims import evaluate_claims, parse_claims
    from layerstate.pipeline import _probe_results
    from store import Store

    with open(claims_file, "rb") as fh:
        data = tomllib.load(fh)
    claims = parse_claims(data.get("claims", []), source=claims_file)
    st = Store.open(store_path, mode="r+")
    res = evaluate_claims(st, claims, probes=_probe_results(st))
    st.write_result("claims", res)
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        if str(r.verdict.values) == "not evaluable":
            click.echo(f"{str(r.claim.values)}: {str(r.test.values)}")
            continue
        click.echo(f"{str(r.claim.values)}: {str(r.verdict.values)}  estimate {float(r.estimate):+.3f} "
                   f"[{float(r.lower):+.3f}, {float(r.upper):+.3f}]  p={float(r.p):.3g} "
                   f"(Holm {float(r.p_adjusted):.3g})  power={float(r.power):.2f}  — {str(r.test.values)}")


@main.command()
@click.argument("store_path", metavar="STORE")
@click.option("--out", "out", required=True, help="Folder for index.html, report.md, figures/, tables/.")
@click.option("--force", is_flag=True, help="Replace an earlier report in --out.")
@click.option("--no-chunk-check", is_flag=True, help="Skip verifying every chunk's checksum (huge stores).")
@boundary
def report(store_path: str, out: str, force: bool, no_chunk_check: bool) -> None:
    """Write a self-contained HTML report (and Markdown, figures, CSV tables) of STORE."""
    from reports import build_report
    from store import Store

    path = build_report(Store.open(store_path), out, force=force, check_chunks=not no_chunk_check)
    click.echo(f"report: {path}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
