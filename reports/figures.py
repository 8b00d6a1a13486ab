"""The report's figures: every point estimate drawn with its interval.

Figures are built on :class:`matplotlib.figure.Figure` directly, never through ``pyplot``: no
window, no global figure registry to leak, and no backend switch in the caller's process (the
Agg canvas renders PNG and SVG headless). Each function takes a tidy ``pandas.DataFrame``
(the same one written to ``tables/*.csv``) and returns a Figure; :func:`save` writes it.

Three rules hold for every figure:

- **One colour per architecture**, the same in every figure (:data:`ARCH_COLOURS`, with a
  marker each, so lines stay apart in greyscale); variants of one architecture differ by line
  style. Architectures outside the table get a fixed colour from their name.
- **Legends are never cut off**: a legend is laid out below the panels in as many columns as
  fit the figure's width (:func:`fit_legend` measures it), and the figure grows to hold its rows.
- **Readable at the page's width**: no figure is wider than the page's content
  (:data:`PAGE_WIDTH_IN` at :data:`DPI`), so the browser never shrinks it; panels get narrower
  instead, down to :data:`MIN_PANEL_W`, and beyond that wrap onto more rows where the layout allows.

Where a cell has too few seeds for an interval (:mod:`reports.intervals`) no band is drawn;
a thin vertical line joins the two seeds' own values instead (columns ``seed_a``, ``seed_b``).
"""

from __future__ import annotations

import base64
import io
import math
import textwrap
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.claims.kinds import trait
from analysis.stats.decision import Pending, Verdict

PANEL_W, PANEL_H = 3.1, 2.25
MIN_PANEL_W = 2.0
#: Narrowest figure with a legend below it (a one-panel figure widens to keep its legend in columns).
MIN_LEGEND_FIG_W = 6.0
#: Pixels per inch of the PNG; the page shows it at one CSS pixel per image pixel.
DPI = 110
#: The page's content width (``max-width`` 1180 px less padding) in inches at :data:`DPI`.
PAGE_WIDTH_IN = 10.2
LEGEND_ROW_IN = 0.24
#: One colour per claim verdict (its legend order): an effect beyond the margin, a real effect
#: inside it, equivalence, neither shown, the wrong direction, no answer.
VERDICT_COLOURS: dict[str, str] = {Verdict.SUPPORTED: "#1b7837", Verdict.NEGLIGIBLE: "#35978f", Verdict.EQUIVALENT: "#2166ac",
                   Verdict.INCONCLUSIVE: "#737373", Verdict.CONTRADICTED: "#b2182b",
                   Verdict.NOT_EVALUABLE: "#c2a5cf"}
#: One colour per architecture in every figure (Okabe-Ito first, then Tol's dark colours).
ARCH_COLOURS = {
    "transformer": "#0072B2",
    "mamba": "#D55E00",
    "mamba2": "#E69F00",
    "lstm": "#009E73",
    "gru": "#CC79A7",
    "based": "#56B4E9",
    "baseconv": "#882255",
    "h3": "#999933",
    "hyena": "#332288",
    "deltanet": "#8C564B",
}
ARCH_MARKERS = {"transformer": "o", "mamba": "s", "mamba2": "D", "lstm": "^", "gru": "v", "based": "P",
                "baseconv": "X", "h3": "<", "hyena": ">", "deltanet": "*"}
#: Colours for architectures not in :data:`ARCH_COLOURS`, picked by a hash of the name.
EXTRA_COLOURS = ["#44AA99", "#AA4499", "#117733", "#6699CC", "#661100", "#888888", "#DDAA33", "#004488"]
EXTRA_MARKERS = ["h", "p", "d", "8", "H", "1", "2", "3"]
VARIANT_STYLES = ["-", "--", ":", "-."]
SEED_LABEL = "2 seeds: each seed's value (no interval)"


def arch_colour(arch: str) -> str:
    """The colour of ``arch`` in every figure (a stable pick for names outside the table)."""
    if arch in ARCH_COLOURS:
        return ARCH_COLOURS[arch]
    return EXTRA_COLOURS[zlib.crc32(str(arch).encode()) % len(EXTRA_COLOURS)]


