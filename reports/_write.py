"""Write a ``Document`` to a folder: HTML pages, the Markdown short form, CSV tables.

Every file is written to a temporary name and renamed, so a reader never sees half
a report; drill-down pages an earlier report left and this one does not write are
removed.  The same document gives the same bytes.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pandas as pd

from reports._document import Document, Table
from reports._html import render_pages, stale_pages
from reports._markdown import render_markdown

_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_CSV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.csv")


def _write_text(path: Path, text: str) -> Path:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)
    return path


def _integers_as_integers(frame: pd.DataFrame) -> pd.DataFrame:
    """Float columns that hold only whole numbers (counts with gaps) as nullable integers."""
    frame = frame.copy()
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_float_dtype(values):
            finite = values.dropna()
            if (
                len(finite)
                and bool((finite == finite.round()).all())
                and finite.abs().max() < 2**53
            ):
                frame[column] = values.astype("Int64")
    return frame


def _tables(doc: Document) -> list[Table]:
    blocks = [*doc.summary, *(b for s in doc.sections for b in s.blocks)]
    tables = [b for b in blocks if isinstance(b, Table) and b.csv]
    names = [t.csv for t in tables]
    for name in names:
        if name is None or not _CSV.fullmatch(name) or names.count(name) > 1:
            raise ValueError(f"not a unique plain CSV file name: {name!r}")
    return tables


def write_document(doc: Document, out: Path) -> list[Path]:
    """``{stem}.html`` (+ drill-down pages), ``{stem}.md`` and one CSV per table with
    ``csv`` set, in ``out``; returns the paths written."""
    if not _STEM.fullmatch(doc.stem):
        raise ValueError(f"not a plain file stem: {doc.stem!r}")
    tables = _tables(doc)
    pages = render_pages(doc)
    markdown = render_markdown(doc)
    out.mkdir(parents=True, exist_ok=True)
    written = [_write_text(out / name, html) for name, html in pages.items()]
    for path in stale_pages(out, doc.stem, list(pages)):
        path.unlink()
    written.append(_write_text(out / f"{doc.stem}.md", markdown))
    for table in tables:  # every column, not only those shown; no escaping
        frame = _integers_as_integers(table.data)
        text = frame.to_csv(index=False, quoting=csv.QUOTE_MINIMAL, float_format="%.6g")
        written.append(_write_text(out / str(table.csv), text))
    return written
