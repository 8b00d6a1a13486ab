"""The pipeline commands of ``layerstate``: train, capture, run. Each is registered on
:data:`layerstate.cli.base.main` when this module is imported (:mod:`layerstate.cli`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from layerstate import present
from layerstate.cli.base import (
    SCHEDULER_HELP,
    BadInput,
    ProgressBars,
    SeedRange,
    device_option,
    experiment_argument,
    main,
    run_filters,
    scheduler_option,
    scheduler_session,
    storage_option,
)
from layerstate.experiment import load_experiment
from layerstate.pipeline import capture_experiment, run_experiment, train_experiment
from store import Store

if TYPE_CHECKING:
    from capture.device import Device

# ----------------------------------------------------------------------------- the pipeline
@main.command()
@experiment_argument
@click.option("--store", "store_path", required=True, metavar="DIR|URL",
              help="Store to train into (created if missing); on a dask cluster, a directory every "
                   "worker mounts at the same path or an object-store URL.")
@run_filters
@click.option("--seed", "seeds", multiple=True, type=SeedRange(),
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
    if jobs < 1:
        raise BadInput(f"--jobs must be at least 1, got {jobs}")
    exp = load_experiment(experiment)
    part = exp.plan.select(runs=runs, tasks=tasks, archs=archs, seeds=tuple(s for got in seeds for s in got))
    n = len(part)
    with scheduler_session(scheduler) as sched, ProgressBars() as bars:
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
    exp = load_experiment(experiment)
    with scheduler_session(scheduler) as sched, ProgressBars() as bars:
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
    run_experiment(experiment, out, store=store_path, storage_options=storage_options, scheduler=scheduler,
                   jobs=jobs, device=device, tasks=tasks or None, design=design, say=click.echo)
