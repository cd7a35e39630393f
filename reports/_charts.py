"""Charts as inline SVG, written from the numbers: one drawing per ``Chart`` kind.

No plotting library: matplotlib cost more than a second of every report (its import,
two layout passes and a tight bounding box per chart).  Layout is measured, not
guessed: a text's width is the sum of its characters' advance widths in DejaVu Sans
(``_ADVANCE``), so titles wrap and labels are placed before the panels (stacked top to
bottom), and nothing of one panel overlaps the next; the legend below names every
series declared, and the SVG is as large as what it holds plus a margin.

Every string passes ``visible`` and is escaped; labels are cut to ``LABEL_MAX``.  Ids
carry a hash of the chart id and the drawing and nothing carries a date, so the same
data give the same bytes.  Colours are Okabe-Ito (colour-blind safe), each series also
differs in marker, line style or hatch (grey-scale print), heatmap rates are on cividis.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import pandas as pd

from reports import _format
from reports._document import Chart

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "<", ">", "h", "p")
LINESTYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
HATCHES = ("", "//", "\\\\", "xx", "||", "--", "++", "/-")
"""Straight lines only, one small tile each (defined once per chart): a dotted or
circled tile is many curves a bar."""

FONT = 9.0
"""Points (12 CSS px); the SVG is shown at its natural size, so this is the size on screen."""
LABEL_MAX = 90
"""Characters of a tick or legend label; longer ones are cut (``...``)."""
RATE_AXIS = "share passing (95 % interval)"

PT = 4 / 3
"""CSS pixels per point: the drawing's unit is the pixel."""
INCH = 96.0
SIZE = FONT * PT
TITLE_SIZE = (FONT + 1) * PT
WIDTH = 10.0 * INCH
"""Pixels a chart aims at: whole in a 1280 px window."""
AXES_MIN, AXES_MAX = 3.5 * INCH, 6.5 * INCH
GAP = 0.22 * INCH
"""Between one panel's lowest text and the next panel's title."""
MARGIN = 0.08 * INCH
TICK = 3.5 * PT
"""A tick's length, and the room between a tick and its label."""
ASCENT, DESCENT = 1901 / 2048, 483 / 2048
"""DejaVu Sans, in ems: a text's box spans ascent above its baseline, descent below."""
_ADVANCE = (
    651, 821, 942, 1716, 1303, 1946, 1597, 563, 799, 799, 1024, 1716, 651, 739, 651, 690,
    1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 690, 690, 1716, 1716, 1716,
    1087, 2048, 1401, 1405, 1430, 1577, 1294, 1178, 1587, 1540, 604, 604, 1343, 1141, 1767,
    1532, 1612, 1235, 1612, 1423, 1300, 1251, 1499, 1401, 2025, 1403, 1251, 1403, 799, 690,
    799, 1716, 1024, 1024, 1255, 1300, 1126, 1300, 1260, 721, 1300, 1298, 569, 569, 1186,
    569, 1995, 1298, 1253, 1300, 1300, 842, 1067, 803, 1298, 1212, 1675, 1212, 1212, 1075,
    1303, 690, 1303, 1716,
)  # fmt: skip
"""Advance widths of DejaVu Sans (1/2048 em) of the characters 32 to 126."""
_OTHER_ADVANCE = 1700
"""Any other character: wider than all but a few of DejaVu Sans' (a wide East Asian
one is a whole em)."""
SPARE = 1.06
"""Room for a renderer that rounds each advance to a pixel (matplotlib measures these
texts 4 to 7 % wider) or lacks the font."""
_CIVIDIS = (
    "#00224e", "#00285b", "#002e6a", "#053371", "#1a386f", "#273e6e", "#32436d", "#3b496c",
    "#434e6c", "#4b546c", "#535a6d", "#5a5f6e", "#61656f", "#686a71", "#6f7073", "#767676",
    "#7d7c78", "#848279", "#8c8878", "#938e78", "#9b9476", "#a39a74", "#aba072", "#b4a76f",
    "#bcae6c", "#c4b468", "#cdbb63", "#d5c25e", "#dec958", "#e7d150", "#f0d846", "#f9e03a",
    "#fee838",
)  # fmt: skip
"""The cividis colour map at 0, 1/32, ..., 1 (linear between them)."""
_HATCH_PATHS = {
    "//": "M-1 1L1-1M0 6L6 0M5 7L7 5",
    "\\\\": "M-1 5L1 7M0 0L6 6M5-1L7 1",
    "xx": "M-1 1L1-1M0 6L6 0M5 7L7 5M-1 5L1 7M0 0L6 6M5-1L7 1",
    "||": "M3 0V6",
    "--": "M0 3H6",
    "++": "M3 0V6M0 3H6",
    "/-": "M-1 1L1-1M0 6L6 0M5 7L7 5M0 3H6",
}
"""Each hatch as the path of a 6 px tile."""
_DASHES = {"-": None, "--": (3.7, 1.6), ":": (1.0, 1.65), "-.": (6.4, 1.6, 1.0, 1.6)}
"""Dash patterns in line widths."""


def _label(value: object) -> str:
    return _format.shorten(value, LABEL_MAX)


