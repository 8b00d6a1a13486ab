"""The interoperability commands of ``layerstate``: import, export, pull, push. Each is registered on
:data:`layerstate.cli.base.main` when this module is imported (:mod:`layerstate.cli`)."""

from __future__ import annotations

from typing import Any

import click

from capture.importers import (
    ImportOptions,
    export_hf_datasets,
    format_import,
    formats,
    import_source,
)
from layerstate.cli.base import INTS, main, storage_option, store_argument
from store.sharing.transfer import format_report
from store.sharing.transfer import pull as run_pull
from store.sharing.transfer import push as run_push


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


def _import_help() -> str:
    return ("Import activations another tool wrote into STORE (created if missing; resumes an "
            "unfinished import). FORMAT: " + "; ".join(f"{f.name}: {f.what}" for f in formats())
            + ". The names and shapes each format expects: docs/guide/importers.md.")


class _ImportCommand(click.Command):
    """``import``, whose help lists the formats registered when it is shown (one registered
    after this module loaded included)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.help = _import_help()
        super().format_help_text(ctx, formatter)


@main.command("import", cls=_ImportCommand, help=_import_help())
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
    options = ImportOptions(layers=layers, sites=sites, labels=labels_path, dtype=dtype,
                            allow_nonfinite=allow_nonfinite, task=task, seed=seed, variant=variant,
                            target=target, logits=logits)
    if arch:
        options["arch"] = arch
    res = import_source(fmt, source, store_path, run_id, options)
    click.echo(format_import(res))


@main.command()
@store_argument
@click.argument("out", metavar="OUT")
@click.option("--format", "fmt", type=click.Choice(["hf-datasets"]), default="hf-datasets", show_default=True)
@_subset_options
@storage_option
def export(store_path, out, fmt, runs, lengths, layers, storage_options) -> None:
    """Export STORE (or the selected runs/lengths/layers) as Hugging Face datasets, OUT/<run>/len_<L>/."""
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
    click.echo(format_report(run_push(source, url, runs=runs, lengths=lengths, layers=layers,
                                      weights=not no_weights, storage_options=storage_options)))