def arch_marker(arch: str) -> str:
    if arch in ARCH_MARKERS:
        return ARCH_MARKERS[arch]
    return EXTRA_MARKERS[zlib.crc32(str(arch).encode()) % len(EXTRA_MARKERS)]


def variant_style(variant: str, variants: Sequence[str]) -> str:
    """Line style of a variant: ``default`` (or the first) solid, the others dashed, dotted, …"""
    order = sorted(variants, key=lambda v: (v != "default", v))
    return VARIANT_STYLES[order.index(variant) % len(VARIANT_STYLES)] if variant in order else "-"


def _figure(n_rows: int, n_cols: int, *, width: float = PANEL_W, height: float = PANEL_H,
            extra_w: float = 0.6, min_width: float = MIN_LEGEND_FIG_W, sharex: bool = False,
            sharey: bool = False):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panel_w = max(MIN_PANEL_W, min(width, (PAGE_WIDTH_IN - extra_w) / n_cols))
    fig_w = min(PAGE_WIDTH_IN, max(min_width, panel_w * n_cols + extra_w))
    fig = Figure(figsize=(fig_w, height * n_rows + 0.7), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=sharex, sharey=sharey)
    return fig, axes


def _wrap(n_panels: int, width: float = PANEL_W, extra_w: float = 0.6, max_cols: int = 3) -> tuple[int, int]:
    """Rows and columns for ``n_panels`` small multiples that fit the page's width."""
    fit = max(1, int((PAGE_WIDTH_IN - extra_w) // MIN_PANEL_W))
    n_cols = max(1, min(n_panels, max_cols, fit))
    return int(math.ceil(n_panels / n_cols)), n_cols


def save(fig, directory: Path, name: str, *, dpi: int = DPI) -> dict[str, str]:
    """Write ``<name>.png`` and ``<name>.svg``; returns their relative paths and the PNG as base64."""
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    png = buf.getvalue()
    (directory / f"{name}.png").write_bytes(png)
    # the constrained layout is solved by the first draw; keep it instead of solving it again
    fig.set_layout_engine("none")
    fig.savefig(directory / f"{name}.svg", format="svg")
    return {
        "png": f"{directory.name}/{name}.png",
        "svg": f"{directory.name}/{name}.svg",
        "b64": base64.b64encode(png).decode("ascii"),
    }


# ---------------------------------------------------------------------- legends
def legend_overflow(fig, tolerance_px: float = 1.0) -> list[str]:
    """Legends of ``fig`` that reach outside the figure (empty when every legend fits)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    out = []
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]:
        ext = leg.get_window_extent(renderer)
        if (ext.x0 < box.x0 - tolerance_px or ext.x1 > box.x1 + tolerance_px
                or ext.y0 < box.y0 - tolerance_px or ext.y1 > box.y1 + tolerance_px):
            labels = [t.get_text() for t in leg.get_texts()]
            out.append(f"legend {labels[:3]}… spans x {ext.x0:.0f}-{ext.x1:.0f}, y {ext.y0:.0f}-{ext.y1:.0f} "
                       f"in a {box.width:.0f} x {box.height:.0f} figure")
    return out


def fit_legend(fig, handles: list, labels: list[str], *, fontsize: float = 8):
    """A legend below the panels in as many columns as fit the figure's width; the figure
    grows by the legend's rows, so the panels keep their size and nothing is cut off."""
    if not handles:
        return None
    labels = [textwrap.fill(str(lab), 40) for lab in labels]  # a long name wraps rather than widening
    base_h = fig.get_figheight()
    ncol = min(len(labels), 6)
    while True:
        # matplotlib fills the columns in order, as np.array_split splits the entries
        rows = max(sum(lab.count("\n") + 1 for lab in col) for col in np.array_split(np.array(labels), ncol))
        fig.set_figheight(base_h + LEGEND_ROW_IN * rows)
        leg = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False, fontsize=fontsize)
        # Centred below the panels, the legend fits when its width does; its width is its
        # text's, measured without drawing the figure (a draw solved the whole layout, and
        # was half of a report's figure time).
        width = leg.get_window_extent(fig.canvas.get_renderer()).width
        if ncol == 1 or width <= fig.bbox.width + 2:
            return leg
        leg.remove()
        ncol -= 1


def _collect(axes) -> tuple[list, list[str]]:
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if not lab.startswith("_") and lab not in handles:
                handles[lab] = h
    return list(handles.values()), list(handles)


def _style_entries(frame: pd.DataFrame, *, with_archs: bool = True) -> tuple[list, list[str]]:
    """Legend entries: one per architecture (colour and marker), one per variant (line style)."""
    from matplotlib.lines import Line2D

    handles, labels = [], []
    if with_archs:
        for arch in arch_order(frame["arch"].unique()):
            handles.append(Line2D([], [], color=arch_colour(arch), marker=arch_marker(arch), ms=4, lw=1.6))
            labels.append(str(arch))
    variants = sorted(frame["variant"].astype(str).unique()) if "variant" in frame else []
    if len(variants) > 1:
        for v in variants:
            handles.append(Line2D([], [], color="#333333", lw=1.4, ls=variant_style(v, variants)))
            labels.append(f"variant {v}")
    if {"seed_a", "seed_b"} <= set(frame.columns) and np.isfinite(frame["seed_a"].astype(float)).any():
        handles.append(Line2D([], [], color="#333333", lw=0, marker="|", ms=9, mew=1.2))
        labels.append(SEED_LABEL)
    return handles, labels


def arch_order(archs) -> list[str]:
    """Architectures in the table's order (then others by name), so legends read alike."""
    known = list(ARCH_COLOURS)
    return sorted((str(a) for a in archs), key=lambda a: (known.index(a) if a in known else len(known), a))


# ---------------------------------------------------------------------- drawing
def _band(ax, x, est, lo, hi, colour, label, *, marker="o", ls="-", seed_a=None, seed_b=None):
    x = np.asarray(x, dtype=float)
    ax.plot(x, est, marker=marker, ms=3.5, lw=1.6, ls=ls, color=colour, label=label)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.fill_between(x[ok], lo[ok], hi[ok], color=colour, alpha=0.18, lw=0)
    if seed_a is not None and seed_b is not None:
        a, b = np.asarray(seed_a, dtype=float), np.asarray(seed_b, dtype=float)
        two = ~ok & np.isfinite(a) & np.isfinite(b)
        if two.any():
            ax.vlines(x[two], a[two], b[two], color=colour, lw=1.2, alpha=0.8)
            ax.plot(np.r_[x[two], x[two]], np.r_[a[two], b[two]], lw=0, marker="_", ms=6, color=colour)


def _seeds(line: pd.DataFrame):
    if {"seed_a", "seed_b"} <= set(line.columns):
        return {"seed_a": line["seed_a"], "seed_b": line["seed_b"]}
    return {}


def accuracy_vs_length(frame: pd.DataFrame):
    """Accuracy against sequence length, one panel per task, one line per architecture.

    ``frame``: columns task, arch, variant, length, estimate, lower, upper (optionally
    seed_a, seed_b).
    """
    tasks = sorted(frame["task"].unique())
    n_rows, n_cols = _wrap(len(tasks), max_cols=4)
    fig, axes = _figure(n_rows, n_cols, sharey=True)
    variants = sorted(frame["variant"].astype(str).unique())
    for ax, task in zip(axes.flat, tasks, strict=False):
        sub = frame[frame["task"] == task]
        for (arch, variant), line in sub.groupby(["arch", "variant"]):
            line = line.sort_values("length")
            _band(ax, line["length"], line["estimate"], line["lower"], line["upper"], arch_colour(arch), None,
                  marker=arch_marker(arch), ls=variant_style(str(variant), variants), **_seeds(line))
        ax.set_title(task)
        ax.set_xlabel("sequence length")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("accuracy (model readout)")
    fit_legend(fig, *_style_entries(frame))
    return fig


def profile_grid(frame: pd.DataFrame, layer_labels: Sequence[str], *, ylabel: str = "probe accuracy"):
    """Small multiples of probe readability across layers: architectures as rows, tasks as columns.

    ``frame``: columns task, arch, variant, layer_pos, accuracy, accuracy_lower, accuracy_upper
    and, optionally, baseline and control (each with _lower/_upper) and seed_a, seed_b.
    """
    from matplotlib.lines import Line2D

    tasks = sorted(frame["task"].unique())
    archs = arch_order(frame["arch"].unique())
    fig, axes = _figure(len(archs), len(tasks), sharex=True, sharey=True)
    variants = sorted(frame["variant"].astype(str).unique())
    extra: dict[str, object] = {}
    for i, arch in enumerate(archs):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            sub = frame[(frame["task"] == task) & (frame["arch"] == arch)]
            for variant, line in sub.groupby("variant"):
                line = line.sort_values("layer_pos")
                x = line["layer_pos"].to_numpy()
                _band(ax, x, line["accuracy"], line["accuracy_lower"], line["accuracy_upper"], arch_colour(arch),
                      None, marker=arch_marker(arch), ls=variant_style(str(variant), variants), **_seeds(line))
                if "control" in line and np.isfinite(line["control"].astype(float)).any():
                    _band(ax, x, line["control"], line["control_lower"], line["control_upper"], "#999999",
                          None, marker="", ls=":")
                    extra["control task"] = Line2D([], [], color="#999999", ls=":", lw=1.6)
                if "baseline" in line and np.isfinite(line["baseline"].astype(float)).any():
                    ax.plot(x, line["baseline"], ls="--", lw=1, color="#444444")
                    extra["majority baseline"] = Line2D([], [], color="#444444", ls="--", lw=1)
            if not len(sub):
                ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes,
                        color="#777777", fontsize=8)
            if i == 0:
                ax.set_title(task)
            if j == 0:
                ax.set_ylabel(f"{arch}\n{ylabel}", fontsize=9, color=arch_colour(arch))
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xticks(range(len(layer_labels)), layer_labels, rotation=45 if len(layer_labels) > 8 else 0,
                      fontsize=8)
        ax.set_xlabel("layer")
    handles, labels = _style_entries(frame, with_archs=False)
    probe = Line2D([], [], color="#333333", marker="o", ms=3.5, lw=1.6)
    fit_legend(fig, [probe, *extra.values(), *handles],
               ["probe accuracy (colour: architecture)", *extra, *labels])
    return fig


