"""The renderers of ``reports``: every block kind, hostile text, formats, files, charts.

Geometry (overlaps, clipping, wrapping) is measured in a browser by
tests/reports/test_reports_layout.py; here the HTML, Markdown, CSV and SVG are checked as
text, and the charts as drawn (panels and series) and as SVG.
"""

from __future__ import annotations

import html as html_module
import itertools
import math
import random
import re
import unicodedata
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import cmarkgfm
import markupsafe
import pandas as pd
import pytest
from cmarkgfm.cmark import Options as CmarkOptions
from hypothesis import given, settings
from hypothesis import strategies as st

from reports import (
    Alert,
    Block,
    Bullets,
    Chart,
    Code,
    Column,
    Document,
    DrillDown,
    Facts,
    Flag,
    Paragraph,
    Section,
    Strong,
    Table,
    _charts,
    _format,
    _html,
    _markdown,
    visible,
    write_document,
)
from tests import _report_samples as samples

MAX_PAGE_BYTES = 10_000_000


def _page(doc: Document) -> str:
    return _html.render_pages(doc)[f"{doc.stem}.html"]


def _proportion_row(**values: Any) -> dict[str, Any]:
    return {"m_k": 3, "m_k_high": 3, "m_n": 10, "m_low": 0.1, "m_high": 0.6} | values


def _small_drill(count: int = 3) -> DrillDown:
    pairs = samples._drilldown(random.Random(1), count)
    return DrillDown(pairs, notes=["notes come first"])


def _every_kind() -> Document:
    """One block of each kind, in the summary and in sections."""
    table = Table(
        "t-main",
        [
            Column("name", "system", "label", help="Which system"),
            Column("m", "joint J (source pairs)", "proportion"),
            Column("note", "note"),
        ],
        pd.DataFrame([{"name": "frontier", "note": "kept", "hidden": 1.0} | _proportion_row()]),
        csv="main.csv",
        caption=["Caption with ", Code("code")],
    )
    chart = Chart(
        "c-dots",
        "dots",
        pd.DataFrame([{"name": "frontier"} | _proportion_row()]),
        {"label": "name", "series": [("m", "joint J")]},
        caption="A caption",
        title="A chart",
    )
    return Document(
        title="Every kind",
        facts=Facts([("run", [Code("runs/x")]), ("pairs", "12")]),
        summary=[
            Alert("warn", ["Ranks ", Strong("frontier"), " first"], body="Body", items=["one"]),
            Alert("ok", "All clear"),
        ],
        sections=[
            Section("tables", "Tables", [table, Paragraph("A paragraph", muted=True)]),
            Section("charts", "Charts", [chart, Bullets(["first", [Flag("flagged")]])]),
            Section("facts", "Facts", [Facts([("machine", "test")]), Alert("info", "Info")]),
            Section("pairs", "Pairs", [_small_drill()], markdown=False),
        ],
    )


# ----------------------------------------------------------------- block kinds


def test_every_block_kind_renders_in_html() -> None:
    html = _page(_every_kind())
    assert '<table id="t-main">' in html
    assert '<figure id="c-dots" class="chart">' in html
    assert "<svg" in html
    assert 'class="box warn" role="alert"' in html
    assert 'class="box ok"' in html
    assert 'class="box info"' in html
    assert "<strong>frontier</strong>" in html
    assert "<code>runs/x</code>" in html
    assert '<span class="flag">flagged</span>' in html
    assert '<p class="small muted">A paragraph</p>' in html
    assert "<dt>machine</dt><dd>test</dd>" in html
    assert 'id="pair-index"' in html
    assert 'href="pairs-001.html#pair-1"' in html  # the pairs are on a page of their own
    assert 'id="pair-1"' in _html.render_pages(_every_kind())["pairs-001.html"]
    # numbered sections, and a table of contents built from them
    for number, (anchor, title) in enumerate(
        [("tables", "Tables"), ("charts", "Charts"), ("facts", "Facts"), ("pairs", "Pairs")], 1
    ):
        assert f'<section id="{anchor}">\n<h2>{number}. {title}</h2>' in html
        assert f'<li><a href="#{anchor}">{title}</a></li>' in html


def test_every_block_kind_renders_in_markdown() -> None:
    text = _markdown.render_markdown(_every_kind())
    assert text.startswith("## Every kind\n")
    assert "- run: `runs/x`" in text
    assert "> **⚠ Ranks frontier first** Body\n> - one" in text
    assert "> **✓ All clear**" in text
    assert "| **frontier** | 3/10 [0.10, 0.60] | kept |" in text
    assert "|---|---:|---|" in text
    assert "Caption with `code`" in text
    assert "- **flagged**" in text
    assert "A paragraph" in text
    assert "### 1. Tables" in text
    assert "### 2. Charts" in text
    assert "### 3. Facts" in text
    # a section left out of the short form keeps its number, and says where it is
    assert "### 4. Pairs\n\nIn report.html (charts, long tables or model output)." in text
    # a section whose text is here and whose chart is not says where the rest is (its
    # text alone read as a section without numbers)
    charts = text.split("### 2. Charts")[1].split("### 3.")[0]
    assert charts.rstrip().endswith("Its charts and long tables are in report.html.")
    assert "Its charts" not in text.split("### 3. Facts")[1]
    assert "<svg" not in text
    assert "A chart" not in text
    assert "notes come first" not in text
    assert "Variant A" not in text
    assert "rollback" not in text


