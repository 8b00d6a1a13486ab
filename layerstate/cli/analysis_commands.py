"""The analysis commands of ``layerstate``: analyses, probe, mdl, stability, ablate, patch, behaviour. Each is registered on
:data:`layerstate.cli.base.main` when this module is imported (:mod:`layerstate.cli`)."""

from __future__ import annotations

from typing import Any

import click

from analysis import registry
from analysis.behaviour import measured_lengths, store_behaviour
from analysis.interventions import run_ablation, run_interchange, run_patching
from analysis.probes import (
    plan_mdl,
    plan_stability,
    runs_by_task,
    save_mdl,
    save_probes,
    save_stability,
    storage_name,
)
from analysis.probes import probe as run_probe
from analysis.probes.plan import choose_target, select_runs
from analysis.probes.probing import task_attrs
from analysis.probes.progress import Progress, SweepSize, Tick
from layerstate import present
from layerstate.cli.base import (
    INTS,
    POSITIONS,
    SETTINGS,
    BadInput,
    device_option,
    lengths_option,
    main,
    open_for_analysis,
    results_option,
    run_filters,
    scheduler_option,
    scheduler_session,
    selected_runs,
    storage_option,
    store_argument,
)
from store import MissingError, schema


# ----------------------------------------------------------------------------- analyses
@main.command()
def analyses() -> None:
    """The analyses layerstate knows (analysis.registry, added ones included) and the metrics
    claims read from each: what to write as a claim's metric = ..."""
    click.echo("\n".join(present.analysis_lines(registry.analyses())))


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
    if name is not None:
        try:
            name = schema.result_name(registry.PROBES, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    with scheduler_session(scheduler) as sched:
        st = open_for_analysis(store_path, results, storage_options)
        selected = select_runs(st, selected_runs(st, runs, tasks, archs))
        groups = runs_by_task(st, selected)
        if name and len(groups) > 1 and target is None:
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
                say=None if quiet else (lambda line: click.echo(line, err=True)),
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
    def begin(size: SweepSize) -> None:
        click.echo(present.probe_work_line(size, task), err=True)

    def report(tick: Tick) -> None:
        click.echo(present.probe_progress_line(tick, task), err=True)

    return Progress(report, begin=begin)


def _stored_as(kind: str, name: str) -> str:
    """The result name an analysis stored ``name`` under (:func:`store.schema.result_name`)."""
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
    if name is not None:
        try:
            name = schema.result_name(registry.MDL, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    with scheduler_session(scheduler) as sched:
        st = open_for_analysis(store_path, results, storage_options)
        selected = select_runs(st, selected_runs(st, runs, tasks, archs))
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
    if name is not None:
        try:
            name = schema.result_name(registry.STABILITY, name)
        except ValueError as exc:
            raise BadInput(f"--name: {exc}") from None
    st = open_for_analysis(store_path, results, storage_options)
    selected = select_runs(st, selected_runs(st, runs, tasks, archs))
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
    with scheduler_session(scheduler) as sched:
        st = open_for_analysis(store_path, results, storage_options)
        ds = run_ablation(st, name, runs=selected_runs(st, runs, tasks, archs), settings=settings,
                          fit_length=fit_length, lengths=lengths, mode=mode, matched=matched, scheduler=sched,
                          device=device)
    for line in present.ablation_lines(ds):
        click.echo(line)
    click.echo(present.stored(_stored_as(registry.ABLATION, name)))


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
    with scheduler_session(scheduler) as sched:
        st = open_for_analysis(store_path, results, storage_options)
        sel = selected_runs(st, runs, tasks, archs)
        if interchange:
            ds = run_interchange(st, length, name, runs=sel, subspace=subspace, corruption=corruption,
                                 allow_noise=allow_noise, device=device, scheduler=sched)
            lines, stored = present.interchange_lines(ds), _stored_as(registry.INTERCHANGE, name)
        else:
            ds = run_patching(st, length, name, runs=sel, positions=positions, subspace=subspace,
                              corruption=corruption, allow_noise=allow_noise, device=device, scheduler=sched)
            lines, stored = present.patching_lines(ds), _stored_as(registry.PATCHING, name)
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
    with scheduler_session(scheduler):
        st = open_for_analysis(store_path, results, storage_options)
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
            click.echo(present.stored(registry.behaviour_name(task)))
