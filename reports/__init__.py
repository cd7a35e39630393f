"""Rendering results: a ``Document`` of sections and blocks, as HTML, Markdown and CSV.

Takes plain data (DataFrames, dicts, lists) and imports nothing of ``audit``,
``compressors`` or ``histories``: a report can be rebuilt from a stored run
without the machinery that produced it (``audit report`` and ``audit compare``
build the document; ``write_document`` writes it).
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
    Inline,
    Paragraph,
    Section,
    Strong,
    Table,
    Text,
    with_code,
)
from reports._format import visible
from reports._write import write_document

__all__ = [
    "Alert",
    "Block",
    "Bullets",
    "Chart",
    "Code",
    "Column",
    "Document",
    "DrillDown",
    "Facts",
    "Flag",
    "Inline",
    "Paragraph",
    "Section",
    "Strong",
    "Table",
    "Text",
    "visible",
    "with_code",
    "write_document",
]