def test_markdown_leaves_out_collapsed_and_long_form_tables() -> None:
    frame = pd.DataFrame([{"a": "shown-nowhere"}])
    doc = Document(
        "t",
        Facts([]),
        sections=[
            Section(
                "s",
                "Section",
                [
                    Table("t1", [Column("a", "a")], frame, collapsed=True),
                    Table("t2", [Column("a", "a")], frame, markdown=False),
                ],
            )
        ],
    )
    text = _markdown.render_markdown(doc)
    assert "shown-nowhere" not in text
    assert "### 1. Section\n\nIn report.html" in text  # numbered as in the HTML, pointing there
    html = _page(doc)
    assert html.count("shown-nowhere") == 2
    assert "<details><summary>the table (1 rows)</summary>" in html


def test_a_folded_tables_caption_never_stands_alone() -> None:
    """Issue 28: a caption stood alone after the summary's bullets (the ranking table's,
    folded and empty). A folded table's caption is its summary line; an empty one shows
    its empty text, which says what is missing, without the caption."""
    caption = "Pairs of conditions ranked in opposite orders."
    frame = pd.DataFrame([{"a": "x"}])
    empty = Table(
        "t1",
        [Column("a", "a")],
        frame.iloc[0:0],
        caption=caption,
        collapsed=True,
        empty="No inversion.",
    )
    folded = Table("t2", [Column("a", "a")], frame, caption=caption, collapsed=True)
    doc = Document(
        "t",
        Facts([]),
        summary=[Bullets(["a finding"]), empty],
        sections=[Section("s", "s", [folded])],
    )
    html = _page(doc)
    assert html.count(caption) == 1
    assert f"<details><summary>{caption} (the table, 1 rows)</summary>" in html
    assert '<p class="muted">No inversion.</p>' in html


def test_a_document_without_sections_renders(tmp_path: Path) -> None:
    doc = Document("Empty", Facts([]))
    paths = write_document(doc, tmp_path)
    assert [p.name for p in paths] == ["report.html", "report.md"]
    html = (tmp_path / "report.html").read_text()
    assert "<h1>Empty</h1>" in html
    assert 'class="toc"' not in html
    assert "<section" not in html
    assert (tmp_path / "report.md").read_text().startswith("## Empty\n")


def test_an_empty_table_and_an_empty_chart_say_so() -> None:
    empty = pd.DataFrame(columns=["name", "m_k", "m_n"])
    doc = Document(
        "t",
        Facts([]),
        sections=[
            Section(
                "s",
                "S",
                [
                    Table("t1", [Column("name", "name")], empty, empty="No comparison."),
                    Chart("c1", "dots", empty, {"label": "name", "series": [("m", "m")]}),
                ],
            )
        ],
    )
    html = _page(doc)
    assert "No comparison." in html
    assert "Nothing to chart." in html
    assert "<svg" not in html


