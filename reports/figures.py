"""The report's figures: every point estimate drawn with its interval.

Figures are built on :class:`matplotlib.figure.Figure` directly, never through ``pyplot``: no
window, no global figure registry to leak, and no backend switch in the caller's process (the
Agg canvas renders PNG and SVG headless). Each function takes a tidy ``pandas.DataFrame``
(the same one written to ``tables/*.csv``) and returns a Figure; :func:`save` writes it.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

PANEL_W, PANEL_H = 3.1, 2.25
VERDICT_COLOURS = {"supported": "#1b7837", "contradicted": "#b2182b", "inconclusive": "#737373",
                   "not evaluable": "#c2a5cf"}


def _figure(n_rows: int, n_cols: int, *, width: float = PANEL_W, height: float = PANEL_H, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_cols + 0.6, height * n_rows + 0.7), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False, **kw)
    return fig, axes


def colours(keys: Sequence[str]) -> dict[str, str]:
    """A stable colour per key (architecture, layer, ...), colour-blind-safe for up to 8."""
    palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
    extra = [f"C{i}" for i in range(10)]
    pal = palette + extra
    return {k: pal[i % len(pal)] for i, k in enumerate(keys)}


def save(fig, directory: Path, name: str, *, dpi: int = 110) -> dict[str, str]:
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


def _series_key(frame: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    """Label of each row's line: the values of ``by`` that vary, joined by '/'."""
    varying = [c for c in by if c in frame and frame[c].nunique() > 1] or [by[0]]
    return frame[varying].astype(str).agg(" / ".join, axis=1)


def _band(ax, x, est, lo, hi, colour, label, *, marker="o", ls="-"):
    ax.plot(x, est, marker=marker, ms=3.5, lw=1.6, ls=ls, color=colour, label=label)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.fill_between(np.asarray(x)[ok], np.asarray(lo)[ok], np.asarray(hi)[ok], color=colour,
                        alpha=0.18, lw=0)


def accuracy_vs_length(frame: pd.DataFrame):
    """Accuracy against sequence length, one panel per task, one line per architecture.

    ``frame``: columns task, arch, variant, length, estimate, lower, upper.
    """
    tasks = sorted(frame["task"].unique())
    fig, axes = _figure(1, len(tasks), sharey=True)
    frame = frame.assign(series=_series_key(frame, ["arch", "variant"]))
    cols = colours(sorted(frame["series"].unique()))
    for ax, task in zip(axes[0], tasks, strict=True):
        sub = frame[frame["task"] == task]
        for key, line in sub.groupby("series"):
            line = line.sort_values("length")
            _band(ax, line["length"], line["estimate"], line["lower"], line["upper"], cols[key], key)
        ax.set_title(task)
        ax.set_xlabel("sequence length")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("accuracy (model readout)")
    _legend(fig, axes)
    return fig


def _legend(fig, axes, **kw) -> None:
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if handles:
        fig.legend([handles[k] for k in labels], labels, loc="outside lower center",
                   ncol=min(len(labels), 6), frameon=False, fontsize=8, **kw)


def profile_grid(frame: pd.DataFrame, layer_labels: Sequence[str], *, ylabel: str = "probe accuracy"):
    """Small multiples of probe readability across layers: architectures as rows, tasks as columns.

    ``frame``: columns task, arch, variant, layer_pos, accuracy, accuracy_lower, accuracy_upper
    and, optionally, baseline and control (each with _lower/_upper).
    """
    tasks = sorted(frame["task"].unique())
    archs = sorted(frame["arch"].unique())
    fig, axes = _figure(len(archs), len(tasks), sharex=True, sharey=True)
    frame = frame.assign(series=_series_key(frame, ["variant"]))
    series = sorted(frame["series"].unique())
    cols = colours(series)
    for i, arch in enumerate(archs):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            sub = frame[(frame["task"] == task) & (frame["arch"] == arch)]
            for key, line in sub.groupby("series"):
                line = line.sort_values("layer_pos")
                x = line["layer_pos"].to_numpy()
                label = "probe" if len(series) == 1 else f"probe ({key})"
                _band(ax, x, line["accuracy"], line["accuracy_lower"], line["accuracy_upper"], cols[key], label)
                if "control" in line and np.isfinite(line["control"]).any():
                    _band(ax, x, line["control"], line["control_lower"], line["control_upper"], "#999999",
                          "control task", marker="", ls=":")
                if "baseline" in line and np.isfinite(line["baseline"]).any():
                    ax.plot(x, line["baseline"], ls="--", lw=1, color="#444444", label="majority baseline")
            if not len(sub):
                ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes,
                        color="#777777", fontsize=8)
            if i == 0:
                ax.set_title(task)
            if j == 0:
                ax.set_ylabel(f"{arch}\n{ylabel}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xticks(range(len(layer_labels)), layer_labels, rotation=45 if len(layer_labels) > 8 else 0,
                      fontsize=8)
        ax.set_xlabel("layer")
    _legend(fig, axes)
    return fig


