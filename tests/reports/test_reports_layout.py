"""The report as a reader sees it: headless Chromium at 1280 and 1920 px wide.

A realistic sample document (tests/_report_samples.py) is written, opened through
the DevTools protocol (tests/_cdp.py; the page's CSP forbids scripts, DevTools
evaluation is not the page's), and measured by ``MEASURE``.  ``problems`` then
checks, per chart, that no two SVG texts overlap, that every text lies inside its
SVG, that the legend names every series the sample holds, and that the chart is
shown at its natural size (not squeezed) and whole in its figure (not scrolled);
per table cell, that no word and no label or number is broken across lines (a
word may break after its hyphen in a text cell, never in a header); and for the
page, that nothing overflows it horizontally outside a scroll box and that the
console stayed clean.  A page built by hand with one fault of each kind proves
that each check can fail.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reports import Chart, Document, write_document
from tests import _report_samples as samples
from tests._cdp import Browser
from tests._system import missing

WIDTHS = (1280, 1920)
TOLERANCE = 1.0
"""CSS pixels two boxes may share (anti-aliasing, rounding) before they overlap."""
LONG_TOKEN = 60
"""A cell holding a token longer than this is untrusted long text: it may wrap anywhere."""
SINGLE = "td.num, td.label, td.flag"
"""Cells of labels, numbers and flags: each of their texts stays on one line."""

MEASURE = r"""
(() => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const box = r => ({x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height});
  const lines = rects => {
    const tops = [];
    for (const r of rects) {
      if (r.width < 0.5 || r.height < 0.5) continue;
      if (!tops.some(t => Math.abs(t - r.top) < 3)) tops.push(r.top);
    }
    return tops.length;
  };
  const charts = [];
  for (const svg of document.querySelectorAll('svg')) {
    const figure = svg.closest('figure');
    const texts = [];
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (r.width < 0.5 || r.height < 0.5 || !t.textContent.trim()) continue;
      texts.push({text: t.textContent, box: box(r), legend: !!t.closest('[id$="-legend"]')});
    }
    const frame = figure || svg.parentElement;
    charts.push({
      id: figure ? figure.id : '', box: box(svg.getBoundingClientRect()), texts,
      frame: box(frame.getBoundingClientRect()),
      width: svg.width.baseVal.value, height: svg.height.baseVal.value,
    });
  }
  const cells = [];
  let checked = 0;
  for (const cell of document.querySelectorAll('td, th')) {
    const text = cell.textContent;
    if (!text.trim() || text.split(/\s+/).some(t => t.length > %(long)d)) continue;
    checked += 1;
    const single = cell.matches(SINGLE);
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.data.trim()) continue;
      const range = document.createRange();
      if (single) {
        range.selectNodeContents(node);
        const count = lines(range.getClientRects());
        if (count > 1) cells.push({text: node.data, token: node.data, lines: count, single});
      }
      const words = cell.matches('td') ? /[^\s-]+-?/g : /\S+/g;
      for (const match of node.data.matchAll(words)) {
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const count = lines(range.getClientRects());
        if (count > 1) cells.push({text: node.data, token: match[0], lines: count, single});
      }
    }
  }
  const commands = [];
  for (const code of document.querySelectorAll('p code, li code, dd code')) {
    const range = document.createRange();
    range.selectNodeContents(code);
    if (code.textContent.length <= %(long)d && lines(range.getClientRects()) > 1)
      commands.push(code.textContent);
  }
  const records = [];
  let recordParts = 0;
  for (const pre of document.querySelectorAll('pre.log')) {
    if (recordParts > 20000) break;
    const room = pre.clientWidth;
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/[\w.-]+/g)) {  // a key, a value, an id
        recordParts += 1;
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const rects = [...range.getClientRects()];
        const wide = rects.reduce((sum, r) => sum + r.width, 0);
        if (wide < room && lines(rects) > 1) records.push(match[0]);
      }
    }
  }
  const scrolls = [];
  for (const box of document.querySelectorAll('.scroll')) {
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const table = box.querySelector('table');
    scrolls.push({id: table ? table.id : '', width: box.scrollWidth, shown: box.clientWidth});
  }
  const tables = [...document.querySelectorAll('table[id]')].map(
    t => ({id: t.id, top: t.getBoundingClientRect().top + scrollY}));
  return {
    viewport: document.documentElement.clientWidth,
    scrollWidth: document.scrollingElement.scrollWidth,
    charts, cells, checked, scrolls, commands, records, recordParts, tables,
  };
})()
""".replace("%(long)d", str(LONG_TOKEN)).replace("SINGLE", repr(SINGLE))


def _overlap(a: dict[str, float], b: dict[str, float], tolerance: float = TOLERANCE) -> bool:
    return (
        min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > tolerance
        and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > tolerance
    )


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        inner["x"] >= outer["x"] - TOLERANCE
        and inner["y"] >= outer["y"] - TOLERANCE
        and inner["x"] + inner["w"] <= outer["x"] + outer["w"] + TOLERANCE
        and inner["y"] + inner["h"] <= outer["y"] + outer["h"] + TOLERANCE
    )


def problems(
    measured: dict[str, Any], legends: dict[str, list[str]], may_scroll: bool = False
) -> list[str]:
    """Every layout fault ``MEASURE`` found, one line each (none: an empty list).  A
    table that scrolls in its box is a fault unless ``may_scroll`` (the stress sample's
    two readers, NA bounds and hostile names are wider than any window)."""
    found: list[str] = []
    if measured["scrollWidth"] > measured["viewport"] + 1:
        found.append(f"overflow: page {measured['scrollWidth']} px wide in {measured['viewport']}")
    shown: dict[str, set[str]] = {}
    for chart in measured["charts"]:
        name = chart["id"] or "(svg outside a figure)"
        shown_size = (chart["box"]["w"], chart["box"]["h"])
        if any(
            abs(a - b) > 1
            for a, b in zip(shown_size, (chart["width"], chart["height"]), strict=True)
        ):
            found.append(
                f"squeezed: {name} shown {shown_size[0]:.0f} x {shown_size[1]:.0f} px, "
                f"drawn {chart['width']:.0f} x {chart['height']:.0f}"
            )
        if not _inside(chart["box"], chart["frame"]):
            found.append(f"clipped: {name} is wider than its figure (it scrolls)")
        for a, b in itertools.combinations(chart["texts"], 2):
            if _overlap(a["box"], b["box"]):
                found.append(f"overlap: {name}: {a['text']!r} and {b['text']!r}")
        for text in chart["texts"]:
            if not _inside(text["box"], chart["box"]):
                found.append(f"clipped: {name}: {text['text']!r}")
        shown.setdefault(chart["id"], set()).update(
            t["text"] for t in chart["texts"] if t["legend"]
        )
    for chart_id, names in legends.items():
        absent = [n for n in names if n not in shown.get(chart_id, set())]
        if absent:
            found.append(f"legend: {chart_id} does not name {absent}")
    for box in [] if may_scroll else measured["scrolls"]:
        found.append(
            f"scrolls: {box['id'] or 'a table'} is {box['width']} px wide in {box['shown']} "
            "(its last columns are out of sight)"
        )
    for command in measured["commands"]:
        found.append(f"broken: a command across lines: {command!r}")
    for part in measured["records"]:
        found.append(f"broken: a record inside a word: {part!r}")
    for cell in measured["cells"]:
        what = "a label or number" if cell["single"] else "a word"
        found.append(f"broken: {what} on {cell['lines']} lines: {cell['token']!r}")
    return found


def legend_names(doc: Document) -> dict[str, list[str]]:
    """The series each chart of ``doc`` draws: its legend must name every one."""
    out: dict[str, list[str]] = {}
    for section in doc.sections:
        for block in section.blocks:
            if not isinstance(block, Chart):
                continue
            options, data = block.options, block.data
            if block.kind == "dots":
                out[block.id] = [str(name) for _, name in options["series"]]
            elif block.kind == "stacked":
                out[block.id] = [str(name) for _, name in options["parts"]]
            elif block.kind in ("bars", "curve"):
                out[block.id] = [str(v) for v in dict.fromkeys(data[options["series"]])]
            elif block.kind == "forest":
                filled = data[options["filled"]].astype(bool)
                out[block.id] = [
                    name
                    for name, present in (
                        ("significant", filled.any()),
                        ("not significant", (~filled).any()),
                    )
                    if present
                ]
    return out


BROKEN = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
</head><body style="margin:0">
<figure id="overlapping"><svg width="300" height="100" viewBox="0 0 300 100">
<text x="10" y="30" font-size="14">first label here</text><text x="40" y="34" font-size="14">second label</text>
</svg></figure>
<figure id="clipped"><svg width="200" height="60" viewBox="0 0 200 60">
<text x="120" y="30" font-size="14">a label cut off at the edge</text></svg></figure>
<figure id="incomplete"><svg width="300" height="60" viewBox="0 0 300 60"><g id="c1-legend">
<text x="10" y="30" font-size="12">frontier</text></g></svg></figure>
<figure id="squeezed" style="width:400px"><svg width="2000" height="50" viewBox="0 0 2000 50"
 style="max-width:100%;height:auto"><text x="10" y="30" font-size="12">wide</text></svg></figure>
<figure id="scrolling" style="width:300px;overflow-x:auto"><svg width="600" height="40"
 viewBox="0 0 600 40"><text x="10" y="25" font-size="12">scrolls</text></svg></figure>
<table style="width:40px"><tr><td style="overflow-wrap:anywhere">frontier_alpha:budget=2400</td></tr></table>
<table style="width:40px"><tr><td class="num">3/40 [0.10, 0.25]</td></tr></table>
<div class="scroll" style="overflow-x:auto;max-width:100%"><table id="too-wide"><tr>
<td style="white-space:nowrap">a row far wider than the window, its last columns out of sight x x x x x </td>
<td style="min-width:1400px">last</td></tr></table></div>
<p style="width:80px;font-size:12px">preregister a reference with <code>audit run --reference</code></p>
<pre class="log" style="width:120px;white-space:pre-wrap;word-break:break-all"><span class="line">{"id":"r39271","value":"pebble-226"}</span></pre>
<div style="width:3000px">wider than any window</div>
<img src="https://example.invalid/tracker.png" alt="">
</body></html>
"""