def test_headers_carry_help_and_numbers_align_right() -> None:
    html = _page(_every_kind())
    assert '<th title="Which system"><span class="nw">system</span></th>' in html
    assert '<th class="num"><span class="nw">joint</span> <span class="nw">J</span>' in html
    assert (
        '<td class="num"><span class="kn">3/10</span><span class="ci">[0.10, 0.60]</span>' in html
    )
    assert '<td class="label"><strong>frontier</strong></td>' in html


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Section("no spaces", "x"), "identifier"),
        (Section("summary", "x"), "identifier"),
        (Section("pair-3", "x"), "identifier"),
    ],
)
def test_ids_must_be_unique_identifiers(bad: Section, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _page(Document("t", Facts([]), sections=[bad]))
    with pytest.raises(ValueError, match="identifier"):
        _page(Document("t", Facts([]), sections=[Section("a", "a"), Section("a", "b")]))


def test_files_need_plain_names(tmp_path: Path) -> None:
    frame = pd.DataFrame([{"a": 1}])
    with pytest.raises(ValueError, match="stem"):
        write_document(Document("t", Facts([]), stem="../x"), tmp_path)
    for name in ("../x.csv", "x.txt"):
        doc = Document(
            "t", Facts([]), sections=[Section("s", "s", [Table("t1", [], frame, csv=name)])]
        )
        with pytest.raises(ValueError, match="CSV"):
            write_document(doc, tmp_path)
    twice: list[Block] = [Table("t1", [], frame, csv="x.csv"), Table("t2", [], frame, csv="x.csv")]
    with pytest.raises(ValueError, match="CSV"):
        write_document(Document("t", Facts([]), sections=[Section("s", "s", twice)]), tmp_path)
    with pytest.raises(ValueError, match="one drill-down"):
        _page(Document("t", Facts([]), summary=[_small_drill(), _small_drill()]))


# --------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("column", "row", "text", "detail", "extra"),
    [
        (Column("m", "m", "proportion"), _proportion_row(), "3/10", "[0.10, 0.60]", ""),
        (
            Column("m", "m", "proportion"),
            _proportion_row(m_k_high=5),
            "3..5/10 (bounds)",
            "[0.10, 0.60]",
            "",
        ),
        (Column("m", "m", "proportion"), _proportion_row(m_n=0), "-", "", ""),
        (Column("m", "m", "proportion"), _proportion_row(m_n=math.nan, m_k=math.nan), "-", "", ""),
        (Column("m", "m", "proportion"), _proportion_row(m_low=None), "3/10", "", ""),
        (
            Column(
                "m",
                "m",
                "proportion",
                digits=3,
                interval=("b_low", "b_high"),
                interval_label="boot",
            ),
            _proportion_row(b_low=0.2, b_high=0.5),
            "3/10",
            "[0.100, 0.600]",
            "boot [0.200, 0.500]",
        ),
        (Column("m", "m", "count"), {"m_k": 2, "m_n": 7}, "2/7", "", ""),
        (Column("m", "m", "count"), {"m_k": 0, "m_n": 0}, "-", "", ""),
        (Column("v", "v", "integer"), {"v": 1234567.0}, "1,234,567", "", ""),
        (Column("v", "v", "integer"), {"v": pd.NA}, "", "", ""),
        (Column("v", "v", "number", digits=1), {"v": 1234.56}, "1,234.6", "", ""),
        (Column("v", "v", "rate"), {"v": 0.3333}, "0.33", "", ""),
        (Column("v", "v", "rate"), {"v": None}, "-", "", ""),
        (Column("v", "v", "signed"), {"v": 0.25}, "+0.25", "", ""),
        (
            Column("v", "v", "signed", interval=("lo", "hi"), interval_label="boot"),
            {"v": -0.5, "lo": -0.7, "hi": -0.2},
            "-0.50",
            "",
            "boot [-0.70, -0.20]",
        ),
        (Column("v", "v", "pvalue"), {"v": 0.00001}, "<0.0001", "", ""),
        (Column("v", "v", "pvalue"), {"v": 0.01234}, "0.0123", "", ""),
        (Column("v", "v", "flag", flag_text="significant"), {"v": True}, "significant", "", ""),
        (Column("v", "v", "flag", flag_text="significant"), {"v": math.nan}, "", "", ""),
        (Column("v", "v", "flag", flag_text="significant"), {"v": pd.NA}, "", "", ""),
        (Column("v", "v", "label"), {"v": "frontier"}, "frontier", "", ""),
        (Column("v", "v", "text"), {"v": math.nan}, "", "", ""),
        (Column("v", "v", "text"), {}, "", "", ""),
    ],
)
def test_cell_formats(
    column: Column, row: dict[str, Any], text: str, detail: str, extra: str
) -> None:
    cell = _format.cell(column, row)
    assert (cell.text, cell.detail, cell.extra) == (text, detail, extra)


def test_bounds_are_marked_in_html_and_markdown() -> None:
    doc = Document(
        "t",
        Facts([]),
        sections=[
            Section(
                "s",
                "s",
                [
                    Table(
                        "t1",
                        [Column("m", "m", "proportion")],
                        pd.DataFrame([_proportion_row(m_k_high=5), _proportion_row(m_n=0)]),
                    )
                ],
            )
        ],
    )
    html = _page(doc)
    assert '<span class="kn bound">3..5/10 (bounds)</span>' in html
    assert '<td class="num"><span class="muted">-</span></td>' in html
    text = _markdown.render_markdown(doc)
    assert "| 3..5/10 (bounds) [0.10, 0.60] |" in text
    assert "| - |" in text


def test_long_texts_are_clipped_everywhere() -> None:
    row = {"label": "x" * 5000, "text": "y" * 5000}
    label = _format.cell(Column("label", "l", "label"), row).text
    text = _format.cell(Column("text", "t", "text"), row).text
    assert label.startswith("x" * _format.LABEL_CLIP)
    assert "4,800 more characters" in label
    assert text.startswith("y" * _format.CELL_CLIP)
    assert "4,000 more characters" in text
    assert len(_markdown.md("z" * 50_000)) < 1100
    assert _format.shorten("a  b\nc" + "d" * 200, 10) == "a b cdd..."


# ---------------------------------------------------------------- hostile text


HOSTILE = samples.HOSTILE + " {{ 7*7 }} {% raw %} </table></pre><h1>out</h1>"


def _hostile_document() -> Document:
    frame = pd.DataFrame(
        [
            {"name": HOSTILE, "note": HOSTILE, "budget": 600} | _proportion_row(),
            {"name": "$x$ {y}", "note": "", "budget": 1200} | _proportion_row(),
        ]
    )
    drill = _small_drill(2)
    drill.pairs[0]["pair_id"] = HOSTILE
    drill.pairs[0]["cells"][0]["label"] = HOSTILE
    return Document(
        title=HOSTILE,
        facts=Facts([(HOSTILE, HOSTILE)]),
        summary=[Alert("warn", HOSTILE, body=[Strong(HOSTILE)], items=[[Code(HOSTILE)]])],
        sections=[
            Section(
                "s",
                HOSTILE,
                [
                    Table(
                        "t1",
                        [Column("name", HOSTILE, "label", help=HOSTILE), Column("note", "note")],
                        frame,
                        csv="t.csv",
                        caption=HOSTILE,
                    ),
                    Chart(
                        "c1",
                        "dots",
                        frame,
                        {"label": "name", "series": [("m", HOSTILE)], "axis": HOSTILE},
                        title=HOSTILE,
                        caption=HOSTILE,
                    ),
                    Chart(
                        "c2",
                        "curve",
                        frame,
                        {"x": "budget", "prefix": "m", "series": "name", "x_title": HOSTILE},
                    ),
                    Bullets([HOSTILE]),
                    Paragraph(HOSTILE),
                    drill,
                ],
            )
        ],
    )