def layer_lines(frame: pd.DataFrame, layer_labels: Sequence[str], *, value: str, ylabel: str,
                row: str | None = None, reference: str | None = None, zero_line: bool = False):
    """A per-layer quantity with its interval: tasks as columns, one line per architecture.

    ``frame``: columns task, arch, variant, layer_pos, ``value``, ``value_lower``,
    ``value_upper``; ``row`` (e.g. the ablation setting) makes one row of panels per value;
    ``reference`` names a column drawn dashed in the line's colour (e.g. the value before an
    intervention).
    """
    tasks = sorted(frame["task"].unique())
    rows = sorted(frame[row].astype(str).unique()) if row else [None]
    fig, axes = _figure(len(rows), len(tasks), sharex=True, sharey=True)
    frame = frame.assign(series=_series_key(frame, ["arch", "variant"]))
    cols = colours(sorted(frame["series"].unique()))
    for i, r in enumerate(rows):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            sub = frame[frame["task"] == task]
            if row:
                sub = sub[sub[row].astype(str) == r]
            for key, line in sub.groupby("series"):
                line = line.sort_values("layer_pos")
                _band(ax, line["layer_pos"], line[value], line[f"{value}_lower"], line[f"{value}_upper"],
                      cols[key], key)
                if reference and reference in line:
                    ax.plot(line["layer_pos"], line[reference], ls="--", lw=1, color=cols[key])
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
    _legend(fig, axes)
    return fig


def heatmaps(frame: pd.DataFrame, *, value: str, title: str, row: str = "layer", col: str = "position"):
    """One heatmap (``row`` x ``col``) per task and architecture, shared colour scale.

    ``frame``: columns task, arch, variant, ``row``, ``col``, ``value``; rows of the same cell
    with several variants are drawn as separate panels.
    """
    frame = frame.assign(panel=_series_key(frame, ["task", "arch", "variant"]))
    panels = sorted(frame["panel"].unique())
    n_cols = min(3, len(panels))
    n_rows = int(np.ceil(len(panels) / n_cols))
    fig, axes = _figure(n_rows, n_cols, width=3.4, height=2.6)
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
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel(col, fontsize=8)
        ax.set_ylabel(row, fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label=title)
    return fig


def position_lines(frame: pd.DataFrame, *, value: str, ylabel: str, x: str = "position", series: str = "layer"):
    """A quantity per position (x) with intervals, one line per layer; one panel per task/arch."""
    frame = frame.assign(panel=_series_key(frame, ["task", "arch", "variant"]))
    panels = sorted(frame["panel"].unique())
    n_cols = min(3, len(panels))
    n_rows = int(np.ceil(len(panels) / n_cols))
    fig, axes = _figure(n_rows, n_cols, sharey=True)
    keys = list(dict.fromkeys(frame[series].astype(str)))
    cols = colours(keys)
    for ax, panel in zip(axes.flat, panels, strict=False):
        sub = frame[frame["panel"] == panel]
        sites = list(dict.fromkeys(sub[x].astype(str)))
        for key, line in sub.groupby(sub[series].astype(str), sort=False):
            pos = [sites.index(str(v)) for v in line[x]]
            _band(ax, pos, line[value], line[f"{value}_lower"], line[f"{value}_upper"], cols[key], f"{series} {key}")
        ax.set_xticks(range(len(sites)), sites, fontsize=7, rotation=30 if len(sites) > 4 else 0)
        ax.set_title(panel, fontsize=9)
        ax.axhline(0, color="#444444", lw=0.6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel(ylabel)
    _legend(fig, axes)
    return fig


def forest(frame: pd.DataFrame):
    """Claims as a forest plot: estimate and interval per claim, coloured by verdict.

    ``frame``: columns claim, kind, verdict, estimate, lower, upper, margin, reference (the
    value the claim is judged against: 0 for differences, the threshold for readable_by).
    """
    n = len(frame)
    fig, axes = _figure(1, 1, width=7.5, height=max(1.6, 0.45 * n + 0.6))
    ax = axes[0, 0]
    y = np.arange(n)[::-1]
    for yi, (_, r) in zip(y, frame.iterrows(), strict=True):
        c = VERDICT_COLOURS.get(str(r["verdict"]), "#333333")
        if np.isfinite(r.get("margin", np.nan)) and r["kind"] in ("equivalence", "difference"):
            ax.fill_betweenx([yi - 0.35, yi + 0.35], -r["margin"], r["margin"], color="#dddddd", lw=0)
        if np.isfinite(r.get("reference", np.nan)):
            ax.plot([r["reference"]] * 2, [yi - 0.38, yi + 0.38], color="#444444", lw=1)
        if np.isfinite(r["lower"]) and np.isfinite(r["upper"]):
            ax.plot([r["lower"], r["upper"]], [yi, yi], color=c, lw=2.2)
        ax.plot([r["estimate"]], [yi], "o", color=c, ms=6)
    ax.set_yticks(y, [str(c) for c in frame["claim"]], fontsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("estimate with 95% interval (grey band: declared margin; tick: reference value)")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker="o", lw=2, label=v) for v, c in VERDICT_COLOURS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False, fontsize=8)
    return fig