@pytest.fixture(scope="module")
def chromium() -> str:
    path = Path("/usr/bin/chromium")
    if not path.exists():
        missing("chromium (/usr/bin/chromium)")
    return str(path)


@pytest.fixture(scope="module")
def sample() -> Document:
    return samples.realistic()


Measured = dict[tuple[str, int], dict[str, Any]]
"""(page, viewport width) -> what ``MEASURE`` returned, plus the console's ``errors``."""


async def _measure(binary: str, profile: Path, pages: list[tuple[str, Path, int]]) -> Measured:
    out: Measured = {}
    async with Browser(binary, profile) as browser:
        for name, path, width in pages:
            page = await browser.open(path.resolve().as_uri(), width=width, height=900)
            measured = await page.evaluate(MEASURE)
            measured["errors"] = list(page.errors)
            out[(name, width)] = measured
            await page.close()
    return out


@pytest.fixture(scope="module")
def measured(chromium: str, sample: Document, tmp_path_factory: pytest.TempPathFactory) -> Measured:
    folder = tmp_path_factory.mktemp("layout")
    paths = write_document(sample, folder / "report")
    assert folder / "report" / "pairs-002.html" in paths
    broken = folder / "broken.html"
    broken.write_text(BROKEN, encoding="utf-8")
    pages = [("report", folder / "report" / "report.html", w) for w in WIDTHS]
    pages += [
        ("pairs", folder / "report" / "pairs-002.html", WIDTHS[0]),
        ("broken", broken, WIDTHS[0]),
    ]
    return asyncio.run(_measure(chromium, folder / "profile", pages))