def test_hostile_text_is_inert_in_html(tmp_path: Path) -> None:
    write_document(_hostile_document(), tmp_path)
    pages = [p.read_text(encoding="utf-8") for p in sorted(tmp_path.glob("*.html"))]
    html = "\n".join(pages)
    lowered = html.lower()
    assert "<script" not in lowered
    assert "<img" not in lowered
    assert "<h1>out" not in lowered
    assert "&lt;script&gt;alert(" in html
    assert "{{ 7*7 }} {% raw %}" in html  # not evaluated by the template engine
    for char in ("\u202e", "\u200b", "\x1b"):
        assert char not in html
    for shown in ("\\u202e", "\\u200b", "\\x1b"):
        assert shown in html
    for page in pages:
        assert "Content-Security-Policy" in page
        assert "default-src 'none'" in page
        tags = _Tags()
        tags.feed(page)
        assert tags.names <= ALLOWED_TAGS, tags.names - ALLOWED_TAGS
        assert not tags.attributes & {"src", "srcset", "action", "formaction", "onerror", "onload"}
        assert tags.hrefs
        assert all(
            re.fullmatch(r"(report\.html|pairs-\d{3}\.html)?#[\w-]+", h) for h in tags.hrefs
        ), tags.hrefs
        assert page.count("<table") == page.count("</table>")
        assert page.count("<pre") == page.count("</pre>")


class _Tags(HTMLParser):
    """Every element and attribute name of a page, and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.attributes: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.hrefs += [str(v) for k, v in attrs if k in ("href", "xlink:href")]


ALLOWED_TAGS = {
    *[
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "header",
        "h1",
        "h2",
        "h3",
        "h4",
        "nav",
        "ol",
        "ul",
        "li",
        "a",
        "section",
        "p",
        "dl",
        "dt",
        "dd",
    ],
    *[
        "div",
        "span",
        "strong",
        "code",
        "pre",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "details",
        "summary",
        "figure",
        "figcaption",
    ],
    *["colgroup", "col"],
    *["svg", "g", "path", "defs", "use", "clippath", "rect", "text", "pattern"],
}


def test_hostile_text_is_inert_in_markdown_and_kept_in_csv(tmp_path: Path) -> None:
    write_document(_hostile_document(), tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    rendered = _github(text)  # as GitHub shows it: our markup only, none of the text's
    assert _tags(rendered) <= {"h2", "h3", "p", "ul", "li", "blockquote", "strong", "code",
                               "table", "thead", "tbody", "tr", "th", "td"}, rendered  # fmt: skip
    assert "<script" not in rendered
    assert "<img" not in rendered
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\\\\u202e" in text
    assert "https://" not in text
    assert "https&#58;//" in text
    frame = pd.read_csv(tmp_path / "t.csv")
    assert frame["name"][0] == HOSTILE  # CSV keeps data as data


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_escaped_in_html(value: str) -> None:
    doc = Document("t", Facts([("fact", value)]), summary=[Paragraph(value)])
    html = _page(doc)
    shown = str(markupsafe.escape(visible(value)))
    assert f"<dd>{shown}</dd>" in html
    body = html.split("<body>", 1)[1]
    assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in body if c not in "\n\t")


MARKDOWN_TEXT = st.one_of(
    st.text(
        alphabet=st.one_of(
            st.sampled_from(list("\\`*_[]()|~#!<>&;@:/.w -+=0123456789ab\n\t^")),
            st.characters(),
        ),
        max_size=200,
    ),
    st.from_regex(
        r"(mailto:|xmpp:)?[a-z]{1,5}@[a-z]{1,5}\.[a-z]{2,3}( [a-z]{1,4})?", fullmatch=True
    ),
)
"""Any text, weighted towards what Markdown, HTML and GitHub's autolinks act on."""


def _github(markdown: str) -> str:
    """HTML as GitHub renders Markdown (cmark-gfm with its extensions), raw HTML kept, so
    that any that got through shows (less the empty comments that split e-mail
    addresses, which show nothing)."""
    return _uncommented(
        cmarkgfm.github_flavored_markdown_to_html(markdown, options=CmarkOptions.CMARK_OPT_UNSAFE)
    )


def _shown(value: str) -> str:
    """What a reader must see of ``value``: its visible text on one line (blanks at its
    ends are the renderer's to drop)."""
    return visible(value).replace("\n", " ").replace("\t", " ").strip()


def _tags(html: str) -> set[str]:
    return set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html))


def _uncommented(html: str) -> str:
    """Rendered HTML without the empty comments that keep e-mail addresses unlinked
    (a browser shows nothing of them)."""
    return html.replace("<!---->", "")