def layer_lines(frame: pd.DataFrame, layer_labels: Sequence[str], *, value: str, ylabel: str,
                row: str | None = None, reference: str | None = None, zero_line: bool = False):
    """A per-layer quantity with its interval: tasks as columns, one line per architecture.

    ``frame``: columns task, arch, variant, layer_pos, ``value``, ``value_lower``,
    ``value_upper`` (optionally seed_a, seed_b); ``row`` (e.g. the ablation setting) makes one
    row of panels per value; ``reference`` names a column drawn thin and dashed in the line's
    colour (e.g. the value before an intervention).
    """
    from matplotlib.lines import Line2D

    tasks = sorted(frame["task"].unique())
    rows = sorted(frame[row].astype(str).unique()) if row else [None]
    fig, axes = _figure(len(rows), len(tasks), sharex=True, sharey=True)
    variants = sorted(frame["variant"].astype(str).unique())
    for i, r in enumerate(rows):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            sub = frame[frame["task"] == task]
            if row:
                sub = sub[sub[row].astype(str) == r]
            for (arch, variant), line in sub.groupby(["arch", "variant"]):
                line = line.sort_values("layer_pos")
                colour = arch_colour(arch)
                _band(ax, line["layer_pos"], line[value], line[f"{value}_lower"], line[f"{value}_upper"],
                      colour, None, marker=arch_marker(arch), ls=variant_style(str(variant), variants),
                      **_seeds(line))
                if reference and reference in line:
                    ax.plot(line["layer_pos"], line[reference], ls=(0, (2, 2)), lw=0.9, color=colour)
            if zero_line:
                ax.axhline(0, color="#444444", lw=0.8)
            if i == 0:
                ax.set_title(task)
            if j == 0:
                ax.set_ylabel(f"{r}\n{ylabel}" if row else ylabel, fontsize=9)
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xticks(range(len(layer_labels)), layer_labels, fontsize=8,
                      rotation=45 if len(layer_labels) > 8 else 0)
        ax.set_xlabel("layer")
    handles, labels = _style_entries(frame)
    if reference:
        handles.append(Line2D([], [], color="#333333", ls=(0, (2, 2)), lw=0.9))
        labels.append(f"{reference} (thin dashed)")
    fit_legend(fig, handles, labels)
    return fig


