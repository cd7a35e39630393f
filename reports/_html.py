"""HTML rendering: jinja2 with autoescape on, one self-contained file per page.

Safety rules (model output is untrusted):

* autoescape is on for every template; the only values marked safe are the SVG
  charts, which matplotlib writes from numbers and condition names it escapes;
* every printed string passes ``finalize`` -> ``visible``: control and invisible
  formatting characters are shown as escapes;
* no URL is ever built from data: the only links are the page's own anchors and
  its sibling pages, named by page number;
* a Content-Security-Policy forbids scripts, fetches, frames and forms; CSS is
  inline; long lines wrap (``overflow-wrap: anywhere``) and very long texts are
  clipped with a count of what is left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import jinja2
import pandas as pd
from markupsafe import Markup

from reports import _charts, _format
from reports._model import CompareInput, ReportInput

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_PAIRS = 12
"""Pairs per drill-down page at most."""
PAGE_CHARS = 3_000_000
"""Estimated characters per drill-down page at most (keeps every file well under 10 MB)."""
MAIN_PAGE = "report.html"


def page_name(number: int) -> str:
    """report.html for the first page, pairs-002.html, ... for the next."""
    return MAIN_PAGE if number <= 1 else f"pairs-{number:03d}.html"


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return _format.visible(value)
    if value is None:
        return ""
    return value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        kn=_format.kn,
        ci=_format.ci,
        interval=_format.interval,
        rate=_format.rate,
        signed=_format.signed,
        pvalue=_format.pvalue,
        number=_format.number,
        clip=_format.clip,
        missing=_format.is_missing,
        width=_width,
    )
    env.globals.update(page_name=page_name)
    return env


def _width(value: Any) -> str:
    """A CSS percentage for a rate bar (numbers only, never data text)."""
    if _format.is_missing(value):
        return "0%"
    return f"{max(0.0, min(1.0, float(value))) * 100:.1f}%"


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame is None or frame.empty:
        return []
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def _size(pair: dict[str, Any]) -> int:
    """Rough characters a pair takes on a page (texts plus markup per line and read)."""
    total = 2000
    for lines in [*pair.get("variants", {}).values(), *pair.get("futures", {}).values()]:
        total += sum(len(line["text"]) + 60 for line in lines)
    for cell in pair.get("cells", []):
        total += 1500
        for branches in cell["memories"].values():
            for memory in branches.values():
                total += sum(
                    min(len(li["text"]), _format.CLIP) + 60 for li in memory["lines"] or []
                )
        for read in cell["reads"]:
            total += 400 + sum(
                min(len(read[k] or ""), _format.CLIP) for k in ("answer", "gold", "error")
            )
    return total


def paginate(
    pairs: Sequence[dict[str, Any]], per_page: int = PAGE_PAIRS, max_chars: int = PAGE_CHARS
) -> list[list[dict[str, Any]]]:
    """Split drill-down pairs into pages by count and estimated size (order kept)."""
    pages: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for pair in pairs:
        cost = _size(pair)
        if current and (len(current) >= per_page or size + cost > max_chars):
            pages.append(current)
            current, size = [], 0
        current.append(pair)
        size += cost
    if current:
        pages.append(current)
    return pages


def _comparison_labels(rows: Sequence[dict[str, Any]], several_readers: bool) -> list[str]:
    labels = []
    for row in rows:
        reader = f", {row['reader']}" if several_readers else ""
        labels.append(f"{row['a']} vs {row['b']} @ {row['budget']} B{reader}")
    return labels


def transform_pivot(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Transforms in order and one entry per system: {transform: row} (compact table)."""
    kinds = list(dict.fromkeys(r["transform"] for r in rows))
    systems: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row["reader"], row["condition"], row["budget"])
        entry = systems.setdefault(
            key,
            {
                "reader": key[0],
                "condition": key[1],
                "budget": key[2],
                "by": {},
                "violations_k": 0,
                "violations_n": 0,
            },
        )
        entry["by"][row["transform"]] = row
        entry["violations_k"] += int(row.get("equivariance_violation_reads_k") or 0)
        entry["violations_n"] += int(row.get("equivariance_violation_reads_n") or 0)
    return kinds, list(systems.values())


def largest_gaps(rows: Sequence[dict[str, Any]], limit: int = 5) -> list[dict[str, Any]]:
    """The biggest drops in reveal accuracy from identity to a transform (shortcuts)."""
    gaps = [
        r
        for r in rows
        if r["transform"] != "identity"
        and not _format.is_missing(r.get("gap_reveal"))
        and float(r["gap_reveal"]) > 0
    ]
    return sorted(gaps, key=lambda r: -float(r["gap_reveal"]))[:limit]


