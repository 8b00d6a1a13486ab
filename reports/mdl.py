"""MDL probes beside the probe profiles: how many bits the states save on the label, per layer.

Source: every ``results/mdl/<name>`` written by :mod:`analysis.probes.mdl_sweep` (``layerstate
mdl``): the per-seed ``compression_profile`` (uniform over online codelength, summed over the
result's positions) and its seed-level t intervals stored with it (``compression_*`` and
``control_compression_*``, :func:`analysis.intervals.stored_intervals`). Nothing is computed
here: a result without stored intervals is named in a note and left out.
"""

from __future__ import annotations

import pandas as pd

from analysis import registry
from analysis.intervals import stored_intervals
from reports import figures as F
from reports.intervals import INF, apply_rules
from reports.model import Figure, Table
from reports.numbers import read_result
from reports.snapshot import Snapshot
from store import schema

MDL_CAPTION = (
    "MDL probes (Voita & Titov 2020, online code): compression = uniform codelength / online codelength "
    "of the label, per layer (log scale; band: 95% interval across seeds, seed-level t, from 3 seeds; a 2-seed cell draws its two seeds' values); thin dashed: the same code "
    "of a control labelling (each position's labels shuffled across sequences), which stays near 1. "
    "Well above 1: the states carry the label linearly, and cheaply (few training sequences needed); "
    "about 1: they do not."
)


def _cell_text(r: pd.Series) -> str:
    """``12.31 [9.80, 14.83]``; without an interval the estimate and why (``too few seeds``:
    the two seeds' values)."""
    if pd.notna(r.compression_lower):
        return f"{r.compression:.2f} [{r.compression_lower:.2f}, {r.compression_upper:.2f}]"
    if pd.notna(r.get("seed_a")) and pd.notna(r.get("seed_b")):
        return f"{r.compression:.2f} (seeds {r.seed_a:.2f}, {r.seed_b:.2f})"
    return f"{r.compression:.2f}"


def mdl_results(store) -> list[str]:
    """The names of the stored MDL results (kind ``mdl``, :mod:`store.schema`)."""
    return [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == registry.MDL]


def mdl_frame(ds) -> pd.DataFrame | None:
    """The stored compression intervals of one MDL result, with the control's estimate beside
    them (``control``) and each layer's place (``layer_pos``); None without stored intervals."""
    frame = stored_intervals(ds, "compression")
    if frame is None:
        return None
    frame = frame.rename(columns={"estimate": "compression", "lower": "compression_lower",
                                  "upper": "compression_upper"})
    ctrl = stored_intervals(ds, "control_compression")
    keys = ["task", "arch", "variant", "length", "layer"]
    if ctrl is not None:
        ctrl = ctrl.rename(columns={"estimate": "control", "lower": "control_lower", "upper": "control_upper"})
        frame = frame.merge(ctrl[[*keys, "control", "control_lower", "control_upper"]], on=keys, how="left")
    order = {str(v): i for i, v in enumerate(ds.layer.values)}
    frame["layer_pos"] = frame["layer"].astype(str).map(order)
    frame["positions"] = str(ds.attrs.get("positions", ""))
    frame["target"] = str(ds.attrs.get("target", ""))
    return frame


def mdl_parts(snap: Snapshot, length: int | None = None) -> tuple[list[Figure], list[Table], list[str]]:
    """The MDL figure and table for the probes section (at ``length``, default the shortest
    length the results hold; every length goes to the CSV), and its notes."""
    names = mdl_results(snap.store)
    frames, notes = [], []
    for name in names:
        ds = read_result(snap.store, name)
        frame = mdl_frame(ds)
        if frame is None:
            notes.append(f"results/{name} holds no stored intervals; `layerstate mdl STORE` stores them")
            continue
        frames.append(frame.assign(result=name))
    if not frames:
        return [], [], notes
    # the project's interval rules: none shown from fewer than 3 seeds (a 2-seed cell shows its two
    # seeds' values), clipped to what compression can take (above 0)
    frame = apply_rules(pd.concat(frames, ignore_index=True), 0.0, INF, value="compression",
                        lower="compression_lower", upper="compression_upper")
    lengths = sorted(frame["length"].unique())
    shown = length if length in lengths else lengths[0]
    at = frame[frame["length"] == shown]
    layers = list(dict.fromkeys(at.sort_values("layer_pos")["layer"]))
    from_results = ", ".join(f"results/{n}" for n in sorted(at["result"].unique()))
    figure = Figure("mdl_compression", f"{MDL_CAPTION} Length {shown}; from {from_results}.",
                    F.layer_lines(at, layers, value="compression", ylabel="compression (uniform / online)",
                                  reference="control" if "control" in at else None))
    for ax in figure.figure.axes:  # compressions of 1 and of 20 on one page
        if ax.has_data():
            ax.set_yscale("log")
    shown_table = at.assign(cell=at["task"] + " " + at["arch"] + "/" + at["variant"].astype(str))
    text = shown_table.apply(_cell_text, axis=1)
    display = shown_table.assign(value=text).pivot(index="cell", columns="layer", values="value")[layers]
    table = Table("mdl_compression", f"MDL compression [95% interval across seeds] per layer at length {shown} "
                  f"({from_results}); every length, and the control's, in the CSV.", frame,
                  display.reset_index())
    return [figure], [table], notes