def heatmaps(frame: pd.DataFrame, *, value: str, title: str, row: str = "layer", col: str = "position"):
    """One heatmap (``row`` x ``col``) per task and architecture, shared colour scale.

    ``frame``: columns task, arch, variant, ``row``, ``col``, ``value``; rows of the same cell
    with several variants are drawn as separate panels.
    """
    frame = frame.assign(panel=_series_key(frame, ["task", "arch", "variant"]))
    panels = sorted(frame["panel"].unique())
    n_rows, n_cols = _wrap(len(panels), width=3.4, extra_w=1.4)
    fig, axes = _figure(n_rows, n_cols, width=3.4, height=2.6, extra_w=1.4)
    vals = frame[value].astype(float)
    vmin, vmax = min(0.0, np.nanmin(vals)), max(1.0, np.nanmax(vals))
    image = None
    for ax, panel in zip(axes.flat, panels, strict=False):
        sub = frame[frame["panel"] == panel]
        grid = sub.pivot_table(index=row, columns=col, values=value, aggfunc="mean", sort=False)
        order = list(dict.fromkeys(sub[row]))  # keep the layer order as given
        grid = grid.reindex(order)
        image = ax.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax,
                          origin="lower", interpolation="nearest")
        ax.set_yticks(range(len(grid.index)), [str(v) for v in grid.index], fontsize=7)
        step = max(1, len(grid.columns) // 10)
        ax.set_xticks(range(0, len(grid.columns), step), [str(v) for v in grid.columns[::step]], fontsize=7)
        ax.set_title(panel, fontsize=9, color=arch_colour(str(sub["arch"].iloc[0])))
        ax.set_xlabel(col, fontsize=8)
        ax.set_ylabel(row, fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label=title)
    return fig


def _series_key(frame: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    """Label of each row's panel or line: the values of ``by`` that vary, joined by ' / '."""
    varying = [c for c in by if c in frame and frame[c].nunique() > 1] or [by[0]]
    return frame[varying].astype(str).agg(" / ".join, axis=1)


def position_lines(frame: pd.DataFrame, *, value: str, ylabel: str, x: str = "position", series: str = "layer"):
    """A quantity per position (x) with intervals, one line per layer (ordered colours from
    dark to light); one panel per task/arch, titled in the architecture's colour."""
    from matplotlib import colormaps

    frame = frame.assign(panel=_series_key(frame, ["task", "arch", "variant"]))
    panels = sorted(frame["panel"].unique())
    n_rows, n_cols = _wrap(len(panels))
    fig, axes = _figure(n_rows, n_cols, sharey=True)
    keys = list(dict.fromkeys(frame[series].astype(str)))
    cmap = colormaps["viridis"]
    cols = {k: cmap(0.9 * i / max(1, len(keys) - 1)) for i, k in enumerate(keys)}
    for ax, panel in zip(axes.flat, panels, strict=False):
        sub = frame[frame["panel"] == panel]
        sites = list(dict.fromkeys(sub[x].astype(str)))
        for key, line in sub.groupby(sub[series].astype(str), sort=False):
            pos = [sites.index(str(v)) for v in line[x]]
            _band(ax, pos, line[value], line[f"{value}_lower"], line[f"{value}_upper"], cols[key],
                  f"{series} {key}", **_seeds(line))
        ax.set_xticks(range(len(sites)), sites, fontsize=7, rotation=30 if len(sites) > 4 else 0)
        ax.set_title(panel, fontsize=9, color=arch_colour(str(sub["arch"].iloc[0])))
        ax.axhline(0, color="#444444", lw=0.6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for r in axes:
        r[0].set_ylabel(ylabel)
    handles, labels = _collect(axes)
    more, more_labels = _style_entries(frame, with_archs=False)
    fit_legend(fig, handles + more, labels + more_labels)
    return fig


def forest(frame: pd.DataFrame):
    """Claims as a forest plot: estimate and interval per claim, coloured by verdict.

    ``frame``: columns claim, kind, verdict, estimate, lower, upper, margin, reference (the
    value the claim is judged against: 0 for differences, the threshold for readable_by);
    optionally seed_a, seed_b (the two seeds' values where there are too few for an interval).
    """
    from matplotlib.lines import Line2D

    n = len(frame)
    fig, axes = _figure(1, 1, width=7.5, height=max(1.6, 0.45 * n + 0.6))
    ax = axes[0, 0]
    y = np.arange(n)[::-1]
    two_seeds = False
    for yi, (_, r) in zip(y, frame.iterrows(), strict=True):
        c = VERDICT_COLOURS.get(str(r["verdict"]), "#333333")
        if np.isfinite(r.get("margin", np.nan)) and trait(str(r["kind"]), "compares"):
            ax.fill_betweenx([yi - 0.35, yi + 0.35], -r["margin"], r["margin"], color="#dddddd", lw=0)
        if np.isfinite(r.get("reference", np.nan)):
            ax.plot([r["reference"]] * 2, [yi - 0.38, yi + 0.38], color="#444444", lw=1)
        if np.isfinite(r["lower"]) and np.isfinite(r["upper"]):
            ax.plot([r["lower"], r["upper"]], [yi, yi], color=c, lw=2.2)
        elif np.isfinite(r.get("seed_a", np.nan)) and np.isfinite(r.get("seed_b", np.nan)):
            ax.plot([r["seed_a"], r["seed_b"]], [yi, yi], color=c, lw=0.8, ls=":", marker="|", ms=9, mew=1.2)
            two_seeds = True
        ax.plot([r["estimate"]], [yi], "o", color=c, ms=6)
    ax.set_yticks(y, [str(c) for c in frame["claim"]], fontsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("estimate with 95% interval (grey band: declared margin; tick: reference value)")
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=c, marker="o", lw=2, label=v) for v, c in VERDICT_COLOURS.items()]
    labels = list(VERDICT_COLOURS)
    if two_seeds:
        handles.append(Line2D([], [], color="#333333", lw=0.8, ls=":", marker="|", ms=9, mew=1.2))
        labels.append(SEED_LABEL)
    fit_legend(fig, handles, labels)
    return fig


#: Colours of a sequential design's decisions: the verdicts' colours, and two for a claim still
#: going (continue) and one stopped for futility.
DECISION_COLOURS: dict[str, str] = {**{k: VERDICT_COLOURS[k] for k in (Verdict.SUPPORTED, Verdict.CONTRADICTED, Verdict.INCONCLUSIVE)},
                    Pending.FUTILITY: "#8c510a", Pending.CONTINUE: "#4d4d4d"}


def sequential_claim(frame: pd.DataFrame, title: str, *, value: float | None = None):
    """One claim of a group-sequential design across its stages: x the seeds per cell at each
    stage, the estimate with its repeated 95% interval as error bars (filled marker at the stage
    that decided it, hollow where it went on), the boundaries of its own test as dashed lines
    with markers (``bound_low`` up triangles, ``bound_high`` down triangles) and the value it is
    tested against as a thin grey line.

    ``frame``: one row per stage the claim was evaluated at, columns seeds, estimate, rci_low,
    rci_high, bound_low, bound_high, decision.
    """
    from matplotlib.lines import Line2D

    fig, axes = _figure(1, 1, width=4.6, height=2.3, min_width=4.6)
    ax = axes[0, 0]
    x = frame["seeds"].to_numpy(dtype=float)
    est = frame["estimate"].to_numpy(dtype=float)
    lo, hi = frame["rci_low"].to_numpy(dtype=float), frame["rci_high"].to_numpy(dtype=float)
    decisions = frame["decision"].astype(str).to_numpy()
    handles: list = []
    labels: list[str] = []
    if value is not None and np.isfinite(value):
        ax.axhline(value, color="#999999", lw=0.9)
        handles.append(Line2D([], [], color="#999999", lw=0.9))
        labels.append(f"tested value {value:g}")
    for col, marker, words in (("bound_low", "^", "lower boundary of its test"),
                               ("bound_high", "v", "upper boundary of its test")):
        b = frame[col].to_numpy(dtype=float)
        if np.isfinite(b).any():
            ax.plot(x, b, ls="--", lw=1.0, marker=marker, ms=4, color="#555555")
            handles.append(Line2D([], [], ls="--", lw=1.0, marker=marker, ms=4, color="#555555"))
            labels.append(words)
    ok = np.isfinite(est)
    ax.plot(x[ok], est[ok], lw=1.0, color="#333333", alpha=0.6)
    for xi, e, l_, h_, d in zip(x[ok], est[ok], lo[ok], hi[ok], decisions[ok], strict=True):
        colour = DECISION_COLOURS.get(d, "#333333")
        if np.isfinite(l_) and np.isfinite(h_):
            ax.errorbar([xi], [e], yerr=[[e - l_], [h_ - e]], color=colour, lw=1.6, capsize=3)
        ax.plot([xi], [e], "o", ms=6, color=colour, mfc=colour if d != Pending.CONTINUE else "white", mew=1.4)
    for d in (d for d in DECISION_COLOURS if d in set(decisions[ok])):
        c = DECISION_COLOURS[d]
        handles.append(Line2D([], [], color=c, marker="o", ms=6, lw=1.6, mfc=c if d != Pending.CONTINUE else "white"))
        labels.append(f"estimate, repeated 95% interval: {d}")
    # the scale of the estimates and their intervals; a boundary far outside it (a first stage of 3
    # seeds: t with 2 degrees of freedom at the Holm level puts it at +-20) is marked at the edge
    # with its value instead of flattening everything else
    core = np.concatenate([est[ok], lo[ok], hi[ok], [value] if value is not None else []]).astype(float)
    core = core[np.isfinite(core)]
    if core.size:
        y0, y1 = float(core.min()), float(core.max())
        span = max(y1 - y0, 0.02)
        near = [b for col in ("bound_low", "bound_high") for b in frame[col].to_numpy(dtype=float)
                if np.isfinite(b) and y0 - span <= b <= y1 + span]
        y0, y1 = min([y0, *near]), max([y1, *near])
        pad = 0.08 * max(y1 - y0, 0.02)
        ax.set_ylim(y0 - pad, y1 + pad)
        for col in ("bound_low", "bound_high"):
            for xi, b in zip(x, frame[col].to_numpy(dtype=float), strict=True):
                if np.isfinite(b) and not (y0 - pad <= b <= y1 + pad):
                    edge = y1 + pad if b > y1 else y0 - pad
                    ax.annotate(f"boundary {b:+.3g}", (xi, edge), xytext=(4, -10 if b > y1 else 4),
                                textcoords="offset points", fontsize=7, color="#555555")
    ax.set_xticks(sorted(set(x.tolist())), [str(int(v)) for v in sorted(set(x.tolist()))])
    ax.set_xlabel("seeds per cell at the stage")
    ax.set_ylabel("estimate")
    ax.set_title(textwrap.fill(title, 60), fontsize=9)
    ax.grid(alpha=0.3)
    fit_legend(fig, handles, labels)
    return fig