def _order(values: Sequence[Any] | pd.Series) -> list[Any]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def _rows(values: Sequence[Any] | pd.Series) -> tuple[dict[Any, int], list[str]]:
    """Each distinct value's row (in order of first appearance), and the rows' labels."""
    labels = _order(values)
    return {v: i for i, v in enumerate(labels)}, [str(v) for v in labels]


def text_width(text: str, size: float = SIZE) -> float:
    """Pixels a one-line text takes at ``size`` px, with ``SPARE`` to spare."""
    total = 0
    for char in text:
        code = ord(char)
        if 32 <= code < 127:
            total += _ADVANCE[code - 32]
        elif unicodedata.combining(char):
            continue
        elif unicodedata.east_asian_width(char) in ("W", "F"):
            total += 2048
        else:
            total += _OTHER_ADVANCE
    return total / 2048 * size * SPARE


def _wrap(text: str, width: float, size: float) -> list[str]:
    """Lines of ``text`` no wider than ``width`` px, broken at spaces (a word wider than
    a line on lines of its own, broken anywhere)."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if text_width(candidate, size) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
            line = ""
        while text_width(word, size) > width and len(word) > 1:
            cut = len(word) - 1
            while cut > 1 and text_width(word[:cut], size) > width:
                cut -= 1
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    if line or not lines:
        lines.append(line)
    return lines


def _number(value: float) -> str:
    return f"{value:.6g}"


def _minus(text: str) -> str:
    """A negative tick label with a typographic minus."""
    return "\u2212" + text[1:] if text.startswith("-") else text


def _colour(value: float) -> str:
    """A rate in [0, 1] on cividis."""
    position = max(0.0, min(1.0, value)) * (len(_CIVIDIS) - 1)
    low = min(int(position), len(_CIVIDIS) - 2)
    share = position - low
    a, b = _CIVIDIS[low], _CIVIDIS[low + 1]
    rgb = [
        round(int(a[i : i + 2], 16) * (1 - share) + int(b[i : i + 2], 16) * share)
        for i in (1, 3, 5)
    ]
    return "#" + "".join(f"{c:02x}" for c in rgb)


# ------------------------------------------------------------------------ drawing


@dataclass
class Plotted:
    """One series as drawn: its name, style and points (pixels, NaN where none)."""

    name: str
    style: tuple[str, str, str]
    """(marker, colour, line style)."""
    points: list[tuple[float, float]]


@dataclass
class PanelBox:
    """A panel (facet) as placed: its title lines and its plotting area in pixels."""

    title: list[str]
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass
class Drawing:
    """A chart as SVG elements, with what was drawn for checks (panels, series)."""

    items: list[str] = field(default_factory=list)
    hatches: list[str] = field(default_factory=list)
    panels: list[PanelBox] = field(default_factory=list)
    series: list[Plotted] = field(default_factory=list)
    box: list[float] = field(default_factory=lambda: [math.inf, math.inf, -math.inf, -math.inf])

    def _extend(self, x0: float, y0: float, x1: float, y1: float) -> None:
        box = self.box
        box[0], box[1] = min(box[0], x0), min(box[1], y0)
        box[2], box[3] = max(box[2], x1), max(box[3], y1)

    def text(
        self,
        x: float,
        y: float,
        text: str,
        *,
        size: float = SIZE,
        anchor: Literal["start", "middle", "end"] = "start",
        align: Literal["center", "top", "bottom"] = "center",
        vertical: bool = False,
        color: str | None = None,
    ) -> None:
        """A text; ``(x, y)``: where ``anchor`` of it is, and ``align`` of its box (the
        box of a ``vertical`` text, which reads upwards, is centred on ``x``)."""
        text = _format.visible(text)
        if not text:
            return
        width = text_width(text, size)
        shift = {"start": 0.0, "middle": width / 2, "end": width}[anchor]
        fill = f' fill="{color}"' if color else ""
        size_attr = "" if size == SIZE else f' font-size="{_number(size)}"'
        anchor_attr = "" if anchor == "start" else f' text-anchor="{anchor}"'
        body = html.escape(text, quote=False)
        if vertical:
            base = x + (ASCENT - DESCENT) / 2 * size
            self._extend(base - ASCENT * size, y - width + shift, base + DESCENT * size, y + shift)
            self.items.append(
                f'<text x="{_number(base)}" y="{_number(y)}" transform="rotate(-90 '
                f'{_number(base)} {_number(y)})"{anchor_attr}{size_attr}{fill}>{body}</text>'
            )
            return
        base = {
            "center": y + (ASCENT - DESCENT) / 2 * size,
            "top": y + ASCENT * size,
            "bottom": y - DESCENT * size,
        }[align]
        self._extend(x - shift, base - ASCENT * size, x - shift + width, base + DESCENT * size)
        self.items.append(
            f'<text x="{_number(x)}" y="{_number(base)}"{anchor_attr}{size_attr}{fill}>'
            f"{body}</text>"
        )

    def path(
        self,
        points: Sequence[tuple[float, float]],
        color: str,
        width: float,
        dash: Sequence[float] | None = None,
    ) -> None:
        """An open line through ``points``."""
        if len(points) < 2:
            return
        d = "M" + "L".join(f"{_number(x)} {_number(y)}" for x, y in points)
        dashes = f' stroke-dasharray="{",".join(_number(v * width) for v in dash)}"' if dash else ""
        self.items.append(
            f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{_number(width)}"{dashes}/>'
        )
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        self._extend(min(xs), min(ys), max(xs), max(ys))

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        fill: str,
        edge: str | None = None,
        edge_width: float = 0.4 * PT,
        hatch: str = "",
    ) -> None:
        if w <= 0 or h <= 0:
            return
        stroke = f' stroke="{edge}" stroke-width="{_number(edge_width)}"' if edge else ""
        where = f'x="{_number(x)}" y="{_number(y)}" width="{_number(w)}" height="{_number(h)}"'
        self.items.append(f'<rect {where} fill="{fill}"{stroke}/>')
        if hatch:
            if hatch not in self.hatches:
                self.hatches.append(hatch)
            self.items.append(f'<rect {where} fill="url(#@@h{self.hatches.index(hatch)})"/>')
        self._extend(x, y, x + w, y + h)

    def marker(self, kind: str, x: float, y: float, color: str, face: str, size: float) -> None:
        """A marker of ``size`` px across, edged in ``color``, filled with ``face``."""
        r = size / 2
        if kind == "o":
            d = (
                f"M{_number(x - r)} {_number(y)}a{_number(r)} {_number(r)} 0 1 0 {_number(2 * r)} "
                f"0a{_number(r)} {_number(r)} 0 1 0 {_number(-2 * r)} 0z"
            )
        else:
            corners = [(x + px * r, y + py * r) for px, py in _SHAPES[kind]]
            d = "M" + "L".join(f"{_number(a)} {_number(b)}" for a, b in corners) + "z"
        self.items.append(
            f'<path d="{d}" fill="{face}" stroke="{color}" stroke-width="{_number(PT)}"/>'
        )
        self._extend(x - r, y - r, x + r, y + r)

    def error(
        self, x0: float, y0: float, x1: float, y1: float, color: str, width: float, cap: float
    ) -> None:
        """An error bar from (x0, y0) to (x1, y1) (horizontal or vertical), capped."""
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
            return
        horizontal = y0 == y1
        d = f"M{_number(x0)} {_number(y0)}L{_number(x1)} {_number(y1)}"
        for x, y in ((x0, y0), (x1, y1)):
            if horizontal:
                d += f"M{_number(x)} {_number(y - cap)}V{_number(y + cap)}"
            else:
                d += f"M{_number(x - cap)} {_number(y)}H{_number(x + cap)}"
        self.items.append(
            f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{_number(width)}"/>'
        )
        self._extend(min(x0, x1) - cap, min(y0, y1) - cap, max(x0, x1) + cap, max(y0, y1) + cap)


def _polygon(corners: int, start: float, inner: float | None = None) -> list[tuple[float, float]]:
    """A regular polygon (a star with ``inner`` radius), radius 1, first corner at ``start``
    degrees (0: up)."""
    points = []
    steps = corners * 2 if inner else corners
    for i in range(steps):
        angle = math.radians(start + 360 * i / steps)
        radius = inner if inner and i % 2 else 1.0
        points.append((radius * math.sin(angle), -radius * math.cos(angle)))
    return points


_SHAPES: dict[str, list[tuple[float, float]]] = {
    "s": [(-0.8, -0.8), (0.8, -0.8), (0.8, 0.8), (-0.8, 0.8)],
    "D": [(0, -1), (0.8, 0), (0, 1), (-0.8, 0)],
    "^": _polygon(3, 0),
    "v": _polygon(3, 180),
    "<": _polygon(3, 270),
    ">": _polygon(3, 90),
    "P": [(-0.33, -1), (0.33, -1), (0.33, -0.33), (1, -0.33), (1, 0.33), (0.33, 0.33),
          (0.33, 1), (-0.33, 1), (-0.33, 0.33), (-1, 0.33), (-1, -0.33), (-0.33, -0.33)],
    "X": [(r * x - s * y, s * x + r * y) for x, y in
          [(-0.33, -1), (0.33, -1), (0.33, -0.33), (1, -0.33), (1, 0.33), (0.33, 0.33),
           (0.33, 1), (-0.33, 1), (-0.33, 0.33), (-1, 0.33), (-1, -0.33), (-0.33, -0.33)]
          for r, s in [(math.cos(math.pi / 4), math.sin(math.pi / 4))]],
    "*": _polygon(5, 0, 0.4),
    "h": _polygon(6, 0),
    "p": _polygon(5, 0),
}  # fmt: skip


# ------------------------------------------------------------------------ panels


@dataclass
class _Scale:
    """Data to pixels along one axis: ``low`` maps to ``start``, ``high`` to ``end``."""

    low: float
    high: float
    log: bool = False
    start: float = 0.0
    end: float = 1.0

    def __call__(self, value: float) -> float:
        v = math.log2(value) if self.log else value
        low, high = (
            (math.log2(self.low), math.log2(self.high)) if self.log else (self.low, self.high)
        )
        return self.start + (v - low) / (high - low) * (self.end - self.start)


Plot = Callable[[Drawing, _Scale, _Scale], None]


@dataclass
class _Panel:
    """One facet: its plotting area's height, axes, grid and what it draws."""

    title: str
    height: float
    x: _Scale
    x_ticks: list[tuple[float, str]]
    plot: Plot
    rows: list[str] | None = None
    """Categorical rows, top to bottom (a y axis of labels); else a numeric y axis."""
    y: _Scale | None = None
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_title: str = ""
    x_tick_marks: bool = True
    x_labels: bool = True
    x_vertical: bool = False
    grid_x: bool = True
    grid_y: bool = False
    background: str | None = None