@settings(max_examples=300, deadline=None)
@given(MARKDOWN_TEXT)
def test_markdown_renders_on_github_as_the_text_itself(value: str) -> None:
    """Escaped text, as a line, in bold and in a table cell, renders as exactly its text:
    no emphasis, code, link, image, heading, list, quote or raw HTML."""
    shown = _shown(value)
    as_line = _github(_markdown.line(value) + "\n")
    assert _tags(as_line) <= {"p"}, as_line
    assert html_module.unescape(re.sub(r"</?p>", "", as_line)).strip() == shown
    if value.strip():
        bold = _github(f"**{_markdown.md(value.strip())}**\n")
        assert _tags(bold) <= {"p", "strong"}, bold
        inner = re.fullmatch(r"<p><strong>(.*)</strong></p>\n", bold, re.DOTALL)
        assert inner, bold
        assert html_module.unescape(inner.group(1)) == _shown(value.strip())
    table = _github(f"| a | b |\n|---|---|\n| {_markdown.md(value)} | z |\n")
    assert _tags(table) <= {"table", "thead", "tbody", "tr", "th", "td"}, table
    cells = re.findall(r"<td>(.*?)</td>", table, re.DOTALL)
    assert len(cells) == 2, table
    assert html_module.unescape(cells[0]).strip() == shown
    assert cells[1] == "z"


@settings(max_examples=200, deadline=None)
@given(MARKDOWN_TEXT)
def test_markdown_stays_on_one_line_with_no_link_text(value: str) -> None:
    text = _markdown.md(value)
    assert "\n" not in text
    assert "://" not in text
    assert "www." not in text
    assert not re.search(r"[A-Za-z0-9._+-]@(?!<!---->)", text)
    assert not _markdown.line(value).startswith(" ")


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("frontier_latest @ 1200 B", "frontier_latest @ 1200 B"),
        ("p < 0.05 after Holm", "p < 0.05 after Holm"),
        ("-0.38 Newcombe [-0.56, -0.15]", "-0.38 Newcombe [-0.56, -0.15]"),
        ("a|b", "a\\|b"),
        ("*bold* _it_", "\\*bold\\* \\_it\\_"),
        ("__init__ of snake_case", "\\_\\_init\\_\\_ of snake_case"),
        ("`code`", "\\`code\\`"),
        ("[link](x)", "[link\\](x)"),
        ("~strike~", "\\~strike\\~"),
        ("a\\b", "a\\\\b"),
        ("<b>&amp; & x", "&lt;b>&amp;amp; & x"),
        ("mail@host", "mail@<!---->host"),
        ("ping @octocat about #12", "ping @<!---->octocat about #<!---->12"),
        ("see https://x.org or www.x.org", "see https&#58;//x.org or www&#46;x.org"),
    ],
)
def test_markdown_escapes(raw: str, escaped: str) -> None:
    assert _markdown.md(raw) == escaped


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("# head", "\\# head"),
        ("- item", "\\- item"),
        ("---", "\\---"),
        ("  + item", "\\+ item"),
        ("> quote", "\\> quote"),
        ("[x] done", "\\[x] done"),
        ("0.25", "0.25"),
        ("1. item", "1\\. item"),
    ],
)
def test_a_line_escapes_its_start(raw: str, escaped: str) -> None:
    assert _markdown.line(raw) == escaped


def test_markdown_code_is_escaped_text() -> None:
    assert _markdown.code("a`b|<c>") == "<code>a\\`b\\|&lt;c></code>"
    # a plain command reads as itself in the file: a code span, no HTML
    assert _markdown.code("audit run --out runs/a_b") == "`audit run --out runs/a_b`"


@settings(max_examples=300, deadline=None)
@given(MARKDOWN_TEXT)
def test_markdown_code_renders_on_github_as_the_text_itself(value: str) -> None:
    """Code, in a line and in a table cell, renders as one code element holding exactly
    the text: no link, no markup, nothing trimmed or cut at a ``|``."""
    shown = visible(value).replace("\n", " ").replace("\t", " ")
    for rendered, cell in (
        (_github(f"see {_markdown.code(value)} here\n"), "p"),
        (_github(f"| a | b |\n|---|---|\n| {_markdown.code(value)} | z |\n"), "td"),
    ):
        assert _tags(rendered) <= {"p", "code", "table", "thead", "tbody", "tr", "th", "td"}
        found = re.findall(r"<code>(.*?)</code>", rendered, re.DOTALL)
        assert len(found) == 1, rendered
        assert html_module.unescape(found[0]) == shown, (cell, rendered)


# ----------------------------------------------------------------------- files


