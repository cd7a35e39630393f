"""Markdown for a pull request: the short form of a ``Document``, with no model output.

It loops over the same sections as the HTML and keeps what reads in a comment: the
facts, the summary, and each section's alerts, bullets, paragraphs and tables
(``markdown=True``, not collapsed); charts and the drill-down stay in the HTML.

Every text from data goes through ``md``: characters Markdown or HTML would act on
are backslash-escaped or entity-encoded, control characters shown as escapes, and
nothing can turn into a link (``://``, ``www.`` and ``@`` are broken up).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from reports import _format
from reports._document import (
    Alert,
    Block,
    Bullets,
    Chart,
    Document,
    DrillDown,
    Facts,
    Paragraph,
    Table,
    Text,
)

CLIP = 1000
"""Characters of one text in the short form (a pull-request comment has a size limit)."""
_SPECIAL = re.compile(r"([\\`*_\[\]|~#!])")
_LINKS = (("://", "&#58;//"), ("www.", "www&#46;"), ("@", "&#64;"))


def md(value: object) -> str:
    """Inline-safe Markdown text (table cells included)."""
    text = _format.clip("" if value is None else value, CLIP)
    text = _format.visible(text).replace("\n", " ").replace("\t", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _escape_list_mark(_SPECIAL.sub(r"\\\1", text))
    for raw, safe in _LINKS:
        text = text.replace(raw, safe)
    return text


def _escape_list_mark(text: str) -> str:
    """A leading ``-``, ``+`` or ``=`` (a list, a rule, a heading's underline) or ``1.``
    (a numbered list), after any blanks, is escaped."""
    match = re.match(r"\s*(?:[-+=]|\d+(?=[.)](?:\s|$)))", text)
    if not match:
        return text
    if text[match.end() - 1] in "-+=":
        return f"{text[: match.end() - 1]}\\{text[match.end() - 1 :]}"
    return f"{text[: match.end()]}\\{text[match.end() :]}"


def code(value: object) -> str:
    """Monospaced text as a ``<code>`` element around escaped text (a code span would
    show its text raw, ``<`` included)."""
    return f"<code>{md(value)}</code>"


def text(value: Text) -> str:
    """Inline pieces: strong and flags in bold, code in ``<code>``."""
    out = []
    for kind, piece in _format.pieces(value):
        if kind == "code":
            out.append(code(piece))
        elif kind in ("strong", "flag") and piece.strip():
            # emphasis must not start or end with a blank: keep blanks outside it
            before, after = " " * (piece != piece.lstrip()), " " * (piece != piece.rstrip())
            out.append(f"{before}**{md(piece.strip())}**{after}")
        else:
            out.append(md(piece))
    return "".join(out)


def line(value: Text) -> str:
    """Text that starts a line: leading blanks dropped (four would make code)."""
    return text(value).lstrip()


def _cell(kind: str, cell: _format.Cell) -> str:
    parts = [cell.text, cell.detail, cell.extra]
    shown = " ".join(md(p) for p in parts if p)
    if kind == "label" and cell.text:
        return f"**{md(cell.text)}**" + (f" {md(cell.extra)}" if cell.extra else "")
    return shown


def _table(table: Table) -> list[str]:
    lines = [line(table.caption), ""] if table.caption else []
    if table.data.empty:
        return [*lines, line(table.empty), ""]
    header = [md(c.header) or " " for c in table.columns]
    align = ["---:" if c.format in _format.NUMERIC else "---" for c in table.columns]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for row in cast(list[dict[str, Any]], table.data.to_dict("records")):
        cells = [_cell(c.format, _format.cell(c, row)) for c in table.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _block(block: Block) -> list[str]:
    """The block's lines, or none for what the short form leaves out."""
    if isinstance(block, Table):
        return [] if block.collapsed or not block.markdown else _table(block)
    if isinstance(block, Chart | DrillDown):
        return []
    if isinstance(block, Alert):
        mark = {"warn": "⚠ ", "ok": "✓ "}.get(block.level, "")
        head = f"> **{mark}{md(_format.plain(block.title)).strip()}**"
        lines = [head + (f" {line(block.body)}" if block.body else "")]
        lines += [f"> - {line(item)}" for item in block.items]
        return [*lines, ""]
    if isinstance(block, Bullets):
        return [*(f"- {line(item)}" for item in block.items), ""]
    if isinstance(block, Paragraph):
        return [line(block.text), ""]
    if isinstance(block, Facts):
        return [*(f"- {md(label)}: {text(value)}" for label, value in block.items), ""]
    raise TypeError(f"not a block: {type(block).__name__}")


def _blocks(blocks: Sequence[Block]) -> list[str]:
    return [line for block in blocks for line in _block(block)]


def render_markdown(doc: Document) -> str:
    """The short form of ``doc`` (its HTML page is named at the end)."""
    lines = [f"## {md(doc.title)}", "", *_blocks([doc.facts]), *_blocks(doc.summary)]
    page = f"{md(doc.stem)}.html"
    for number, section in enumerate(doc.sections, start=1):
        # every section keeps its number (the same as in the HTML), so a pointer to
        # "section 6" means one thing in both forms
        body = _blocks(section.blocks) if section.markdown else []
        lines += [f"### {number}. {md(section.title)}", ""]
        lines += body or [f"In {page} (charts, long tables or model output).", ""]
    extras = ["charts", "every table"]
    if any(isinstance(b, DrillDown) for s in doc.sections for b in s.blocks):
        extras.append("the per-pair drill-down")
    lines += [f"The full {md(doc.stem)} ({', '.join(extras)}) is {page} next to this file.", ""]
    return "\n".join(lines)
