"""Charts as inline SVG (matplotlib, Agg backend): one drawing per ``Chart`` kind.

Layout is measured, not guessed: facets are stacked top to bottom, each panel's
ticks, title and labels are measured with the renderer before the panels are
placed, so no text of one panel can overlap the next; titles wrap to their panel's
width; the legend goes below the last panel with as many columns as fit, and every
legend names every series (proxy handles, one per declared series).  The figure's
size follows its content (rows, label widths), and ``bbox_inches="tight"`` keeps
every label inside the SVG.  No constrained layout: it warns when space is short.

Text stays text in the SVG (``svg.fonttype = none``); mathtext is off (a ``$`` in a
condition name is a dollar sign); every string passes ``visible`` and labels are
cut to ``LABEL_MAX`` characters.  Ids carry a salt from the chart id and a hash of
the drawing, and the output carries no date, so the same data give the same bytes.
Colours are the Okabe-Ito palette (colour-blind safe); every series also differs
in marker, line style or hatch, so a grey-scale print stays readable.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from reports import _format
from reports._document import Chart

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "<", ">", "h", "p")
LINESTYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
HATCHES = ("", "//", "\\\\", "xx", "||", "--", "++", "/-")
"""Straight lines only: a dotted or circled hatch tile is hundreds of Bezier circles
(``oo`` 140 KB, ``..`` 70 KB of SVG each), which made two charts 600 KB of a report."""

FONT = 9.0
"""Points; the SVG is shown at its natural size, so this is the size on screen."""
LABEL_MAX = 90
"""Characters of a tick or legend label; longer ones are cut (``...``)."""
WIDTH = 10.0
"""Inches a chart aims at (960 px): whole in a 1280 px window."""
AXES_MIN, AXES_MAX = 3.5, 6.5
GAP = 0.22
"""Inches between one panel's lowest text and the next panel's title."""
RATE_AXIS = "share passing (95 % interval)"

_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": FONT,
    "axes.titlesize": FONT + 1,
    "axes.labelsize": FONT,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": FONT,
    "hatch.linewidth": 0.6,
    "figure.dpi": 72,
    "savefig.dpi": 72,
}

_FONT = FontProperties(family="sans-serif", size=FONT)


def _label(value: object) -> str:
    return _format.shorten(value, LABEL_MAX)


def _order(values: Sequence[Any] | pd.Series) -> list[Any]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def _text_width(renderer: Any, text: str) -> float:
    """Points (the figure is 72 dpi) a one-line text takes at ``FONT``."""
    if not text:
        return 0.0
    width, _, _ = renderer.get_text_width_height_descent(text, _FONT, ismath=False)
    return float(width)


def _wrap(renderer: Any, text: str, width_pt: float) -> str:
    """Lines of ``text`` no wider than ``width_pt`` (broken at spaces, or anywhere)."""
    if _text_width(renderer, text) * 1.12 <= width_pt:
        return text
    chars = max(12, int(len(text) * width_pt / (_text_width(renderer, text) * 1.12)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False))


class _Stack:
    """Panels (facets) stacked top to bottom, aligned on the left, sized in inches.

    ``panel`` adds an axes whose plotting area is ``height`` inches tall; ``finish``
    measures the text around each axes and places them so that none of it overlaps,
    then adds the legend below (as many columns as fit the width).  Text sizes are in
    points, so they are measured once on a provisional canvas and the figure is then
    given its final size.
    """

    def __init__(self, axes_width: float | None = None) -> None:
        self.figure = Figure(figsize=(30, 30), dpi=72)
        canvas: Any = FigureCanvasAgg(self.figure)  # untyped in matplotlib's stubs
        self.renderer: Any = canvas.get_renderer()
        self.axes_width = axes_width
        self.panels: list[tuple[Axes, float, str]] = []

    def panel(self, title: str, height: float) -> Axes:
        ax = self.figure.add_axes((0.3, 0.3, 0.2, 0.2))
        self.panels.append((ax, height, _label(title) if title else ""))
        return ax

    def _extents(self, ax: Axes, width: float, height: float) -> tuple[float, ...]:
        """Inches of text beyond the axes box when it is ``width`` x ``height`` inches:
        left, right, above, below (measured on the provisional 30-inch canvas)."""
        ax.set_position((10 / 30, 10 / 30, width / 30, height / 30))
        box = ax.get_tightbbox(self.renderer)
        inner = ax.get_window_extent(self.renderer)
        if box is None:
            return 0.0, 0.0, 0.0, 0.0
        return (
            max(0.0, inner.x0 - box.x0) / 72,
            max(0.0, box.x1 - inner.x1) / 72,
            max(0.0, box.y1 - inner.y1) / 72,
            max(0.0, inner.y0 - box.y0) / 72,
        )

    def finish(
        self,
        legend: Sequence[Artist] = (),
        side: Callable[[Axes], None] | None = None,
    ) -> Figure:
        """Place the panels and the legend; ``side(ax)`` may add a colour bar right of
        the first panel (called once the panels are placed)."""
        left = max(self._extents(ax, AXES_MAX, h)[0] for ax, h, _ in self.panels)
        width = self.axes_width or min(AXES_MAX, max(AXES_MIN, WIDTH - left - 0.3))
        for ax, _, title in self.panels:
            if title:
                ax.set_title(_wrap(self.renderer, title, width * 72), loc="left")
        tops: list[float] = []
        top, right = 0.0, 0.0
        for ax, height, _ in self.panels:
            _, beyond, above, below = self._extents(ax, width, height)
            tops.append(top + above)
            top += above + height + below + GAP
            right = max(right, beyond)
        box = self._legend(legend, left + width + right) if legend else None
        legend_height = 0.0 if box is None else box.get_window_extent(self.renderer).height / 72
        size = (left + width + right + (1.2 if side else 0.0), top + legend_height)
        self.figure.set_size_inches(size)
        for (ax, height, _), at in zip(self.panels, tops, strict=True):
            ax.set_position(
                (left / size[0], 1 - (at + height) / size[1], width / size[0], height / size[1])
            )
        if box is not None:
            box.set_bbox_to_anchor((0.0, 1 - top / size[1]), transform=self.figure.transFigure)
        if side is not None:
            side(self.panels[0][0])
        return self.figure

    def _legend(self, handles: Sequence[Artist], width: float) -> Legend:
        labels = [str(h.get_label()) for h in handles]
        entry = max(_text_width(self.renderer, t) for t in labels) + 4.8 * FONT
        columns = max(1, min(len(labels), int(width * 72 // entry)))
        box = self.figure.legend(
            list(handles),
            labels,
            loc="upper left",
            ncols=columns,
            alignment="left",
            borderaxespad=0.0,
        )
        box.set_gid("legend")
        return box


def _proxy_marker(i: int, name: str, filled: bool = True) -> Line2D:
    return Line2D(
        [],
        [],
        linestyle="none",
        marker=MARKERS[i % len(MARKERS)],
        color=PALETTE[i % len(PALETTE)],
        markerfacecolor=PALETTE[i % len(PALETTE)] if filled else "white",
        label=_label(name),
    )


def _proxy_patch(i: int, name: str) -> Patch:
    return Patch(
        facecolor=PALETTE[i % len(PALETTE)],
        hatch=HATCHES[i % len(HATCHES)],
        edgecolor="black",
        linewidth=0.4,
        label=_label(name),
    )


def _facets(chart: Chart) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) per facet in order of first appearance; one untitled facet without."""
    key = chart.options.get("facet")
    frame = chart.data
    if not key or key not in frame:
        return [("", frame)]
    return [(str(name), frame[frame[key] == name]) for name in _order(frame[key])]