@dataclass
class _Entry:
    """A legend entry: its name and how its handle is drawn."""

    name: str
    kind: Literal["marker", "patch", "line"]
    color: str
    face: str = ""
    marker: str = "o"
    hatch: str = ""
    dash: str = "-"


def _y_label_width(panel: _Panel) -> float:
    labels = panel.rows if panel.rows is not None else [t for _, t in panel.y_ticks]
    width = max((text_width(_label(t)) for t in labels), default=0.0)
    width += TICK if panel.rows is not None else 2 * TICK
    if panel.y_title:
        width += (ASCENT + DESCENT) * SIZE + TICK
    return width


def _x_label_height(panel: _Panel) -> float:
    if not panel.x_labels or not panel.x_ticks:
        return 0.0
    room = 2 * TICK if panel.x_tick_marks else TICK
    if panel.x_vertical:
        return room + max(text_width(t) for _, t in panel.x_ticks)
    return room + (ASCENT + DESCENT) * SIZE


def _compose(
    panels: Sequence[_Panel],
    x_title: str = "",
    legend: Sequence[_Entry] = (),
    axes_width: float | None = None,
    side: Callable[[Drawing, PanelBox], None] | None = None,
) -> Drawing:
    """Place the panels top to bottom, draw each, then the legend below."""
    drawing = Drawing()
    left = max(_y_label_width(p) for p in panels)
    width = axes_width or min(AXES_MAX, max(AXES_MIN, WIDTH - left - 0.3 * INCH))
    x0, x1 = left, left + width
    top = 0.0
    for index, panel in enumerate(panels):
        title = _wrap(_label(panel.title), width, TITLE_SIZE) if panel.title else []
        line = TITLE_SIZE * (ASCENT + DESCENT)
        for number, text in enumerate(title):
            drawing.text(x0, top + number * line, text, size=TITLE_SIZE, align="top")
        if title:
            top += len(title) * line + 6 * PT
        box = PanelBox(title, x0, top, x1, top + panel.height)
        _draw_panel(drawing, panel, box)
        drawing.panels.append(box)
        top = box.y1 + _x_label_height(panel)
        if index == len(panels) - 1 and x_title:
            drawing.text((x0 + x1) / 2, top + TICK, _label(x_title), anchor="middle", align="top")
            top += TICK + (ASCENT + DESCENT) * SIZE
        top += GAP
    if side is not None:
        side(drawing, drawing.panels[0])
    if legend:
        _legend(drawing, legend, top - GAP + 0.1 * INCH)
    return drawing