def test_csv_exports_hold_every_column(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "shown": ["a", "b"],
            "count": [1.0, math.nan],
            "rate": [1 / 3, 2.5e-7],
            "hidden": [True, False],
        }
    )
    doc = Document(
        "t",
        Facts([]),
        sections=[Section("s", "s", [Table("t1", [Column("shown", "shown")], frame, csv="t.csv")])],
    )
    paths = write_document(doc, tmp_path)
    assert tmp_path / "t.csv" in paths
    assert (tmp_path / "t.csv").read_text().splitlines() == [
        "shown,count,rate,hidden",
        "a,1,0.333333,True",
        "b,,2.5e-07,False",
    ]
    assert not list(tmp_path.glob(".*.tmp"))
    html = (tmp_path / "report.html").read_text()
    assert "hidden" not in html
    assert "0.333333" not in html


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The realistic sample written twice, into two folders."""
    first, second = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    write_document(samples.realistic(), first)
    write_document(samples.realistic(), second)
    return first, second


def test_the_same_document_gives_the_same_bytes(written: tuple[Path, Path]) -> None:
    first, second = written
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert {"report.html", "pairs-001.html", "pairs-002.html", "report.md", "headline.csv"} <= set(
        names
    )
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_pages_stay_small_and_link_to_each_other(written: tuple[Path, Path]) -> None:
    folder = written[0]
    main = (folder / "report.html").read_text()
    for page in folder.glob("*.html"):
        assert page.stat().st_size < MAX_PAGE_BYTES
    assert 'href="pairs-001.html#drilldown"' in main
    assert 'href="pairs-002.html#drilldown"' in main
    later = (folder / "pairs-002.html").read_text()
    assert 'href="report.html#pair-index"' in later
    assert 'href="pairs-001.html#drilldown"' in later
    assert 'id="pair-13"' in later
    assert 'href="pairs-002.html#pair-13"' in main
    first = (folder / "pairs-001.html").read_text()
    assert 'id="pair-12"' in first
    assert 'href="pairs-001.html#pair-12"' in main
    # the main page holds the index, never a drilled pair: its memories and reads grow
    # with pairs x conditions (6 MB on the default audit's report.html)
    assert 'class="pair"' not in main
    assert first.count('class="mark"') == 0
    assert first.count('class="line mark"') > 0


def test_large_drilldowns_split_by_size() -> None:
    memory = [{"text": "x" * 2000, "mark": False}] * 150
    cell = {
        "label": "c @ 1 B",
        "failed": True,
        "na": False,
        "identical": False,
        "memories": {
            v: {
                b: {"lines": memory, "bytes": 1, "sha": "s"}
                for b in ("current", "reveal", "override")
            }
            for v in "AB"
        },
        "reads": [],
    }
    pair = {
        "pair_id": "p",
        "family": "f",
        "query": ["k"],
        "distinguishing": [],
        "variants": {"A": [], "B": []},
        "futures": {"reveal": [], "override": []},
        "gold": {v: {b: "{}" for b in ("current", "reveal", "override")} for v in "AB"},
        "cells": [cell] * 3,
        "passing": [],
    }
    pairs = [dict(pair, pair_id=f"p{i}") for i in range(20)]
    pages = _html.render_pages(
        Document("t", Facts([]), sections=[Section("d", "d", [DrillDown(pairs)])])
    )
    assert len(pages) > 2
    assert len(_html.paginate(pairs)) + 1 == len(pages)  # the main page holds the index
    assert all(len(text.encode()) < MAX_PAGE_BYTES for text in pages.values())


def test_stale_drill_down_pages_are_removed(tmp_path: Path) -> None:
    long = Document(
        "t", Facts([]), sections=[Section("d", "d", [DrillDown(_small_drill(30).pairs)])]
    )
    assert {"pairs-002.html", "pairs-003.html"} <= {p.name for p in write_document(long, tmp_path)}
    for name in ("pairs-notes.html", "compare-pairs-002.html", "pairs-002.html.bak"):
        (tmp_path / name).write_text("kept")
    short = Document("t", Facts([]), sections=[Section("d", "d", [_small_drill(3)])])
    write_document(short, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert "pairs-002.html" not in names
    assert "pairs-003.html" not in names
    assert {
        "report.html",
        "pairs-notes.html",
        "compare-pairs-002.html",
        "pairs-002.html.bak",
    } <= names
    compare = Document(
        "c",
        Facts([]),
        sections=[Section("d", "d", [DrillDown(_small_drill(30).pairs)])],
        stem="compare",
    )
    assert "compare-pairs-002.html" in {p.name for p in write_document(compare, tmp_path)}
    write_document(Document("c", Facts([]), stem="compare"), tmp_path)
    assert not (tmp_path / "compare-pairs-002.html").exists()
    assert (tmp_path / "report.html").exists()


# ------------------------------------------------------------------ drill-down


def test_the_index_gives_each_systems_outcome() -> None:
    pair = {
        "pair_id": "p1",
        "family": "rollback",
        "cells": [
            {"label": "a", "failed": True, "na": True},
            {"label": "b", "failed": False, "na": True},
        ],
        "passing": ["c"],
    }
    assert [_html.outcome(pair, s) for s in ("a", "b", "c", "d")] == ["fail", "NA", "pass", "-"]
    drill = _small_drill(3)
    html = _page(Document("t", Facts([]), sections=[Section("d", "d", [drill])]))
    index = html.split('id="pair-index"', 1)[1].split("</table>", 1)[0]
    systems = re.findall(r'<th class="upright">(.*?)</th>', index)
    first = list(
        dict.fromkeys(
            [c["label"] for p in drill.pairs for c in p["cells"]]
            + [s for p in drill.pairs for s in p["passing"]]
        )
    )
    assert [re.sub(r"<[^>]+>", "", s) for s in systems] == [markupsafe.escape(s) for s in first]
    ordered = DrillDown(drill.pairs, systems=samples.drilled_systems())
    html = _page(Document("t", Facts([]), sections=[Section("d", "d", [ordered])]))
    index = html.split('id="pair-index"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", index)[1:]
    outcomes = [re.findall(r'class="label outcome out-([\w-]+)"', row) for row in rows]
    expected = [[_html.outcome(p, s) for s in samples.drilled_systems()] for p in drill.pairs]
    assert outcomes == expected
    assert {"fail", "NA", "pass"} <= {o for row in outcomes for o in row}


def test_a_memory_is_printed_once_per_pair_and_linked_where_it_repeats() -> None:
    """A cell holding one memory (one sha256) in its six places: the page prints it once,
    at an anchor, and links the other five to it; another cell's memory is its own."""
    drill = _small_drill(1)
    pair = drill.pairs[0]
    cells = [
        dict(cell, memories={v: {b: {"lines": [{"text": f"kept in cell {i}", "mark": False}],
                                     "bytes": 14, "sha": f"sha-{i}"}
                                 for b in ("current", "reveal", "override")} for v in "AB"})
        for i, cell in enumerate(pair["cells"])
    ]  # fmt: skip
    assert len(cells) > 1
    doc = Document(
        "t", Facts([]), sections=[Section("d", "d", [DrillDown([dict(pair, cells=cells)])])]
    )
    page = _html.render_pages(doc)["pairs-001.html"]
    anchors = re.findall(r'<pre class="log" id="(pair-1-m\d+)">', page)
    links = re.findall(r'<a href="#(pair-1-m\d+)">', page)
    assert len(anchors) == len(set(anchors)) == len(cells)
    assert sorted(links) == sorted(a for a in anchors for _ in range(5))
    for i in range(len(cells)):
        assert page.count(f"kept in cell {i}<") == 1
    unhashed = [
        dict(cell, memories={v: {"current": dict(m["current"], sha=None)}
                             for v, m in cell["memories"].items()})
        for cell in cells[:1]
    ]  # fmt: skip
    doc = Document(
        "t", Facts([]), sections=[Section("d", "d", [DrillDown([dict(pair, cells=unhashed)])])]
    )
    page = _html.render_pages(doc)["pairs-001.html"]
    assert page.count("kept in cell 0<") == 2  # no sha256, nothing to match: both shown
    assert "The same memory as" not in page


