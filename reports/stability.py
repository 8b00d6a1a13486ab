"""Cross-seed stability beside the probe profiles: per layer, how alike the seeds' probe
subspaces are once their states are aligned, against the two nulls it has to clear.

Source: every ``results/stability/<name>`` written by :mod:`analysis.probes.stability`
(``layerstate stability``), read through :func:`analysis.probes.stability.agreement_frame`:
the overlap's stored interval over seeds (``stability_*``), the random-subspace null
(``null_estimate``) and the shuffled-label null's band over label permutations
(``shuffled_*``). The words "the seeds agree" are the stored lower bound compared with the
stored nulls; nothing is estimated here. A result without stored intervals, or stored before
the shuffled-label null was kept, is named in a note.
"""

from __future__ import annotations

import pandas as pd

from analysis import registry
from analysis.probes.stability import agreement_frame
from reports import figures as F
from reports.intervals import apply_rules
from reports.model import Figure, Table
from reports.numbers import read_result
from reports.snapshot import Snapshot
from store import schema

STABILITY_CAPTION = (
    "Cross-seed stability of the probe directions: per layer, the mean over seed pairs of the overlap "
    "(mean squared cosine of the principal angles) between two seeds' probe subspaces after an orthogonal "
    "map between their states (band: 95% jackknife interval across seeds, from 3 seeds; 2 seeds are one pair "
    "and have none). Thin dashed: the shuffled-label null, the upper end of the central 95% of label "
    "permutations (probes refitted on the permuted label, mapped the same way); dotted: random subspaces, "
    "k/d. The seeds agree on where the label lives at a layer only where the band's lower end is above both. "
    "A layer not named is no evidence that they disagree: the map is fitted blind to the label, so a direction "
    "whose variance is almost all the label's has little to place it by, and its overlap can read low."
)


def stability_results(store) -> list[str]:
    """The names of the stored stability results (kind ``stability``, :mod:`store.schema`)."""
    return [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == registry.STABILITY]


def _layers_text(layers: list[str]) -> str:
    return ", ".join(layers) if layers else "no layer"


def agreement_sentences(frame: pd.DataFrame) -> list[str]:
    """One sentence per architecture (and variant): per task, the layers where the stored
    overlap interval is above both stored nulls, and the tasks not read and why (2 seeds: no
    interval; no shuffled-label null stored). Architectures whose sentence would be the same
    share one."""
    said: dict[str, list[str]] = {}
    for (arch, variant), sub in frame.groupby(["arch", "variant"], sort=False):
        read: list[str] = []
        unread: dict[str, list[str]] = {}
        for task, rows in sub.groupby("task"):
            rows = rows.sort_values("layer_pos")
            if rows["shuffled"].isna().all():
                unread.setdefault("no shuffled-label null stored", []).append(task)
            elif int(rows["n_seeds"].max()) < 3:
                unread.setdefault("2 seeds: one pair, no interval", []).append(task)
            else:
                read.append(f"at {_layers_text(list(rows.loc[rows['agree'], 'layer']))} in {task}")
        parts = [f"the seeds agree on where the label lives {'; '.join(read)}"] if read else []
        parts += [f"{', '.join(tasks)} not read ({why})" for why, tasks in unread.items()]
        said.setdefault("; ".join(parts), []).append(arch if variant in ("default", "") else f"{arch}/{variant}")
    return [f"{', '.join(names)}: {text}." for text, names in said.items()]


def _cell_text(r: pd.Series) -> str:
    """``0.82 [0.71, 0.93] agree`` (or without an interval the pair's value); then both nulls."""
    head = (f"{r.overlap:.2f} [{r.overlap_lower:.2f}, {r.overlap_upper:.2f}]" if pd.notna(r.overlap_lower)
            else f"{r.overlap:.2f} (one pair)" if r.n_seeds == 2 else f"{r.overlap:.2f}")
    shuffled = f"{r.shuffled_upper:.2f}" if pd.notna(r.shuffled_upper) else "–"
    return f"{head}{' agree' if r.agree else ''} (nulls {shuffled}, {r.null:.2f})"


def stability_parts(snap: Snapshot, length: int | None = None) -> tuple[list[Figure], list[Table], list[str]]:
    """The stability figure, its table and the sentences per architecture, for the probes section
    (at ``length``, default the shortest the results hold; every length in the CSV), and notes."""
    frames, notes = [], []
    read_from: dict[str, str] = {}
    for name in stability_results(snap.store):
        ds = read_result(snap.store, name)
        read_from[name] = str(ds.attrs.get("probe_result") or "")
        left_out = [str(r) for r in ds.attrs.get("left_out") or []]
        if left_out:
            notes.append(f"results/{name}: the seeds that did not learn ({ds.attrs.get('learned_from')}) are left "
                         f"out of its numbers: {', '.join(left_out)}")
        frame = agreement_frame(ds)
        if frame is None:
            notes.append(f"results/{name} holds no stored intervals; `layerstate stability STORE` stores them")
            continue
        if frame["shuffled"].isna().all():
            notes.append(f"results/{name} was stored without the shuffled-label null, so no layer is read as "
                         "agreeing; run `layerstate stability STORE` again")
        frames.append(frame.assign(result=name))
    if not frames:
        return [], [], notes
    frame = pd.concat(frames, ignore_index=True).rename(
        columns={"estimate": "overlap", "lower": "overlap_lower", "upper": "overlap_upper"})
    # the project's interval rules: none from fewer than 3 seeds, none outside [0, 1]
    frame = apply_rules(frame, 0.0, 1.0, value="overlap", lower="overlap_lower", upper="overlap_upper",
                        seed_values=None)
    lengths = sorted(frame["length"].unique())
    shown = length if length in lengths else lengths[0]
    at = frame[frame["length"] == shown]
    layers = list(dict.fromkeys(at.sort_values("layer_pos")["layer"]))
    # each stability result with the probe result whose probes it compared
    from_results = ", ".join(f"results/{n}" + (f" (probes of {read_from[n]})" if read_from.get(n) else "")
                             for n in sorted(at["result"].unique()))
    sentences = agreement_sentences(at)
    fig = F.layer_lines(at.assign(**{"shuffled-label null": at["shuffled_upper"]}), layers, value="overlap",
                        ylabel="overlap of probe subspaces", reference="shuffled-label null")
    _draw_random_null(fig, at)
    figure = Figure("probe_stability", f"{STABILITY_CAPTION} Length {shown}; from {from_results}. "
                    + " ".join(sentences), fig)
    cells = at.assign(cell=at["task"] + " " + at["arch"] + "/" + at["variant"].astype(str))
    display = cells.assign(value=cells.apply(_cell_text, axis=1)).pivot(
        index="cell", columns="layer", values="value")[layers]
    table = Table("probe_stability", f"Seed agreement: overlap [95% interval across seeds] per layer at length "
                  f"{shown} ({from_results}), 'agree' where its lower end is above both nulls (in brackets: the "
                  "shuffled-label null's upper end, then k/d); every length in the CSV.",
                  frame, display.reset_index())
    return [figure], [table], notes


def _draw_random_null(fig, frame: pd.DataFrame) -> None:
    """The random-subspace null, dotted in each architecture's colour, on the panel of its task."""
    for ax in fig.axes:
        task = ax.get_title()
        sub = frame[frame["task"] == task]
        for arch, line in sub.groupby("arch"):
            line = line.sort_values("layer_pos")
            ax.plot(line["layer_pos"], line["null"], ls=":", lw=0.9, color=F.arch_colour(arch))
