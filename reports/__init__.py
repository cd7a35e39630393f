"""Rendering results: tables, charts, HTML and Markdown reports, comparisons.

Takes plain data (DataFrames, dicts, lists) and imports nothing of ``audit``,
``compressors`` or ``histories``: a report can be rebuilt from a stored run
without the machinery that produced it (``audit report`` builds the input).
"""

from reports._document import (
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
    Text,
)
from reports._format import visible
from reports._model import CompareInput, ReportInput
from reports._write import write_compare, write_report

__all__ = [
    "Alert",
    "Block",
    "Bullets",
    "Chart",
    "Code",
    "Column",
    "CompareInput",
    "Document",
    "DrillDown",
    "Facts",
    "Flag",
    "Paragraph",
    "ReportInput",
    "Section",
    "Strong",
    "Table",
    "Text",
    "visible",
    "write_compare",
    "write_report",
]