# ----------------------------------------------------------------------- charts


def _charts_of(doc: Document) -> list[Chart]:
    return [b for s in doc.sections for b in s.blocks if isinstance(b, Chart)]


def _legend(svg: str) -> list[str]:
    group = svg.split('-legend">', 1)[1] if '-legend">' in svg else ""
    return [
        markupsafe.Markup(t).unescape() for t in re.findall(r"<text[^>]*>([^<]*)</text>", group)
    ]


def test_charts_render_without_any_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for chart in _charts_of(samples.realistic()):
            svg = _charts.render(chart)
            assert svg is not None
            assert svg.startswith("<svg")


def test_every_legend_names_every_series() -> None:
    doc = samples.realistic()
    expected = {
        "headline-chart": ["current accuracy", "reveal accuracy", "joint J"],
        "forest-chart": ["significant", "not significant"],
        "transforms-chart": ["identity", "rename:2", "permute", "decoy"],
        "taxonomy-chart": [name for _, name in samples.CAUSES],
        "budget-chart": samples.CONDITIONS,
        "families-chart": [],
    }
    for chart in _charts_of(doc):
        svg = _charts.render(chart)
        assert svg is not None
        assert _legend(svg) == expected[chart.id], chart.id


def test_svgs_are_inert_sized_and_unique() -> None:
    doc = samples.realistic()
    svgs = [_charts.render(c) for c in _charts_of(doc)]
    ids: list[str] = []
    for svg in svgs:
        assert svg is not None
        assert "<script" not in svg.lower()
        assert "<metadata" not in svg
        assert "Date" not in svg
        assert not re.search(r'href="(?!#)', svg)
        head = svg[: svg.index(">")]
        assert re.search(r'width="\d+" height="\d+"', head)
        assert "pt" not in head
        assert 'class="chart"' in head
        assert "min-width" in head
        ids += re.findall(r'id="([^"]+)"', svg)
        assert "text.parse_math" not in svg
    assert len(ids) == len(set(ids))
    assert [_charts.render(c) for c in _charts_of(samples.realistic())] == svgs


def test_facets_are_stacked_with_every_title() -> None:
    chart = next(c for c in _charts_of(samples.realistic()) if c.id == "forest-chart")
    drawing = _charts.draw(chart)
    assert drawing is not None
    titles = [" ".join(panel.title) for panel in drawing.panels]
    assert titles == list(dict.fromkeys(chart.data["facet"]))
    for upper, lower in itertools.pairwise(drawing.panels):
        assert lower.y0 > upper.y1  # one below the other, never side by side
        assert math.isclose(lower.x0, upper.x0)
    svg = _charts.render(chart)
    assert svg is not None
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert all(markupsafe.escape(t) in texts for t in titles)


