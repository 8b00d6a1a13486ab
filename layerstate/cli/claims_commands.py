"""The claims commands of ``layerstate``: stats, combine, sequential, plan, report. Each is registered on
:data:`layerstate.cli.base.main` when this module is imported (:mod:`layerstate.cli`)."""

from __future__ import annotations

import warnings
from typing import Any

import click

from analysis.claims import evaluate_stored_claims
from analysis.claims.choose import check_choices, with_results
from analysis.claims.combine import combine_parts, read_part, read_plan, read_profiles
from analysis.claims.evaluate import stored_probe_profiles
from analysis.claims.planner import design_decisions, failed_seed_notes, make_plan
from analysis.claims.sequential import evaluate_sequential
from analysis.compute import reachable
from capture.experiment import ExperimentError
from layerstate import present
from layerstate.cli.base import (
    SCHEDULER_HELP,
    BadInput,
    main,
    open_for_analysis,
    results_option,
    scheduler_option,
    storage_option,
    store_argument,
)
from layerstate.experiment import UNTESTABLE, load_claims, load_design, load_experiment
from reports import build_report
from reports.readout import choose_probe_results, probe_results
from store import open_analysis
from store.view import StoreView


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
    reachable(scheduler)
    st = open_for_analysis(store_path, results, storage_options)
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
    reachable(scheduler)
    st = open_analysis(store_path, results=results, write=False, storage_options=storage_options,
                       results_options=storage_options)

    shown = tuple(s.rpartition("=")[2] for s in shown)  # TASK=NAME as stats and plan take it: the name says the task
    choose_probe_results(st, probe_results(st), shown)  # a name that is not stored: one line
    path = build_report(st, out, force=force, check_chunks=not no_chunk_check, results=shown)
    click.echo(present.report_line(path))