def _rows(ax: Axes, labels: Sequence[Any]) -> dict[Any, int]:
    """Categorical rows top to bottom; returns value -> row position."""
    ax.set_yticks(range(len(labels)), [_label(v) for v in labels])
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="y", visible=False)
    return {v: i for i, v in enumerate(labels)}


def _rate_axis(ax: Axes, title: str | None = None) -> None:
    """A [0, 1] axis: x by default, y (with ``title``) when a title is given."""
    ticks, names = [0.0, 0.25, 0.5, 0.75, 1.0], ["0", "0.25", "0.5", "0.75", "1"]
    if title is None:
        ax.set_xlim(-0.03, 1.03)
        ax.set_xticks(ticks, names)
    else:
        ax.set_ylim(-0.03, 1.03)
        ax.set_yticks(ticks, names)
        ax.set_ylabel(_label(title))


def _err(rates: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> Any:
    r, lo, hi = (np.asarray(v, dtype=float) for v in (rates, lows, highs))
    return np.vstack(
        [np.nan_to_num(r - lo, nan=0.0).clip(min=0), np.nan_to_num(hi - r, nan=0.0).clip(min=0)]
    )


def _proportion(rows: list[dict[str, Any]], prefix: str) -> tuple[list[float], Any]:
    """Rates (NaN when not measured) and their interval as error-bar lengths."""
    rates = [_format.proportion_rate(r, prefix) for r in rows]
    values = [math.nan if v is None else v for v in rates]
    lows = [
        math.nan if _format.is_missing(r.get(f"{prefix}_low")) else float(r[f"{prefix}_low"])
        for r in rows
    ]
    highs = [
        math.nan if _format.is_missing(r.get(f"{prefix}_high")) else float(r[f"{prefix}_high"])
        for r in rows
    ]
    return values, _err(values, lows, highs)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def _bottom_axis(stack: _Stack, title: str) -> None:
    stack.panels[-1][0].set_xlabel(_label(title))


# ------------------------------------------------------------------------- kinds


def _dots(chart: Chart) -> Figure:
    """Points with intervals, one row per label, one dodged marker per series."""
    options = chart.options
    series = [(str(p), str(n)) for p, n in options["series"]]
    step = min(0.22, 0.7 / max(1, len(series)))
    row = max(0.28, 0.12 * len(series) + 0.06)
    stack = _Stack()
    for title, group in _facets(chart):
        labels = _order(group[options["label"]])
        ax = stack.panel(title, row * len(labels) + 0.1)
        position = _rows(ax, labels)
        records = _records(group)
        for s, (prefix, _) in enumerate(series):
            y = [
                position[r[options["label"]]] + (s - (len(series) - 1) / 2) * step for r in records
            ]
            rates, err = _proportion(records, prefix)
            ax.errorbar(
                rates,
                y,
                xerr=err,
                fmt=MARKERS[s % len(MARKERS)],
                color=PALETTE[s % len(PALETTE)],
                markerfacecolor="white" if s == 0 else PALETTE[s % len(PALETTE)],
                markersize=5,
                capsize=2,
                linewidth=1,
            )
        _rate_axis(ax)
    _bottom_axis(stack, options.get("axis", RATE_AXIS))
    handles = [_proxy_marker(s, name, filled=s != 0) for s, (_, name) in enumerate(series)]
    return stack.finish(handles)


def _forest(chart: Chart) -> Figure:
    """Differences with intervals, one row per comparison; filled markers where ``filled``."""
    options = chart.options
    names = tuple(options.get("legend", ("significant", "not significant")))
    frame = chart.data
    values = pd.concat([frame[options[k]] for k in ("value", "low", "high")]).astype(float)
    finite = values[np.isfinite(values)]
    bound = max(0.1, float(finite.abs().max()) if len(finite) else 1.0) * 1.08
    if bound <= 1.2:  # differences of rates: never wider than [-1, 1] needs
        bound = min(bound, 1.05)
    stack = _Stack()
    kinds: set[bool] = set()
    for title, group in _facets(chart):
        labels = _order(group[options["label"]])
        ax = stack.panel(title, 0.28 * len(labels) + 0.1)
        position = _rows(ax, labels)
        y = np.array([position[v] for v in group[options["label"]]], dtype=float)
        x = group[options["value"]].to_numpy(dtype=float)
        err = _err(x, group[options["low"]].to_numpy(float), group[options["high"]].to_numpy(float))
        filled = np.array([_format.truthy(v) for v in group[options["filled"]]], dtype=bool)
        for mask, face in ((filled, PALETTE[5]), (~filled, "white")):
            if mask.any():
                kinds.add(face != "white")
                ax.errorbar(
                    x[mask],
                    y[mask],
                    xerr=err[:, mask],
                    fmt="o",
                    color=PALETTE[5],
                    markerfacecolor=face,
                    capsize=2,
                    linewidth=1,
                )
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlim(-bound, bound)
        ax.xaxis.set_major_locator(MaxNLocator(7, symmetric=True))
    _bottom_axis(stack, options.get("axis", ""))
    handles = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            color=PALETTE[5],
            markerfacecolor=PALETTE[5] if fill else "white",
            label=_label(names[0] if fill else names[1]),
        )
        for fill in (True, False)
        if fill in kinds
    ]
    return stack.finish(handles)


