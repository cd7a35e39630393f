"""Write a report or a comparison to a directory: HTML, Markdown and CSV tables."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pandas as pd

from reports._html import remove_stale_pages, render_compare_page, render_report_pages
from reports._markdown import render_compare_markdown, render_report_markdown
from reports._model import CompareInput, ReportInput


def _write_text(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


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


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    frame = _integers_as_integers(frame)
    temp = path.with_name(f".{path.name}.tmp")
    frame.to_csv(temp, index=False, quoting=csv.QUOTE_MINIMAL, float_format="%.6g")
    os.replace(temp, path)


def _ranking_frame(ranking: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for warning in ranking:
        for inversion in warning["inversions"] or [{}]:
            rows.append(
                {
                    "reader": warning["reader"],
                    "budget": warning["budget"],
                    "best_by_current": " ".join(warning["best_by_current"]),
                    "best_by_reveal": " ".join(warning["best_by_reveal"]),
                    "current_prefers": inversion.get("current_prefers"),
                    "reveal_prefers": inversion.get("reveal_prefers"),
                    "current_rates": " ".join(f"{x:.4f}" for x in inversion.get("current", ())),
                    "reveal_rates": " ".join(f"{x:.4f}" for x in inversion.get("reveal", ())),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "reader",
            "budget",
            "best_by_current",
            "best_by_reveal",
            "current_prefers",
            "reveal_prefers",
            "current_rates",
            "reveal_rates",
        ],
    )


def write_report(data: ReportInput, out: Path) -> list[Path]:
    """report.html (+ pairs-NNN.html), report.md and the tables as CSV; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    pages = render_report_pages(data)
    for name, text in pages.items():
        _write_text(out / name, text)
        written.append(out / name)
    remove_stale_pages(out, list(pages))
    _write_text(out / "report.md", render_report_markdown(data))
    written.append(out / "report.md")
    tables = {
        "headline": data.headline,
        "comparisons": data.comparisons,
        "families": data.families,
        "transforms": data.transforms,
        "taxonomy": data.taxonomy,
        "budget": data.budget_curve,
        "costs": data.costs,
        "ranking": _ranking_frame(data.ranking),
    }
    for name, frame in tables.items():
        _write_csv(out / f"{name}.csv", frame)
        written.append(out / f"{name}.csv")
    return written


def write_compare(data: CompareInput, out: Path) -> list[Path]:
    """compare.html, compare.md, compare.csv (paired deltas) and systems.csv."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.html", out / "compare.md", out / "compare.csv", out / "systems.csv"]
    _write_text(paths[0], render_compare_page(data))
    _write_text(paths[1], render_compare_markdown(data))
    _write_csv(paths[2], data.comparisons)
    _write_csv(paths[3], data.systems)
    return paths