def test_long_facet_titles_wrap_and_long_labels_are_cut() -> None:
    frame = pd.DataFrame(
        [
            {
                "facet": "f" * 40 + " " + "g" * 200,
                "label": "x" * 300,
                "value": 0.1,
                "low": 0,
                "high": 0.2,
                "sig": True,
            }
        ]
    )
    chart = Chart(
        "c",
        "forest",
        frame,
        {
            "label": "label",
            "value": "value",
            "low": "low",
            "high": "high",
            "filled": "sig",
            "facet": "facet",
        },
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = _charts.render(chart)
    assert svg is not None
    assert "x" * (_charts.LABEL_MAX - 3) + "..." in svg
    assert "x" * _charts.LABEL_MAX not in svg
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "f" * 40 in texts  # the facet title wrapped: its first line alone


def test_coinciding_curves_are_dodged_and_distinct() -> None:
    chart = next(c for c in _charts_of(samples.realistic()) if c.id == "budget-chart")
    drawing = _charts.draw(chart)
    assert drawing is not None
    lines = drawing.series[: len(samples.CONDITIONS)]  # the first panel's
    first, second = lines[0], lines[1]  # frontier and frontier_latest: the same values
    assert [y for _, y in first.points] == [y for _, y in second.points]
    assert [x for x, _ in first.points] != [x for x, _ in second.points]
    assert len({line.style for line in lines}) == len(lines) == len(samples.CONDITIONS)


def test_text_widths_are_those_of_the_font() -> None:
    """The layout's widths are DejaVu Sans' advances (a wide character counts as an em),
    with some to spare."""
    advances = 1255 + 569 + 569 + 1212 + 1260  # "alive" (a, l, i, v, e) in 1/2048 em
    assert _charts.text_width("alive", 12) == pytest.approx(advances / 2048 * 12 * _charts.SPARE)
    assert _charts.text_width("\u5bbd", 12) == pytest.approx(12 * _charts.SPARE)
    assert _charts.text_width("e\u0301", 12) == _charts.text_width("e", 12)


@pytest.mark.parametrize("kind", ["dots", "forest", "heatmap", "bars", "stacked", "curve"])
def test_every_kind_draws_sparse_and_odd_data(kind: str) -> None:
    """One row, missing values, a dollar sign (no mathtext), a huge label: no warning."""
    row = {"label": "$x^2$ " + "y" * 500, "series": "s", "x": 600, "facet": "f"}
    row |= _proportion_row(m_n=0) | {
        "value": math.nan,
        "low": math.nan,
        "high": math.nan,
        "sig": None,
        "text": None,
        "part": math.nan,
    }
    choices: dict[str, dict[str, Any]] = {
        "dots": {"label": "label", "series": [("m", "m")], "facet": "facet"},
        "forest": {
            "label": "label",
            "value": "value",
            "low": "low",
            "high": "high",
            "filled": "sig",
        },
        "heatmap": {"row": "label", "column": "series", "value": "value", "text": "text"},
        "bars": {"group": "label", "series": "series", "prefix": "m"},
        "stacked": {"label": "label", "parts": [("part", "part")]},
        "curve": {"x": "x", "prefix": "m", "series": "label", "facet": "facet"},
    }
    options = choices[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = _charts.render(Chart("c", kind, pd.DataFrame([row]), options))  # type: ignore[arg-type]
    assert svg is not None
    assert "$x^2$" in svg


def test_a_hatched_chart_stays_small() -> None:
    """Issue 28: the report's stacked and bar charts were 270 and 320 KB, most of it two
    hatch tiles (dots and circles, drawn as hundreds of Bezier circles); a chart of every
    hatch costs a few hundred bytes a bar now, whatever the series."""
    parts = [(f"p{i}", f"part {i}") for i in range(len(_charts.HATCHES))]
    frame = pd.DataFrame(
        [{"label": f"condition {row}"} | {c: row + i for i, (c, _) in enumerate(parts)}
         for row in range(5)]
    )  # fmt: skip
    svg = _charts.render(Chart("c", "stacked", frame, {"label": "label", "parts": parts}))
    assert svg is not None
    assert svg.count("<pattern") == len(_charts.HATCHES) - 1  # every hatch drawn (not "")
    assert len(svg) < 1000 * len(frame) * len(parts), len(svg)


def test_a_chart_without_its_columns_says_which() -> None:
    chart = Chart("c-bad", "dots", pd.DataFrame([{"name": "x"}]), {"series": [("m", "m")]})
    with pytest.raises(ValueError, match="chart 'c-bad' \\(dots\\): no 'label'"):
        _charts.render(chart)


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        (lambda: _format.interval(-1e-17, -0.001), "[0.00, 0.00]"),
        (lambda: _format.signed(-0.0004), "+0.00"),
        (lambda: _format.rate(-0.0), "0.00"),
        (lambda: _format.number(-0.01, 1), "0.0"),
        (lambda: _format.signed(-0.25), "-0.25"),
    ],
)
def test_a_value_that_rounds_to_zero_has_no_sign(shown: Any, expected: str) -> None:
    """A bootstrap bound of -1e-17 was shown as -0.00, read as a negative difference."""
    assert shown() == expected


def test_a_long_table_is_named_not_printed_in_the_short_form() -> None:
    """report.md is a pull-request comment: the default audit's 90-row transform table
    made it 235 lines; a long table is left to the HTML and its CSV, with its size."""
    from reports._markdown import MAX_TABLE_ROWS

    def document(rows: int) -> Document:
        frame = pd.DataFrame({"name": [f"row{i}" for i in range(rows)]})
        table = Table("t", [Column("name", "name")], frame, csv="t.csv")
        return Document("t", Facts([]), sections=[Section("s", "s", [table])])

    short = _markdown.render_markdown(document(MAX_TABLE_ROWS))
    assert f"row{MAX_TABLE_ROWS - 1}" in short
    long = _markdown.render_markdown(document(MAX_TABLE_ROWS + 1))
    assert "row0" not in long
    assert f"A table of {MAX_TABLE_ROWS + 1} rows: in the HTML page and t.csv." in long