def _cell_text(value: Any) -> str:
    missing = value is None or (not isinstance(value, str) and _format.is_missing(value))
    return "" if missing else _format.shorten(value, 16)


def _heatmap(chart: Chart) -> Figure:
    """Rates as colours, one cell per (row, column), each cell annotated with ``text``."""
    options = chart.options
    frame = chart.data
    columns = _order(frame[options["column"]])
    stack = _Stack()
    texts = [_cell_text(t) for t in frame[options["text"]]]
    cell = max(0.5, max(_text_width(stack.renderer, t) for t in texts) / 72 + 0.14)
    tick_width = max(_text_width(stack.renderer, _label(c)) for c in columns) / 72
    stack.axes_width = cell * len(columns)
    image: Any = None
    facets = _facets(chart)
    for f, (title, group) in enumerate(facets):
        labels = _order(group[options["row"]])
        ax = stack.panel(title, 0.32 * len(labels))
        ax.grid(False)
        ax.set_facecolor("#eeeeee")
        grid = np.full((len(labels), len(columns)), np.nan)
        records = _records(group)
        for r in records:
            value = r[options["value"]]
            if not _format.is_missing(value):
                grid[labels.index(r[options["row"]]), columns.index(r[options["column"]])] = value
        image = ax.pcolormesh(
            np.arange(len(columns) + 1) - 0.5,
            np.arange(len(labels) + 1) - 0.5,
            np.ma.masked_invalid(grid),
            vmin=0,
            vmax=1,
            cmap="cividis",
            edgecolors="white",
            linewidth=0.8,
        )
        _rows(ax, labels)
        ax.set_xlim(-0.5, len(columns) - 0.5)
        for r in records:
            text = _cell_text(r[options["text"]])
            i, j = labels.index(r[options["row"]]), columns.index(r[options["column"]])
            value = grid[i, j]
            light = np.isnan(value) or value > 0.55
            ax.text(j, i, text, ha="center", va="center", color="black" if light else "white")
        ax.tick_params(axis="x", length=0)
        if f == len(facets) - 1:
            vertical = tick_width > cell - 0.06
            ax.set_xticks(
                range(len(columns)),
                [_label(c) for c in columns],
                rotation=90 if vertical else 0,
                ha="center",
            )
        else:
            ax.set_xticks([])

    def side(first: Axes) -> None:
        size = stack.figure.get_size_inches()
        box = first.get_position()
        height = min(2.4, box.height * size[1])
        cax = stack.figure.add_axes(
            (box.x1 + 0.25 / size[0], box.y1 - height / size[1], 0.16 / size[0], height / size[1])
        )
        bar = stack.figure.colorbar(image, cax=cax)
        if bar.solids is not None:
            bar.solids.set_rasterized(False)  # vector, not an embedded PNG
        bar.set_label(_label(options.get("axis", "share passing")))

    return stack.finish(side=side)