LINE_CLIP = 4000
"""Characters of one memory or record line shown."""


def _blocks(lines: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Runs of lines with the same mark joined into one block (one element per run).

    Texts stay plain strings (escaped by the template); each line is clipped.
    """
    if lines is None:
        return None
    blocks: list[dict[str, Any]] = []
    for line in lines:
        text = _format.clip(line["text"], LINE_CLIP)
        if blocks and blocks[-1]["mark"] == bool(line["mark"]) and not line["mark"]:
            blocks[-1]["text"] += "\n" + text
            blocks[-1]["count"] += 1
        else:
            blocks.append({"text": text, "mark": bool(line["mark"]), "count": 1})
    return blocks


def _pair_view(pair: dict[str, Any]) -> dict[str, Any]:
    """A drill-down pair with its line lists turned into blocks (a copy; input untouched)."""
    view = dict(pair)
    view["variants"] = {k: _blocks(v) for k, v in pair.get("variants", {}).items()}
    view["futures"] = {k: _blocks(v) for k, v in pair.get("futures", {}).items()}
    view["n_lines"] = {k: len(v) for k, v in pair.get("variants", {}).items()}
    cells = []
    for cell in pair.get("cells", []):
        cell = dict(cell)
        cell["memories"] = {
            variant: {
                branch: dict(memory, lines=_blocks(memory.get("lines")))
                for branch, memory in branches.items()
            }
            for variant, branches in cell["memories"].items()
        }
        cells.append(cell)
    view["cells"] = cells
    return view


def render_report_pages(data: ReportInput) -> dict[str, str]:
    """File name -> HTML text: report.html (with drill-down page 1), pairs-NNN.html."""
    env = environment()
    pages = [[_pair_view(p) for p in page] for page in paginate(data.drilldown)] or [[]]
    several_readers = len(data.meta.get("readers") or []) > 1
    comparisons = _records(data.comparisons)
    charts = {
        "headline": _charts.headline_chart(data.headline),
        "heatmap": _charts.heatmap_chart(data.families, order=data.meta.get("conditions") or ()),
        "transforms": _charts.transform_chart(data.transforms),
        "taxonomy": _charts.taxonomy_chart(data.taxonomy, data.attribution_labels),
        "budget": _charts.budget_chart(data.budget_curve),
        "forest": _charts.forest_chart(
            data.comparisons, _comparison_labels(comparisons, several_readers)
        ),
    }
    context: dict[str, Any] = {
        "data": data,
        "meta": data.meta,
        "several_readers": several_readers,
        "headline": _records(data.headline),
        "comparisons": comparisons,
        "families": _records(data.families),
        "transforms": _records(data.transforms),
        "transform_kinds": transform_pivot(_records(data.transforms))[0],
        "transform_rows": transform_pivot(_records(data.transforms))[1],
        "gaps": largest_gaps(_records(data.transforms)),
        "identity_reveal": {
            (r["reader"], r["condition"], r["budget"]): r
            for r in _records(data.transforms)
            if r["transform"] == "identity"
        },
        "taxonomy": _records(data.taxonomy),
        "budget_curve": _records(data.budget_curve),
        "costs": _records(data.costs),
        "cost_columns": [c for c in data.costs.columns] if not data.costs.empty else [],
        "charts": {k: None if v is None else Markup(v) for k, v in charts.items()},
        "n_pages": len(pages),
        "n_drilled": len(data.drilldown),
        "outcome_columns": [
            c
            for c in (data.taxonomy.columns if not data.taxonomy.empty else [])
            if c.startswith("outcome_") and data.taxonomy[c].sum() > 0
        ],
    }
    out = {MAIN_PAGE: env.get_template("report.html.j2").render(**context, page=1, pairs=pages[0])}
    for number, pairs in enumerate(pages[1:], start=2):
        out[page_name(number)] = env.get_template("pairs.html.j2").render(
            **context, page=number, pairs=pairs
        )
    return out


def render_compare_page(data: CompareInput) -> str:
    env = environment()
    comparisons = _records(data.comparisons)
    labels = [f"{r['a']} vs {r['b']} @ {r['budget']} B" for r in comparisons]
    forest = _charts.forest_chart(data.comparisons, labels)
    return env.get_template("compare.html.j2").render(
        data=data,
        systems=_records(data.systems),
        comparisons=comparisons,
        chart=None if forest is None else Markup(forest),
    )


_STALE = re.compile(r"^pairs-\d{3,}\.html$")


def remove_stale_pages(directory: Path, keep: Sequence[str]) -> None:
    """Drop drill-down pages of an earlier report that this one does not write."""
    for path in directory.glob("pairs-*.html"):
        if _STALE.match(path.name) and path.name not in keep:
            path.unlink()
