"""Markdown for a pull request: the short form of a ``Document``, with no model output.

It loops over the same sections as the HTML and keeps what reads in a comment: the
facts, the summary, and each section's alerts, bullets, paragraphs and tables
(``markdown=True``, not collapsed); charts and the drill-down stay in the HTML.

Every text from data goes through ``md`` (or ``code``): a character is escaped only
where Markdown or HTML would act on it (``_`` at a word's edge, ``<`` before a tag name,
``&`` in an entity, ``@`` in an e-mail address (an empty comment after it), ``]`` before
a link target), so that the file reads cleanly as plain text (``frontier_latest @ 1200
B``, ``p < 0.05``) and renders as the same text on GitHub: no markup, no HTML, no link.
Control characters are shown as escapes. ``line`` adds what only matters at the start of
a line (``#``, ``>``, list marks). The tests render with GitHub's own cmark-gfm to hold
this."""

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
_ALWAYS = re.compile(r"([\\`*~|])")
"""Escaped wherever they stand: code spans, emphasis, strikethrough, table cells."""
_WORD_EDGE_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
"""An ``_`` not between two letters or digits: only there can it open or close emphasis."""
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
"""``<`` before what could start a tag, comment or autolink; ``p < 0.05`` stays.  (The
pieces of one text are escaped as one, so none can be completed by the next.)"""
_ENTITY_AMP = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_LINK_BRACKET = re.compile(r"\](?=[(\[:])")
"""``]`` before a link target, a reference or a definition's colon."""
_EMAIL_AT = re.compile(r"@(?=[A-Za-z0-9_-])|(?<=[A-Za-z0-9._+-])@")
"""``@`` before a name, or after a character an address may end in: GitHub links an
e-mail address (and ``mailto:``/``xmpp:`` addresses) after decoding entities, so
``&#64;`` does not stop it; an empty comment after the ``@`` splits the text where the
link would be read, and a renderer shows nothing of it.  The same stops an ``@name``
mention, which would notify whoever has that name on GitHub."""
_ISSUE_REF = re.compile(r"#(?=\d)")
"""``#12`` would link an issue or pull request on GitHub."""
_EMPTY_COMMENT = "<!---->"
_LINKS = (("://", "&#58;//"), ("www.", "www&#46;"))
_SPAN_BREAKERS = re.compile(r"[`|]|://|www\.|[A-Za-z0-9._+-]@")
"""What keeps a text out of a code span: a backquote ends it, ``|`` splits a table cell,
and an address must not stand in the file as one (a viewer other than GitHub's may
link it even in code)."""


def _one_line(value: object) -> str:
    """The visible text of a value, clipped, on one line."""
    text = _format.visible(_format.clip("" if value is None else value, CLIP))
    return text.replace("\n", " ").replace("\t", " ")


def md(value: object) -> str:
    """Inline-safe Markdown text (table cells included): escaped only where Markdown or
    HTML would act on it."""
    text = _one_line(value)
    text = _ENTITY_AMP.sub("&amp;", text)
    text = _TAG_OPEN.sub("&lt;", text)
    text = _ALWAYS.sub(r"\\\1", text)
    text = _WORD_EDGE_UNDERSCORE.sub(r"\\_", text)
    text = _LINK_BRACKET.sub(r"\\]", text)
    text = _EMAIL_AT.sub("@" + _EMPTY_COMMENT, text)
    text = _ISSUE_REF.sub("#" + _EMPTY_COMMENT, text)
    for raw, safe in _LINKS:
        text = text.replace(raw, safe)
    return text


def _line_start(text: str) -> str:
    """Escaped Markdown that starts a line: leading blanks dropped (four would make
    code), and a heading, quote, list, rule or task-box mark there escaped."""
    text = text.lstrip()
    match = re.match(r"[-+=#>\[]|\d+(?=[.)](?:\s|$))", text)
    if not match:
        return text
    if text[0] in "-+=#>[":
        return f"\\{text}"
    return f"{text[: match.end()]}\\{text[match.end() :]}"


def code(value: object) -> str:
    """Monospaced text: a code span (which shows its text raw, ``<``, ``_`` and links
    included) when nothing in the text can end or split it; else a ``<code>`` element
    around escaped text (``_SPAN_BREAKERS``; blanks at a span's ends would be trimmed)."""
    shown = _one_line(value)
    if shown and shown == shown.strip() and not _SPAN_BREAKERS.search(shown):
        return f"`{shown}`"
    return f"<code>{md(value)}</code>"


def text(value: Text) -> str:
    """Inline pieces: strong and flags in bold, code as code (``code``)."""
    out = []
    merged: list[tuple[str, str]] = []
    for kind, piece in _format.pieces(value):
        if merged and kind == merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + piece)  # escaped as one: no link across
        else:
            merged.append((kind, piece))
    for kind, piece in merged:
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
    """Text that starts a line (``_line_start``)."""
    return _line_start(text(value))


def _cell(kind: str, cell: _format.Cell) -> str:
    if kind == "label" and cell.text:
        return f"**{md(cell.text)}**" + (f" {md(cell.extra)}" if cell.extra else "")
    return " ".join(md(p) for p in (cell.text, cell.detail, cell.extra) if p)


MAX_TABLE_ROWS = 40
"""Rows of a table in the short form: a longer one (the default audit's transform table
has 90) is named with its row count and left to the HTML and its CSV, so the file
stays a pull-request comment."""


def _table(table: Table) -> list[str]:
    lines = [line(table.caption), ""] if table.caption else []
    if table.data.empty:
        return [*lines, line(table.empty), ""]
    if len(table.data) > MAX_TABLE_ROWS:
        where = f"the HTML page and {table.csv}" if table.csv else "the HTML page"
        return [f"A table of {len(table.data):,} rows: in {md(where)}.", ""]
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
        return [*(f"- {_line_start(md(label))}: {text(value)}" for label, value in block.items), ""]
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
        parts = [_block(block) for block in section.blocks] if section.markdown else []
        body = [line for part in parts for line in part]
        lines += [f"### {number}. {md(section.title)}", ""]
        lines += body or [f"In {page} (charts, long tables or model output).", ""]
        if body and not all(parts):  # its text alone read as a section without numbers
            lines += [f"Its charts and long tables are in {page}.", ""]
    extras = ["charts", "every table"]
    if any(isinstance(b, DrillDown) for s in doc.sections for b in s.blocks):
        extras.append("the per-pair drill-down")
    lines += [f"The full {md(doc.stem)} ({', '.join(extras)}) is {page} next to this file.", ""]
    return "\n".join(lines)