REAL_RUN = ("run", "--preset", "cca-pilot", "--transforms", "identity,rename:1",
            "--workers", "2", "--quiet")  # fmt: skip
"""A real audit with the default conditions (every built-in, archives and probes), as a
new user's first report shows them; seconds to run."""
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "keep_newest.py"
MY_RUN = ("run", "--preset", "cca-pilot", "--transforms", "identity", "--workers", "2",
          "--quiet", "--conditions", f"cmd:name=keep_newest,run={sys.executable} {EXAMPLE},"
          "tail,full")  # fmt: skip
"""A user's own compressor beside two of the default's conditions: compared with the
default run, as the README's `audit compare runs/default runs/mine`."""


@pytest.fixture(scope="module")
def real(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Measured:
    """The report of a real run, measured at both widths, and its comparison with a
    user's run at 1280 px."""
    folder = tmp_path_factory.mktemp("real")
    for args in (
        [*REAL_RUN, "--out", str(folder / "run")],
        ["report", str(folder / "run")],
        [*MY_RUN, "--out", str(folder / "mine")],
        ["compare", str(folder / "run"), str(folder / "mine"), "--out", str(folder / "cmp")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "audit", *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    page = folder / "run" / "report" / "report.html"
    pages = [("real", page, w) for w in WIDTHS]
    pages.append(("compare", folder / "cmp" / "compare.html", WIDTHS[0]))
    return asyncio.run(_measure(chromium, folder / "profile", pages))


FIRST_SCREEN = 900
"""CSS pixels of the window's height: what a reader sees before scrolling."""


def _top(page: dict[str, Any], table: str) -> float:
    return next(t["top"] for t in page["tables"] if t["id"] == table)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_real_report_fits_the_window(real: Measured, width: int) -> None:
    """Every table of a default run's report is whole in the window (the headline's
    last column was out of sight at 1280 px), and no chart, label or cell is broken;
    the verdicts are on the first screen."""
    page = real[("real", width)]
    assert page["checked"] > 300
    assert problems(page, {}) == []
    assert page["errors"] == []
    assert _top(page, "verdicts-table") < FIRST_SCREEN


def test_a_real_comparison_fits_the_window(real: Measured) -> None:
    """Issue 28: compare.html had no headline and its tables scrolled sideways at 1280
    px. The answer (which systems differ, by how much, significant or not) is on the
    first screen, as report.html's verdicts are, and every table, folded ones opened,
    is whole in the window."""
    page = real[("compare", WIDTHS[0])]
    assert page["checked"] > 100  # the measure saw the cells
    assert problems(page, {}) == []
    assert page["errors"] == []
    assert _top(page, "differences-table") < FIRST_SCREEN


@pytest.mark.parametrize("width", WIDTHS)
def test_report_layout(measured: Measured, sample: Document, width: int) -> None:
    page = measured[("report", width)]
    charts = {c["id"] for c in page["charts"]}
    assert charts == set(legend_names(sample)) | {"families-chart"}
    assert min(len(c["texts"]) for c in page["charts"]) > 10  # the measure saw the texts
    assert page["checked"] > 500  # ... and the cells
    assert problems(page, legend_names(sample), may_scroll=True) == []
    assert page["errors"] == []


def test_drill_down_page_layout(measured: Measured) -> None:
    page = measured[("pairs", WIDTHS[0])]
    assert page["recordParts"] > 100  # the measure saw the records
    assert problems(page, {}, may_scroll=True) == []
    assert page["errors"] == []


def test_every_check_can_fail(measured: Measured) -> None:
    page = measured[("broken", WIDTHS[0])]
    found = problems(page, {"incomplete": ["frontier", "tail"]})
    kinds = {line.split(":")[0] for line in found}
    assert kinds == {"overflow", "squeezed", "overlap", "clipped", "legend", "broken", "scrolls"}, (
        found
    )
    assert any(line.startswith("scrolls: too-wide is") for line in found), found
    assert any(line.startswith("broken: a command across lines") for line in found), found
    assert any(line.startswith("broken: a record inside a word") for line in found), found
    assert any("'frontier_alpha:budget=2400'" in line for line in found), found
    assert "clipped: scrolling is wider than its figure (it scrolls)" in found
    assert any("a label or number" in line and "3/40" in line for line in found), found
    assert any(
        "tail" in line and "frontier" not in line.split("[")[1]
        for line in found
        if line.startswith("legend")
    )
    assert page["errors"], "the blocked image should be a console error"
