"""HTML rendering of a ``Document``: jinja2 with autoescape on, self-contained pages.

The main page loops over the document's sections and renders each block with the
macro of its kind (``templates/_blocks.j2``); sections are numbered and listed in a
table of contents.  A drill-down is on pages of its own, linked from an index of its
pairs on the main page: drilled memories and reads grow with pairs x conditions (the
default audit's made the main page 6 MB and 160,000 px tall), the rest of a report
does not.

Safety rules (model output is untrusted):

* autoescape is on for every template; the only values marked safe are the SVG
  charts, which ``_charts`` writes from numbers and texts it escapes, and the
  drill-down's record logs and memories, escaped here once per text (``_log``: ``&``,
  ``<`` and ``>``, all that can end element text; they are never put in an attribute);
* every printed string passes ``finalize`` -> ``visible``: control and invisible
  formatting characters are shown as escapes;
* no URL is ever built from data: the only links are the page's own anchors
  (section, table and chart ids are checked identifiers; pairs and their memories
  are anchored by number) and its sibling pages, named by page number;
* a Content-Security-Policy forbids scripts, fetches, frames and forms; CSS is
  inline; labels and numbers never wrap (tables scroll in their own box), long
  untrusted text wraps anywhere in the drill-down, and very long texts are clipped
  with a count of what is left out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jinja2
from markupsafe import Markup

from reports import _charts, _format
from reports._document import Block, Chart, Column, Document, DrillDown, Table

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_PAIRS = 12
"""Pairs per drill-down page at most."""
PAGE_CHARS = 3_000_000
"""Estimated characters per drill-down page at most (keeps every file well under 10 MB)."""
LINE_CLIP = 4000
"""Characters of one memory or record line shown."""

_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_RESERVED = frozenset({"summary"})
"""Anchors the pages use themselves (with ``pair-*``)."""


def page_name(stem: str, number: int) -> str:
    """``report.html`` for the main page (0); ``pairs-001.html``, ... for the drill-down's
    (``compare-pairs-001.html`` for another stem, so two documents can share a folder)."""
    if number < 1:
        return f"{stem}.html"
    return f"pairs-{number:03d}.html" if stem == "report" else f"{stem}-pairs-{number:03d}.html"


def stale_pages(directory: Path, stem: str, keep: Sequence[str]) -> list[Path]:
    """Drill-down pages of an earlier ``stem`` document that this one does not write."""
    prefix = "pairs-" if stem == "report" else f"{re.escape(stem)}-pairs-"
    pattern = re.compile(rf"^{prefix}\d{{3,}}\.html$")
    return sorted(
        p for p in directory.glob("*pairs-*.html") if pattern.match(p.name) and p.name not in keep
    )


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return _format.visible(value)
    if value is None:
        return ""
    return value


_DICT_ATTRIBUTES = frozenset(dir(dict))


class _Environment(jinja2.Environment):
    def getattr(self, obj: Any, attribute: str) -> Any:
        """``x.key`` of a plain dict without first failing to find an attribute (what a
        dict has are its type's): the same value, without the drill-down's ~130,000
        caught exceptions."""
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


def environment() -> jinja2.Environment:
    env = _Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pieces=_format.pieces, clip=_format.clip, width=_width)
    env.globals.update(numeric=_format.NUMERIC)
    return env


def _width(value: Any) -> str:
    """A CSS percentage for a rate bar (numbers only, never data text)."""
    if _format.is_missing(value):
        return "0%"
    return f"{max(0.0, min(1.0, float(value))) * 100:.1f}%"


# ------------------------------------------------------------------------ tables


@dataclass
class _TableView:
    table: Table
    headers: Sequence[Column]
    rows: list[list[tuple[str, _format.Cell]]]
    """Per row, per column: (format, cell)."""


def _table_view(table: Table) -> _TableView:
    rows: list[list[tuple[str, _format.Cell]]] = [
        [(c.format, _format.cell(c, row)) for c in table.columns]
        for row in cast(list[dict[str, Any]], table.data.to_dict("records"))
    ]
    return _TableView(table, table.columns, rows)


# -------------------------------------------------------------------- drill-down


BRANCHES = ("current", "reveal", "override")
_SHOWN = (("A", "current"), ("B", "current"), *((v, b) for v in "AB" for b in BRANCHES[1:]))
"""A cell's memories in the order a page shows them: both after the prefix, then (folded)
A's and B's after each future."""
_AFTER = {"current": "after the prefix", "reveal": "after reveal", "override": "after override"}
_SAME = Markup('<p class="small">The same memory as <a href="#%s">%s</a>.</p>\n')
"""A memory shown earlier in the pair: a link to it (its anchor and description escaped)."""


def _lines_size(lines: Sequence[dict[str, Any]] | None) -> int:
    return sum(min(len(line["text"]), LINE_CLIP) + 60 for line in lines or [])


def _size(pair: dict[str, Any]) -> int:
    """Rough characters a pair takes on a page (texts plus markup per line and read); a
    memory shown earlier in the pair is a reference, a line of text."""
    total = 2000
    for lines in [*pair.get("variants", {}).values(), *pair.get("futures", {}).values()]:
        total += _lines_size(lines)
    seen: set[str] = set()
    for cell in pair.get("cells", []):
        total += 1500
        for branches in cell["memories"].values():
            for memory in branches.values():
                sha = memory.get("sha")
                total += 200 if sha and sha in seen else _lines_size(memory.get("lines"))
                if sha:
                    seen.add(sha)
        for read in cell["reads"]:
            total += 400 + sum(
                min(len(read.get(k) or ""), LINE_CLIP) for k in ("answer", "raw_answer", "gold")
            )
            total += min(len(read.get("error") or ""), 2000)
    return total


def paginate(pairs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split drill-down pairs into pages by count and estimated size (order kept)."""
    pages: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for pair in pairs:
        cost = _size(pair)
        if current and (len(current) >= PAGE_PAIRS or size + cost > PAGE_CHARS):
            pages.append(current)
            current, size = [], 0
        current.append(pair)
        size += cost
    if current:
        pages.append(current)
    return pages


def _blocks(lines: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Runs of unmarked lines joined into one block; each marked line a block of its own.

    Texts stay plain strings (``_log`` escapes them); each line is clipped.
    """
    blocks: list[tuple[str, bool]] = []
    for mark, run in itertools.groupby(lines, key=lambda line: bool(line.get("mark"))):
        texts = [_format.clip(line["text"], LINE_CLIP) for line in run]
        blocks += [(text, True) for text in texts] if mark else [("\n".join(texts), False)]
    return blocks


def _text(value: str) -> str:
    """Untrusted text escaped for the content of an element (never an attribute): ``&``,
    ``<`` and ``>`` are all that can end text there; quotes stay as they are, which keeps
    a record log as short as its text."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fields(text: str) -> str:
    """Untrusted record text, escaped, in which a line may wrap only between fields:
    each comma-ended field is an inline block (a bare ``span`` in a line), so a narrow
    column breaks a record ``{"id":"r1",`` / ``"rev":2}`` and never inside a value
    (``"re`` / ``v":2``, ``"pebble-`` / ``226"``); a field wider than the column still
    wraps inside it.  Escaping leaves no comma or newline of its own."""
    escaped = _text(_format.visible(text))
    html = escaped.replace(",", ",</span><span>").replace("\n", "</span>\n<span>")
    return f"<span>{html}</span>".replace("<span></span>", "")


def _log(lines: Sequence[dict[str, Any]], anchor: str | None = None) -> Markup:
    """A record log or memory as a ``pre`` of blocks of lines (a marked block holds a
    distinguishing record), escaped here, once; ``anchor``: its id (built from numbers)."""
    out = [f'<pre class="log" id="{anchor}">' if anchor else '<pre class="log">']
    for text, mark in _blocks(lines):
        out.append('<span class="line mark">' if mark else '<span class="line">')
        out.append(_fields(text))
        out.append("</span>")
    out.append("</pre>")
    return Markup("".join(out))


def _memories(
    cell: dict[str, Any], number: int, seen: dict[str, Markup]
) -> dict[str, dict[str, Any]]:
    """A cell's memories as shown: ``bytes`` and ``html``: the escaped text, why there is
    none, or a link to the place in this pair that shows the same memory (by sha256)
    already: each memory's text is on the page once."""
    out: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    for variant, branch in _SHOWN:
        memory = cell["memories"].get(variant, {}).get(branch) or {}
        lines, sha = memory.get("lines"), memory.get("sha")
        if lines is None:
            html = Markup('<p class="muted small">memory not stored in this run</p>\n')
        elif not lines or (len(lines) == 1 and lines[0]["text"] == ""):
            html = Markup('<p class="muted small">(empty memory)</p>\n')
        elif sha and sha in seen:
            html = seen[sha]
        else:
            anchor = None
            if sha:
                anchor = f"pair-{number}-m{len(seen) + 1}"
                where = _format.visible(f"memory {variant} {_AFTER[branch]} of {cell['label']}")
                seen[sha] = _SAME % (anchor, where)
            html = _log(lines, anchor)
        out[variant][branch] = {"bytes": memory.get("bytes"), "html": html}
    return out


def _pair_view(pair: dict[str, Any], number: int) -> dict[str, Any]:
    """A drill-down pair with its logs rendered and each memory's text kept once (a copy;
    input untouched)."""
    view = dict(pair, number=number)
    view["variants"] = {k: _log(v) for k, v in pair.get("variants", {}).items()}
    view["futures"] = {k: _log(v) for k, v in pair.get("futures", {}).items()}
    view["n_lines"] = {k: len(v) for k, v in pair.get("variants", {}).items()}
    seen: dict[str, Markup] = {}
    view["cells"] = [
        dict(cell, memories=_memories(cell, number, seen)) for cell in pair.get("cells", [])
    ]
    return view


def outcome(pair: dict[str, Any], label: str) -> str:
    """``fail``, ``NA`` or ``pass`` for a system in a drilled pair; ``-`` if it has none."""
    for cell in pair.get("cells", []):
        if cell["label"] == label:
            return "fail" if cell["failed"] else "NA" if cell["na"] else "pass"
    return "pass" if label in pair.get("passing", []) else "-"


@dataclass
class _DrillView:
    block: DrillDown
    systems: list[str]
    index: list[dict[str, Any]]
    pairs: list[dict[str, Any]]
    """The pairs on this page, numbered from 1 across pages (none on the main page)."""
    page: int = 0
    """0: the main page (the index); 1, 2, ...: the drill-down's pages."""
    pages: list[str] = field(default_factory=list)
    """File name of every drill-down page, first to last."""
    home: str = ""
    """The main page's file name."""


def _drill_views(block: DrillDown, stem: str) -> tuple[_DrillView, list[_DrillView]]:
    """The main page's view (the index of every pair, no pair) and one per page."""
    pages = paginate(block.pairs)
    names = [page_name(stem, n) for n in range(1, len(pages) + 1)]
    home = page_name(stem, 0)
    labels = [c["label"] for p in block.pairs for c in p.get("cells", [])]
    labels += [s for p in block.pairs for s in p.get("passing", [])]
    systems = list(block.systems) or list(dict.fromkeys(labels))  # default: in order of appearance
    views, index, number = [], [], 0
    for page_number, pairs in enumerate(pages, start=1):
        numbered = []
        for pair in pairs:
            number += 1
            numbered.append(_pair_view(pair, number))
            index.append(
                {
                    "number": number,
                    "href": f"{names[page_number - 1]}#pair-{number}",
                    "pair_id": pair["pair_id"],
                    "family": pair.get("family", ""),
                    "outcomes": [outcome(pair, s) for s in systems],
                }
            )
        views.append(_DrillView(block, systems, index, numbered, page_number, names, home))
    return _DrillView(block, systems, index, [], 0, names, home), views


# ---------------------------------------------------------------------- document


def _check(doc: Document) -> DrillDown | None:
    """Ids are identifiers and unique (they become anchors); at most one drill-down."""
    seen: set[str] = set()
    ids = [s.id for s in doc.sections]
    drills: list[DrillDown] = []
    for block in [*doc.summary, *(b for s in doc.sections for b in s.blocks)]:
        if isinstance(block, Table | Chart):
            ids.append(block.id)
        if isinstance(block, DrillDown):
            drills.append(block)
    for name in ids:
        if not _ID.fullmatch(name) or name in seen or name in _RESERVED or name.startswith("pair-"):
            raise ValueError(f"not a unique identifier for an anchor: {name!r}")
        seen.add(name)
    if len(drills) > 1:
        raise ValueError("a document holds at most one drill-down")
    return drills[0] if drills else None


def _view(block: Block, drill: _DrillView | None) -> tuple[str, Any]:
    """(macro name, what it renders) for one block."""
    if isinstance(block, Table):
        return "table", _table_view(block)
    if isinstance(block, Chart):
        svg = _charts.render(block)
        return "chart", (block, None if svg is None else Markup(svg))
    if isinstance(block, DrillDown):
        return "drilldown", drill
    return type(block).__name__.lower(), block


def render_pages(doc: Document) -> dict[str, str]:
    """File name -> HTML: the main page (with the drill-down's index), then the
    drill-down's pages."""
    block = _check(doc)
    main, drills = _drill_views(block, doc.stem) if block is not None else (None, [])
    env = environment()
    context = {
        "doc": doc,
        "summary": [_view(b, None) for b in doc.summary],
        "sections": [(s, [_view(b, main) for b in s.blocks]) for s in doc.sections],
    }
    out = {page_name(doc.stem, 0): env.get_template("document.html.j2").render(**context)}
    for view in drills:
        out[page_name(doc.stem, view.page)] = env.get_template("pairs.html.j2").render(
            doc=doc, drill=view
        )
    return out