def _bars(chart: Chart) -> Figure:
    """Horizontal bars of a proportion with intervals: one row per group, one bar per series."""
    options = chart.options
    prefix = options["prefix"]
    names = _order(chart.data[options["series"]])
    height = 0.8 / len(names)
    stack = _Stack()
    for title, group in _facets(chart):
        labels = _order(group[options["group"]])
        ax = stack.panel(title, max(0.3, 0.15 * len(names) + 0.08) * len(labels))
        position = _rows(ax, labels)
        for s, name in enumerate(names):
            records = _records(group[group[options["series"]] == name])
            if not records:
                continue
            y = [position[r[options["group"]]] - 0.4 + height * (s + 0.5) for r in records]
            rates, err = _proportion(records, prefix)
            ax.barh(
                y,
                np.nan_to_num(np.asarray(rates, dtype=float)),
                height,
                xerr=err,
                capsize=1.5,
                color=PALETTE[s % len(PALETTE)],
                hatch=HATCHES[s % len(HATCHES)],
                edgecolor="black",
                linewidth=0.4,
                error_kw={"linewidth": 0.7},
            )
        _rate_axis(ax)
    _bottom_axis(stack, options.get("axis", RATE_AXIS))
    return stack.finish([_proxy_patch(s, str(n)) for s, n in enumerate(names)])


def _stacked(chart: Chart) -> Figure:
    """Counts stacked left to right, one bar per label; every part is in the legend."""
    options = chart.options
    parts = [(str(c), str(n)) for c, n in options["parts"]]
    stack = _Stack()
    frame = chart.data
    labels = _order(frame[options["label"]])
    ax = stack.panel("", 0.3 * len(labels) + 0.1)
    position = _rows(ax, labels)
    y = [position[v] for v in frame[options["label"]]]
    left = np.zeros(len(frame))
    for c, (column, _) in enumerate(parts):
        values = np.nan_to_num(frame[column].to_numpy(dtype=float))
        ax.barh(
            y,
            values,
            left=left,
            color=PALETTE[c % len(PALETTE)],
            hatch=HATCHES[c % len(HATCHES)],
            edgecolor="black",
            linewidth=0.4,
        )
        left += values
    ax.set_xlim(0, max(1.0, float(left.max(initial=0)) * 1.05))
    ax.xaxis.set_major_locator(MaxNLocator(8, integer=True))
    _bottom_axis(stack, options.get("axis", "count"))
    return stack.finish([_proxy_patch(c, name) for c, (_, name) in enumerate(parts)])


