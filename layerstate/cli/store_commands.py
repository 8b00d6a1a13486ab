"""The store commands of ``layerstate``: inspect, show, validate, repair, forget, pack, unpack. Each is registered on
:data:`layerstate.cli.base.main` when this module is imported (:mod:`layerstate.cli`)."""

from __future__ import annotations

import json

import click

from layerstate import present
from layerstate.cli.base import (
    INTS,
    BadInput,
    main,
    results_option,
    run_filters,
    selected_runs,
    storage_option,
    store_argument,
)
from store import Store, format_repair, format_summary, open_analysis, summary
from store import pack as run_pack
from store import repair as run_repair
from store import unpack as run_unpack
from store import validate as run_validate
from store.contents.forget import forget_plan
from store.paired import ResultsBeside, results_home


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
@click.argument("result", metavar="RESULT")
@results_option
@storage_option
def show(store_path: str, result: str, results: str | None, storage_options: dict) -> None:
    """What the stored RESULT says (``probes/parity``, ``ablation/s3``, or an added analysis's
    result), as its analysis summarises it; `layerstate inspect` lists the stored results and
    `layerstate analyses` what each analysis computes."""
    st = open_analysis(store_path, results=results, write=False, storage_options=storage_options,
                       results_options=storage_options)
    click.echo("\n".join(present.result_lines(st, result.removeprefix("results/"))))


@main.command()
@store_argument
@click.option("--strict", is_flag=True, help="Count warnings (a SHOULD not met) as problems: exit 2 on any.")
@storage_option
def validate(store_path: str, strict: bool, storage_options: dict) -> None:
    """Check every metadata file, STORE's schema, every chunk's checksum and that float data is
    finite: a problem (a MUST of docs/store-format.md broken) exits 2; warnings (a SHOULD not
    met) are listed and exit 0, unless --strict."""
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
    ids = selected_runs(st, runs, tasks, archs) or []
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
    click.echo(present.packed(store_path, run_pack(Store.open(store_path), out, overwrite=force)))


@main.command()
@click.argument("archive", metavar="ARCHIVE.zip")
@click.argument("target", metavar="DIR")
def unpack(archive: str, target: str) -> None:
    """Unpack a packed store into a new directory DIR (member paths are checked)."""
    click.echo(present.unpacked(archive, run_unpack(archive, target)))
