"""What a report is made of: a document of sections, each a list of blocks.

``audit`` builds a ``Document`` from a stored run (one module per section in
``audit/reportdata``); the renderers (HTML, Markdown, CSV) loop over its sections
and render each block by its kind, so a new section needs no change here.  Nothing
in a document is an audit object: plain strings, numbers, DataFrames and lists.

Text.  Every string may be untrusted (model output, memories, condition names from
a plugin): renderers escape it.  A ``Text`` is a plain string or a sequence of
inline pieces (``str``, ``Strong``, ``Code``, ``Flag``); there is no other markup.

Proportions.  A column or chart series of format ``proportion`` named ``m`` reads
``m_k`` (successes, NA as fail), ``m_k_high`` (NA as pass; equal to ``m_k`` without
NA), ``m_n`` (the count of units: source pairs, instances or reads, as the header
says), ``m_low`` / ``m_high`` (its 95 % interval) and, when present, ``m_rate``.
``m_n == 0`` means "not measured" and shows as ``-``; ``m_k != m_k_high`` shows as
bounds ``k..k_high/n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd


@dataclass(frozen=True)
class Strong:
    """Emphasised text (a condition name in a finding, say)."""

    text: str


@dataclass(frozen=True)
class Code:
    """Monospaced text: a command, a file name, an identifier."""

    text: str


@dataclass(frozen=True)
class Flag:
    """Text that marks a problem (a shortcut, an underpowered test, a damaged run)."""

    text: str


Inline = str | Strong | Code | Flag
Text = str | Sequence[Inline]


def with_code(sentence: str) -> list[Inline]:
    """A sentence whose `backquoted` spans are commands or file names, as text with
    ``Code`` pieces: the console's messages quote commands that way, and a report
    should show them as code rather than as literal backquotes."""
    parts = sentence.split("`")
    if len(parts) % 2 == 0:  # an unpaired backquote: the sentence as it is
        return [sentence]
    return [Code(part) if index % 2 else part for index, part in enumerate(parts) if part]


ColumnFormat = Literal[
    "text",  # any string (escaped), left-aligned
    "label",  # a condition or system name: emphasised, never broken inside a word
    "integer",  # 1,234
    "number",  # 1,234.5 with ``digits``
    "rate",  # 0.33 with ``digits``
    "signed",  # +0.33 with ``digits``
    "pvalue",  # 0.0123 or <0.0001
    "proportion",  # k/n [low, high], see the module docstring
    "count",  # k/n without interval (``key_k`` / ``key_n``)
    "flag",  # truthy -> the column's ``flag_text``, else empty
]


@dataclass(frozen=True)
class Column:
    """One column of a table: where its value comes from and how it is shown."""

    key: str
    """The row field (or, for ``proportion`` and ``count``, the prefix of its fields)."""
    header: str
    """What the reader sees; carries the unit (``reveal (source pairs)``, ``reads``)."""
    format: ColumnFormat = "text"
    digits: int = 2
    interval: tuple[str, str] | None = None
    """Two more fields shown as a small ``[low, high]`` after the value (a bootstrap
    interval beside a Wilson one, say), labelled ``interval_label``."""
    interval_label: str = ""
    flag_text: str = ""
    help: str = ""
    """What the column means, in one sentence (a tooltip in HTML)."""


@dataclass
class Table:
    """Rows of ``data`` shown through ``columns``; every column of ``data`` goes to CSV."""

    id: str
    columns: Sequence[Column]
    data: pd.DataFrame
    csv: str | None = None
    """File name of the CSV export (``headline.csv``), or None."""
    caption: Text = ""
    empty: str = "Nothing to show."
    collapsed: bool = False
    """Shown folded in HTML (a long secondary table); left out of Markdown."""
    markdown: bool = True
    """Part of the short Markdown form."""


ChartKind = Literal["dots", "forest", "heatmap", "bars", "stacked", "curve"]


@dataclass
class Chart:
    """A chart drawn from ``data``; ``options`` map its roles to columns, per kind.

    * ``dots``: one row per system; ``label`` (y), ``series`` = [(prefix, legend
      name)] of proportions drawn as points with intervals, ``facet`` (optional).
    * ``forest``: one row per comparison; ``label`` (y), ``value``, ``low``,
      ``high``, ``filled`` (bool column: a significant result), ``facet`` (optional),
      ``axis`` (x-axis title).
    * ``heatmap``: one row per cell; ``row``, ``column``, ``value`` (a rate in
      [0, 1]), ``text`` (what each cell says, e.g. ``3/4``).
    * ``bars``: one row per (group, series); ``group`` (y), ``series`` (legend),
      ``prefix`` of the proportion drawn, with its interval.
    * ``stacked``: one row per group; ``label`` (y), ``parts`` = [(column, legend
      name)] of counts stacked left to right.
    * ``curve``: one row per point; ``x``, ``prefix`` (proportion on y), ``series``
      (legend), ``facet`` (optional), ``x_title``.

    Optional options, in every kind: ``axis``, the title of the value axis (the
    colour scale of a heatmap; default: a share passing, or ``count`` for
    ``stacked``); ``facet`` also in ``heatmap`` and ``bars``.  ``forest``: ``legend``
    = (name of filled, name of hollow markers), default ("significant", "not
    significant").  ``curve``: ``x_log`` (bool), default: log scale when every x is
    positive and the largest is at least 4 times the smallest.

    Every legend names every series drawn; every label is shown whole up to 90
    characters (longer ones are cut, a ``...`` marks the cut).  Facets are stacked
    top to bottom in order of first appearance.
    """

    id: str
    kind: ChartKind
    data: pd.DataFrame
    options: dict[str, Any]
    caption: Text = ""
    title: str = ""
    collapsed: bool = False
    """Shown folded in HTML, its caption the summary line (a tall secondary chart)."""


@dataclass
class Alert:
    """A box the reader must not miss: a warning, or the all-clear."""

    level: Literal["warn", "ok", "info"]
    title: Text
    body: Text = ""
    items: Sequence[Text] = ()


@dataclass
class Bullets:
    items: Sequence[Text]
    muted: bool = False


@dataclass
class Paragraph:
    text: Text
    muted: bool = False


@dataclass
class Facts:
    """A list of labelled facts (the run, its pairs, its machine)."""

    items: Sequence[tuple[str, Text]]


@dataclass
class DrillDown:
    """Per source pair: both variants, both futures, every failing memory and its reads.

    ``pairs``: one dict per source pair, in display order: ``pair_id, family, query,
    distinguishing, variants {A,B: [line]}, futures {reveal, override: [line]}, gold
    {A,B: {branch: text}}, cells, passing``; a line is ``{"text", "mark"}`` (mark: a
    distinguishing record); a cell is ``label, failed, na, identical, memories {A,B:
    {branch: {lines, bytes, sha}}}, reads [{variant, branch, repeat, outcome,
    correct, answer, gold, error, attribution, finish_reason, raw_answer}]``.
    Every text in it may be untrusted model output.  Rendered in HTML only, on pages
    of its own when it is long, with an index of every pair (family, outcome per
    condition, link).  A document holds at most one drill-down.
    """

    pairs: list[dict[str, Any]]
    notes: Sequence[Text] = ()
    systems: Sequence[str] = ()
    """Optional: the cell labels in the order the index shows them as columns (the
    outcome of each: ``fail``, ``NA``, ``pass`` when in ``passing``, ``-`` when the pair
    has none); empty: every label of the pairs, in order of first appearance."""


Block = Table | Chart | Alert | Bullets | Paragraph | Facts | DrillDown


@dataclass
class Section:
    id: str
    """Anchor and identity of the section (``headline``)."""
    title: str
    blocks: list[Block] = field(default_factory=list)
    markdown: bool = True
    """Part of the short Markdown form (a pull-request comment)."""


@dataclass
class Document:
    """A whole report (``audit report``) or comparison (``audit compare``)."""

    title: str
    facts: Facts
    summary: list[Block] = field(default_factory=list)
    """What a reader must see in ten seconds, above every section."""
    sections: list[Section] = field(default_factory=list)
    stem: str = "report"
    """File names: ``report.html``, ``report.md`` (``compare`` for a comparison)."""