def _curve(chart: Chart) -> Figure:
    """A proportion against ``x``, one line per series; coinciding series are dodged."""
    options = chart.options
    frame = chart.data
    prefix, x_key, key = options["prefix"], options["x"], options["series"]
    names = _order(frame[key])
    xs = sorted(float(v) for v in _order(frame[x_key]) if not _format.is_missing(v))
    log = options.get("x_log")
    if log is None:
        log = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] >= 4
    spacing = min((b - a for a, b in itertools.pairwise(xs)), default=1.0) if not log else 1.0
    stack = _Stack(axes_width=6.0)
    for title, group in _facets(chart):
        ax = stack.panel(title, 2.4)
        for s, name in enumerate(names):
            rows = group[group[key] == name].sort_values(x_key)
            if rows.empty:
                continue
            records = _records(rows)
            rates, err = _proportion(records, prefix)
            shift = (s - (len(names) - 1) / 2) * min(0.04, 0.2 / len(names))
            x = rows[x_key].to_numpy(dtype=float)
            x = x * 2**shift if log else x + shift * spacing
            ax.errorbar(
                x,
                rates,
                yerr=err,
                marker=MARKERS[s % len(MARKERS)],
                color=PALETTE[s % len(PALETTE)],
                linestyle=LINESTYLES[(s // len(PALETTE)) % len(LINESTYLES)],
                markerfacecolor="white" if (s // len(PALETTE)) % 2 else PALETTE[s % len(PALETTE)],
                capsize=2,
                linewidth=1.2,
                markersize=5,
            )
        if log:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        if xs:
            ax.set_xticks(xs, [_format.number(v, 0 if float(v).is_integer() else 2) for v in xs])
            pad = 0.25 if log else 0.25 * spacing
            ax.set_xlim(
                xs[0] / 2**pad if log else xs[0] - pad, xs[-1] * 2**pad if log else xs[-1] + pad
            )
        _rate_axis(ax, options.get("axis", "share passing"))
    _bottom_axis(stack, options.get("x_title", ""))
    handles = [
        Line2D(
            [],
            [],
            marker=MARKERS[s % len(MARKERS)],
            color=PALETTE[s % len(PALETTE)],
            linestyle=LINESTYLES[(s // len(PALETTE)) % len(LINESTYLES)],
            markerfacecolor="white" if (s // len(PALETTE)) % 2 else PALETTE[s % len(PALETTE)],
            label=_label(n),
        )
        for s, n in enumerate(names)
    ]
    return stack.finish(handles)


_KINDS: dict[str, Callable[[Chart], Figure]] = {
    "dots": _dots,
    "forest": _forest,
    "heatmap": _heatmap,
    "bars": _bars,
    "stacked": _stacked,
    "curve": _curve,
}


# ---------------------------------------------------------------------------- SVG


def _svg(figure: Figure, salt: str, title: str) -> str:
    """The figure as an inline <svg> (no prolog, no metadata, no date, unique ids).

    Ids are prefixed with a hash of the chart id and the drawing, so several charts
    share a page and the same data give the same bytes.  The size is set in CSS
    pixels, and a minimum width keeps a chart legible on a narrow window (its figure
    scrolls instead).
    """
    buffer = io.StringIO()
    with matplotlib.rc_context(cast(Any, _RC | {"svg.hashsalt": salt})):
        figure.savefig(
            buffer, format="svg", bbox_inches="tight", pad_inches=0.08, metadata={"Date": None}
        )
    text = buffer.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.find("<svg") :], flags=re.DOTALL)
    prefix = "c" + hashlib.sha256(f"{salt}\n{svg}".encode()).hexdigest()[:8] + "-"
    svg = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(
        r'((?:xlink:)?href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"', svg
    )
    size = re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    assert size is not None, "matplotlib wrote an SVG without a size in points"
    width, height = (float(v) * 4 / 3 for v in size.groups())
    label = title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return svg.replace(
        size.group(0),
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{label}" '
        f'class="chart" style="min-width: {min(width, 640.0):.0f}px"',
        1,
    )


def draw(chart: Chart) -> Figure | None:
    """The chart as a matplotlib figure in the report's style; None when its data hold
    no row."""
    if chart.data.empty:
        return None
    with matplotlib.rc_context(cast(Any, _RC)):
        try:
            return _KINDS[chart.kind](chart)
        except KeyError as error:  # say which chart lacks which option or column
            raise ValueError(f"chart {chart.id!r} ({chart.kind}): no {error}") from error


def render(chart: Chart) -> str | None:
    """The chart as an inline <svg> element; None when its data hold no row."""
    figure = draw(chart)
    return (
        None if figure is None else _svg(figure, chart.id, _format.visible(chart.title or chart.id))
    )