def _draw_panel(drawing: Drawing, panel: _Panel, box: PanelBox) -> None:
    x = _Scale(panel.x.low, panel.x.high, panel.x.log, box.x0, box.x1)
    if panel.rows is not None:
        y = _Scale(-0.5, len(panel.rows) - 0.5, False, box.y0, box.y1)
    else:
        assert panel.y is not None
        y = _Scale(panel.y.low, panel.y.high, False, box.y1, box.y0)
    if panel.background:
        drawing.rect(box.x0, box.y0, box.x1 - box.x0, box.y1 - box.y0, panel.background)
    grid = "#dddddd"
    if panel.grid_x:
        for value, _ in panel.x_ticks:
            drawing.path([(x(value), box.y0), (x(value), box.y1)], grid, 0.6 * PT)
    if panel.grid_y:
        for value, _ in panel.y_ticks:
            drawing.path([(box.x0, y(value)), (box.x1, y(value))], grid, 0.6 * PT)
    panel.plot(drawing, x, y)
    spine = 0.8 * PT
    drawing.path([(box.x0, box.y0), (box.x0, box.y1), (box.x1, box.y1)], "#000000", spine)
    if panel.rows is not None:
        for row, name in enumerate(panel.rows):
            drawing.text(box.x0 - TICK, y(row), _label(name), anchor="end")
    else:
        for value, text in panel.y_ticks:
            drawing.path([(box.x0 - TICK, y(value)), (box.x0, y(value))], "#000000", spine)
            drawing.text(box.x0 - 2 * TICK, y(value), text, anchor="end")
        if panel.y_title:
            left = box.x0 - 2 * TICK - max(text_width(t) for _, t in panel.y_ticks) - TICK
            at, middle = left - (ASCENT + DESCENT) * SIZE / 2, (box.y0 + box.y1) / 2
            drawing.text(at, middle, _label(panel.y_title), anchor="middle", vertical=True)
    below = box.y1 + (2 * TICK if panel.x_tick_marks else TICK)
    last = -math.inf
    for value, text in panel.x_ticks:
        at = x(value)
        if panel.x_tick_marks:
            drawing.path([(at, box.y1), (at, box.y1 + TICK)], "#000000", spine)
        if not panel.x_labels:
            continue
        if panel.x_vertical:
            drawing.text(at, below, text, anchor="end", vertical=True)
            continue
        half = text_width(text) / 2
        if at - half < last + TICK:  # would overlap the label before it
            continue
        drawing.text(at, below, text, anchor="middle", align="top")
        last = at + half


def _legend(drawing: Drawing, entries: Sequence[_Entry], top: float) -> None:
    """Entries in as many columns as fit the drawing's width, row by row, in a group."""
    handle, pad, spacing, row = 2.0 * SIZE, 0.8 * SIZE, 2.0 * SIZE, 1.7 * SIZE
    names = [_label(e.name) for e in entries]
    entry = max(text_width(n) for n in names) + handle + pad
    left, right = drawing.box[0], drawing.box[2]
    columns = max(1, min(len(entries), int((right - left + spacing) // (entry + spacing))))
    start = len(drawing.items)
    for index, (item, name) in enumerate(zip(entries, names, strict=True)):
        x = left + (index % columns) * (entry + spacing)
        y = top + (index // columns) * row + row / 2
        middle = x + handle / 2
        if item.kind == "patch":
            drawing.rect(
                x, y - 0.35 * SIZE, handle, 0.7 * SIZE, item.color, "#000000", hatch=item.hatch
            )
        else:  # a line is drawn under its marker
            if item.kind == "line":
                drawing.path([(x, y), (x + handle, y)], item.color, 1.2 * PT, _DASHES[item.dash])
            drawing.marker(item.marker, middle, y, item.color, item.face, 5 * PT)
        drawing.text(x + handle + pad, y, name)
    drawing.items[start:] = ['<g id="@@legend">', *drawing.items[start:], "</g>"]


# ------------------------------------------------------------------------- ticks


def _nice_step(span: float, bins: int, integer: bool = False) -> float:
    """The smallest step of 1, 2, 2.5 or 5 times a power of ten (whole numbers only when
    ``integer``) that splits ``span`` into at most ``bins`` parts."""
    raw = span / bins
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * power
        if step >= raw * (1 - 1e-9) and (not integer or float(step).is_integer()):
            return step
    return 10 * power


def _ticks(low: float, high: float, bins: int, integer: bool = False) -> list[tuple[float, str]]:
    """Ticks at multiples of a nice step inside [low, high], labelled with the decimals
    the step needs (all alike)."""
    step = _nice_step(high - low, bins, integer)
    if integer:
        step = max(1.0, step)
    decimals = 0 if integer else max(0, -math.floor(math.log10(step) + 1e-9))
    if not integer and not float(round(step * 10**decimals, 9)).is_integer():
        decimals += 1
    first = math.ceil(low / step - 1e-9)
    out = []
    for k in itertools.count(first):
        value = k * step
        if value > high + 1e-9 * step:
            break
        value = 0.0 if abs(value) < 1e-12 else value
        out.append((value, _minus(f"{value:.{decimals}f}")))
    return out


RATE_TICKS = [(0.0, "0"), (0.25, "0.25"), (0.5, "0.5"), (0.75, "0.75"), (1.0, "1")]
RATE = _Scale(-0.03, 1.03)


# ------------------------------------------------------------------------- data


def _facets(chart: Chart) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) per facet in order of first appearance; one untitled facet without."""
    key = chart.options.get("facet")
    frame = chart.data
    if not key or key not in frame:
        return [("", frame)]
    return [(str(name), frame[frame[key] == name]) for name in _order(frame[key])]


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def _float(value: Any) -> float:
    return math.nan if _format.is_missing(value) else float(value)


def _proportion(row: dict[str, Any], prefix: str) -> tuple[float, float, float]:
    """A proportion's rate and interval (NaN when not measured; the interval never
    leaves the rate's side)."""
    rate = _format.proportion_rate(row, prefix)
    value = math.nan if rate is None else rate
    low, high = _float(row.get(f"{prefix}_low")), _float(row.get(f"{prefix}_high"))
    low = value if math.isnan(low) else min(low, value)
    high = value if math.isnan(high) else max(high, value)
    return value, low, high


# ------------------------------------------------------------------------- kinds


def _dots(chart: Chart) -> Drawing:
    """Points with intervals, one row per label, one dodged marker per series."""
    options = chart.options
    series = [(str(p), str(n)) for p, n in options["series"]]
    step = min(0.22, 0.7 / max(1, len(series)))
    colors = [PALETTE[s % len(PALETTE)] for s in range(len(series))]
    looks = [(MARKERS[s % len(MARKERS)], c, c if s else "#ffffff") for s, c in enumerate(colors)]
    row = max(0.28, 0.12 * len(series) + 0.06) * INCH
    panels = []
    for title, group in _facets(chart):
        position, rows = _rows(group[options["label"]])
        placed = [(position[r[options["label"]]], r) for r in _records(group)]

        def plot(d: Drawing, x: _Scale, y: _Scale, placed: list[Any] = placed) -> None:
            for s, ((prefix, name), (marker, color, face)) in enumerate(
                zip(series, looks, strict=True)
            ):
                points = []
                for index, r in placed:
                    at = y(index + (s - (len(series) - 1) / 2) * step)
                    rate, low, high = _proportion(r, prefix)
                    if math.isnan(rate):
                        points.append((math.nan, at))
                        continue
                    d.error(x(low), at, x(high), at, color, PT, 2 * PT)
                    d.marker(marker, x(rate), at, color, face, 5 * PT)
                    points.append((x(rate), at))
                d.series.append(Plotted(name, (marker, color, "none"), points))

        panels.append(
            _Panel(title, row * len(rows) + 0.1 * INCH, RATE, RATE_TICKS, plot, rows=rows)
        )
    legend = [
        _Entry(name, "marker", color, face, marker)
        for (_, name), (marker, color, face) in zip(series, looks, strict=True)
    ]
    return _compose(panels, options.get("axis", RATE_AXIS), legend)


def _forest(chart: Chart) -> Drawing:
    """Differences with intervals, one row per comparison; filled markers where ``filled``."""
    options = chart.options
    names = tuple(options.get("legend", ("significant", "not significant")))
    frame = chart.data
    values = pd.concat([frame[options[k]] for k in ("value", "low", "high")]).astype(float)
    finite = values[np.isfinite(values)]
    bound = max(0.1, float(finite.abs().max()) if len(finite) else 1.0) * 1.08
    if bound <= 1.2:  # differences of rates: never wider than [-1, 1] needs
        bound = min(bound, 1.05)
    scale = _Scale(-bound, bound)
    ticks = [t for t in _ticks(-bound, bound, 7) if abs(t[0]) <= bound]
    kinds: set[bool] = set()
    color = PALETTE[5]
    roles = ("label", "value", "low", "high", "filled")
    panels = []
    for title, group in _facets(chart):
        position, rows = _rows(group[options["label"]])
        marks = [
            (position[label], _float(v), _float(lo), _float(hi), _format.truthy(f))
            for label, v, lo, hi, f in zip(*(group[options[k]] for k in roles), strict=True)
        ]
        kinds.update(f for _, v, _, _, f in marks if not math.isnan(v))

        def plot(d: Drawing, x: _Scale, y: _Scale, marks: list[Any] = marks) -> None:
            d.path([(x(0.0), y.start), (x(0.0), y.end)], "#000000", 0.8 * PT)
            for row, value, low, high, filled in marks:
                if math.isnan(value):
                    continue
                low = value if math.isnan(low) else min(low, value)
                high = value if math.isnan(high) else max(high, value)
                d.error(x(low), y(row), x(high), y(row), color, PT, 2 * PT)
                d.marker("o", x(value), y(row), color, color if filled else "#ffffff", 6 * PT)

        panels.append(
            _Panel(title, 0.28 * INCH * len(rows) + 0.1 * INCH, scale, ticks, plot, rows=rows)
        )
    legend = [
        _Entry(names[0] if fill else names[1], "marker", color, color if fill else "#ffffff")
        for fill in (True, False)
        if fill in kinds
    ]
    return _compose(panels, options.get("axis", ""), legend)


def _cell_text(value: Any) -> str:
    missing = value is None or (not isinstance(value, str) and _format.is_missing(value))
    return "" if missing else _format.shorten(value, 16)


def _heatmap(chart: Chart) -> Drawing:
    """Rates as colours, one cell per (row, column), each cell annotated with ``text``."""
    options = chart.options
    frame = chart.data
    columns = [str(c) for c in _order(frame[options["column"]])]
    texts = [_cell_text(t) for t in frame[options["text"]]]
    cell = max(0.5 * INCH, max(text_width(t) for t in texts) + 0.14 * INCH)
    names = [_label(c) for c in columns]
    vertical = max(text_width(n) for n in names) > cell - 0.06 * INCH
    facets = _facets(chart)
    roles = ("row", "column", "value", "text")
    panels = []
    for f, (title, group) in enumerate(facets):
        labels = [str(v) for v in _order(group[options["row"]])]
        cells = [
            (labels.index(str(r)), columns.index(str(c)), _float(v), _cell_text(t))
            for r, c, v, t in zip(*(group[options[k]] for k in roles), strict=True)
        ]

        def plot(d: Drawing, x: _Scale, y: _Scale, cells: list[Any] = cells) -> None:
            for i, j, value, _ in cells:
                if not math.isnan(value):
                    left, top, right, bottom = x(j - 0.5), y(i - 0.5), x(j + 0.5), y(i + 0.5)
                    d.rect(
                        left, top, right - left, bottom - top, _colour(value), "#ffffff", 0.8 * PT
                    )
            for i, j, value, text in cells:
                light = math.isnan(value) or value > 0.55
                d.text(x(j), y(i), text, anchor="middle", color=None if light else "#ffffff")

        panels.append(
            _Panel(
                title,
                0.32 * INCH * len(labels),
                _Scale(-0.5, len(columns) - 0.5),
                list(zip(range(len(columns)), names, strict=True)),
                plot,
                rows=labels,
                x_tick_marks=False,
                x_labels=f == len(facets) - 1,
                x_vertical=vertical,
                grid_x=False,
                background="#eeeeee",
            )
        )

    def side(d: Drawing, first: PanelBox) -> None:
        x0 = first.x1 + 0.25 * INCH
        width, height = 0.16 * INCH, min(2.4 * INCH, first.y1 - first.y0)
        top, steps = first.y0, 64
        for k in range(steps):  # bottom (0) to top (1), as thin slices
            y = top + height * (1 - (k + 1) / steps)
            d.rect(x0, y, width, height / steps + 0.3, _colour((k + 0.5) / steps))
        right, bottom = x0 + width, top + height
        outline = [(x0, top), (right, top), (right, bottom), (x0, bottom), (x0, top)]
        d.path(outline, "#000000", 0.8 * PT)
        widest = 0.0
        for k in range(6):
            at = top + height * (1 - k / 5)
            d.path([(x0 + width, at), (x0 + width + TICK, at)], "#000000", 0.8 * PT)
            label = f"{k / 5:.1f}"
            d.text(x0 + width + 2 * TICK, at, label)
            widest = max(widest, text_width(label))
        axis = _label(options.get("axis", "share passing"))
        at = x0 + width + 3 * TICK + widest + (ASCENT + DESCENT) * SIZE / 2
        d.text(at, top + height / 2, axis, anchor="middle", vertical=True)

    return _compose(panels, axes_width=cell * len(columns), side=side)


def _bar(d: Drawing, x0: float, x1: float, y0: float, y1: float, s: int) -> None:
    """A bar of series ``s`` (its colour and hatch) from (x0, y0) to (x1, y1), in pixels."""
    color, hatch = PALETTE[s % len(PALETTE)], HATCHES[s % len(HATCHES)]
    d.rect(x0, y0, x1 - x0, y1 - y0, color, "#000000", hatch=hatch)


def _patches(names: Iterable[str]) -> list[_Entry]:
    """The legend of bars: a hatched patch per series."""
    return [
        _Entry(n, "patch", PALETTE[s % len(PALETTE)], hatch=HATCHES[s % len(HATCHES)])
        for s, n in enumerate(names)
    ]


def _bars(chart: Chart) -> Drawing:
    """Horizontal bars of a proportion with intervals: one row per group, one bar per series."""
    options = chart.options
    prefix = options["prefix"]
    names = _order(chart.data[options["series"]])
    height = 0.8 / len(names)
    panels = []
    for title, group in _facets(chart):
        position, rows = _rows(group[options["group"]])
        bars = [
            (
                names.index(r[options["series"]]),
                position[r[options["group"]]],
                *_proportion(r, prefix),
            )
            for r in _records(group)
        ]

        def plot(d: Drawing, x: _Scale, y: _Scale, bars: list[Any] = bars) -> None:
            for s, row, rate, low, high in bars:
                top = row - 0.4 + height * s
                value = 0.0 if math.isnan(rate) else rate
                _bar(d, x(0.0), x(value), y(top), y(top + height), s)
                if not math.isnan(rate):
                    middle = y(top + height / 2)
                    d.error(x(low), middle, x(high), middle, "#000000", 0.7 * PT, 1.5 * PT)

        panel_height = max(0.3, 0.15 * len(names) + 0.08) * INCH * len(rows)
        panels.append(_Panel(title, panel_height, RATE, RATE_TICKS, plot, rows=rows))
    return _compose(panels, options.get("axis", RATE_AXIS), _patches(map(str, names)))


def _stacked(chart: Chart) -> Drawing:
    """Counts stacked left to right, one bar per label; every part is in the legend."""
    options = chart.options
    parts = [(str(c), str(n)) for c, n in options["parts"]]
    frame = chart.data
    position, labels = _rows(frame[options["label"]])
    rows = [position[v] for v in frame[options["label"]]]
    values = [np.nan_to_num(frame[column].to_numpy(dtype=float)) for column, _ in parts]
    totals = np.sum(values, axis=0) if values else np.zeros(len(frame))
    high = max(1.0, float(totals.max(initial=0)) * 1.05)

    def plot(d: Drawing, x: _Scale, y: _Scale) -> None:
        left = np.zeros(len(frame))
        for c, counts in enumerate(values):
            for row, start, count in zip(rows, left, counts, strict=True):
                _bar(d, x(start), x(start + count), y(row - 0.4), y(row + 0.4), c)
            left = left + counts

    ticks, height = _ticks(0.0, high, 8, integer=True), 0.3 * INCH * len(labels) + 0.1 * INCH
    panel = _Panel("", height, _Scale(0.0, high), ticks, plot, rows=labels)
    return _compose([panel], options.get("axis", "count"), _patches(n for _, n in parts))


def _curve(chart: Chart) -> Drawing:
    """A proportion against ``x``, one line per series; coinciding series are dodged."""
    options = chart.options
    frame = chart.data
    prefix, x_key, key = options["prefix"], options["x"], options["series"]
    names = _order(frame[key])
    xs = sorted(float(v) for v in _order(frame[x_key]) if not _format.is_missing(v))
    log = options.get("x_log")
    if log is None:
        log = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] >= 4
    log = bool(log) and bool(xs) and xs[0] > 0
    spacing = min((b - a for a, b in itertools.pairwise(xs)), default=1.0) if not log else 1.0
    pad = 0.25 if log else 0.25 * spacing
    if not xs:
        scale = _Scale(0.0, 1.0)
    elif log:
        scale = _Scale(xs[0] / 2**pad, xs[-1] * 2**pad, True)
    else:
        scale = _Scale(xs[0] - pad, xs[-1] + pad)
    ticks = [(v, _format.number(v, 0 if float(v).is_integer() else 2)) for v in xs]

    def style(s: int) -> tuple[str, str, str, str]:
        """(marker, colour, line style, face) of series ``s``."""
        color = PALETTE[s % len(PALETTE)]
        hollow = (s // len(PALETTE)) % 2
        dash = LINESTYLES[(s // len(PALETTE)) % len(LINESTYLES)]
        return MARKERS[s % len(MARKERS)], color, dash, "#ffffff" if hollow else color

    panels = []
    for title, group in _facets(chart):
        lines = []
        for s, name in enumerate(names):
            rows = group[group[key] == name].sort_values(x_key)
            if rows.empty:
                continue
            shift = (s - (len(names) - 1) / 2) * min(0.04, 0.2 / len(names))
            points = []
            for r in _records(rows):
                v = _float(r[x_key])
                if math.isnan(v) or (log and v <= 0):
                    continue
                points.append(
                    (v * 2**shift if log else v + shift * spacing, *_proportion(r, prefix))
                )
            lines.append((s, str(name), points))

        def plot(d: Drawing, x: _Scale, y: _Scale, lines: list[Any] = lines) -> None:
            for s, name, points in lines:
                marker, color, dash, face = style(s)
                drawn = [
                    (x(px), y(rate) if not math.isnan(rate) else math.nan)
                    for px, rate, _, _ in points
                ]
                run: list[tuple[float, float]] = []
                for point in [*drawn, (math.nan, math.nan)]:  # a gap where a rate is missing
                    if math.isnan(point[1]):
                        d.path(run, color, 1.2 * PT, _DASHES[dash])
                        run = []
                    else:
                        run.append(point)
                for (_, rate, low, high), (at, _) in zip(points, drawn, strict=True):
                    if not math.isnan(rate):
                        d.error(at, y(low), at, y(high), color, 1.2 * PT, 2 * PT)
                for at, level in drawn:
                    if not math.isnan(level):
                        d.marker(marker, at, level, color, face, 5 * PT)
                d.series.append(Plotted(name, (marker, color, dash), drawn))

        panels.append(
            _Panel(
                title,
                2.4 * INCH,
                scale,
                ticks,
                plot,
                y=RATE,
                y_ticks=RATE_TICKS,
                y_title=options.get("axis", "share passing"),
                grid_y=True,
            )
        )
    legend = []
    for s, name in enumerate(names):
        marker, color, dash, face = style(s)
        legend.append(_Entry(str(name), "line", color, face, marker, dash=dash))
    return _compose(panels, options.get("x_title", ""), legend, axes_width=6.0 * INCH)


_KINDS: dict[str, Callable[[Chart], Drawing]] = {
    "dots": _dots,
    "forest": _forest,
    "heatmap": _heatmap,
    "bars": _bars,
    "stacked": _stacked,
    "curve": _curve,
}


# ---------------------------------------------------------------------------- SVG


def _svg(drawing: Drawing, salt: str, title: str) -> str:
    """The drawing as an inline <svg>: its size in CSS pixels, a margin around what it
    holds, ids prefixed with a hash of the chart id and the drawing (unique on a page,
    the same for the same data), and a minimum width that keeps it legible on a narrow
    window (its figure scrolls instead)."""
    x0, y0, x1, y1 = drawing.box
    width, height = math.ceil(x1 - x0 + 2 * MARGIN), math.ceil(y1 - y0 + 2 * MARGIN)
    defs = "".join(
        f'<pattern id="@@h{i}" patternUnits="userSpaceOnUse" width="6" height="6">'
        f'<path d="{_HATCH_PATHS[hatch]}" stroke="#000000" stroke-width="0.8"/></pattern>'
        for i, hatch in enumerate(drawing.hatches)
    )
    body = (
        (f"<defs>{defs}</defs>" if defs else "")
        + f'<g transform="translate({_number(MARGIN - x0)} {_number(MARGIN - y0)})">'
        + "\n".join(drawing.items)
        + "</g>"
    )
    prefix = "c" + hashlib.sha256(f"{salt}\n{body}".encode()).hexdigest()[:8] + "-"
    label = html.escape(title, quote=True)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}" class="chart" '
        f'style="min-width: {min(width, 640)}px" font-family="DejaVu Sans, sans-serif" '
        f'font-size="{_number(SIZE)}">\n' + body.replace("@@", prefix) + "\n</svg>"
    )


def draw(chart: Chart) -> Drawing | None:
    """The chart as placed elements in the report's style; None when its data hold no row."""
    if chart.data.empty:
        return None
    try:
        return _KINDS[chart.kind](chart)
    except KeyError as error:  # say which chart lacks which option or column
        raise ValueError(f"chart {chart.id!r} ({chart.kind}): no {error}") from error


def render(chart: Chart) -> str | None:
    """The chart as an inline <svg> element; None when its data hold no row."""
    drawing = draw(chart)
    if drawing is None:
        return None
    return _svg(drawing, chart.id, _format.visible(chart.title or chart.id))
