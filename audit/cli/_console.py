"""Console output of ``audit run``: a progress bar and the end-of-run summary table."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


@contextmanager
def progress_bar(total: int, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A progress bar over source pairs (on stderr, only when it is a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    columns = (
        TextColumn("[bold]audit"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("source pairs"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("audit", total=total)
        yield lambda done, total: progress.update(task, completed=done, total=total)


def _fmt(kn: dict[str, int] | None) -> str:
    if not kn or kn["n"] == 0:
        return "-"
    return f"{kn['k']}/{kn['n']}"


def _joint(entry: dict[str, Any]) -> str:
    if "joint_J_bounds" in entry:
        low, high = entry["joint_J_bounds"]["low"], entry["joint_J_bounds"]["high"]
        return f"{low['k']}..{high['k']}/{low['n']} (bounds)"
    return _fmt(entry.get("joint_J"))


def _print_llm(console: Console, summary: dict[str, Any]) -> None:
    rows = [
        e for e in summary["scores"] if e["family"] == "all" and e.get("reader", "exact") != "exact"
    ]
    stage = summary.get("run", {}).get("config", {}).get("llm")
    if not rows or not stage:
        return
    table = Table(
        title="LLM reader on the LLM sample (strict k/n, lenient in brackets; NA excluded)",
        box=box.SIMPLE_HEAD,
    )
    for column in ("condition", "budget", "reader", "current", "reveal", "override",
                   "joint J", "outcomes"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("condition", "outcomes") else "right")
    for e in rows:

        def both(branch: str, e: dict[str, Any] = e) -> str:
            lenient = e.get(f"{branch}_accuracy_lenient")
            return f"{_fmt(e[f'{branch}_accuracy'])} [{_fmt(lenient)}]"

        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(e["outcomes"].items()))
        table.add_row(e["condition"], str(e["budget"]), e["reader"], both("current"),
                      both("reveal"), both("override"), _joint(e), outcomes)  # fmt: skip
    console.print(table)
    models = ", ".join(
        f"{role} {stage.get(role)} = {stage.get(role + '_model') or 'unknown model'}"
        for role in ("writer", "reader")
        if stage.get(role)
    )
    console.print(
        f"LLM stage: {stage['sample']} source pairs x {stage['repeats']} repeats; {models}. "
        "A model this small answers poorly; a real audit points --config at a vLLM server."
    )


def print_summary(summary: dict[str, Any], run_dir: Path, seconds: float) -> None:
    console = Console(width=max(Console().width, 160))
    entries = [
        e for e in summary["scores"] if e["family"] == "all" and e.get("reader", "exact") == "exact"
    ]
    transforms = list(dict.fromkeys(e["transform"] for e in entries))
    table = Table(
        title="Exact reader, all families (k/n: reads; joint J: pair blocks; collisions: pairs)",
        box=box.SIMPLE_HEAD,
    )
    for column in ("condition", "budget", "current", "reveal", "override", "joint J",
                   "late-ref", "collisions"):  # fmt: skip
        table.add_column(column, justify="left" if column == "condition" else "right")
    others = [t for t in transforms if t != "identity"]
    for transform in others:
        table.add_column(f"reveal\n@{transform}", justify="right")
        table.add_column(f"late-ref\n@{transform}", justify="right")
    table.add_column("equivariance\nviolations", justify="right")
    by_key = {(e["condition"], e["budget"], e["transform"]): e for e in entries}
    for (condition, budget, transform), entry in by_key.items():
        if transform != "identity" and "identity" in transforms:
            continue
        cells = [condition, str(budget), _fmt(entry["current_accuracy"]),
                 _fmt(entry["reveal_accuracy"]), _fmt(entry["override_accuracy"]),
                 _fmt(entry.get("joint_J")), _fmt(entry["late_reference_adequacy"]),
                 _fmt(entry["collision_rate"])]  # fmt: skip
        violations = {"k": 0, "n": 0}
        for other in others:
            moved = by_key.get((condition, budget, other))
            cells += [_fmt(moved and moved["reveal_accuracy"]),
                      _fmt(moved and moved["late_reference_adequacy"])]  # fmt: skip
            if moved:
                violations["k"] += moved["equivariance_violations"]["k"]
                violations["n"] += moved["equivariance_violations"]["n"]
        cells.append(_fmt(violations))
        table.add_row(*cells)
    if entries:
        console.print(table)
    _print_llm(console, summary)
    for flag in summary["selection"]:
        if flag["current_would_pick_differently"]:
            who = "" if flag.get("reader", "exact") == "exact" else f" (reader {flag['reader']})"
            console.print(
                f"[bold yellow]warning[/]{who}: at {flag['budget']} B, current accuracy ranks "
                f"{', '.join(flag['best_by_current'])} best, but reveal accuracy ranks "
                f"{', '.join(flag['best_by_reveal'])} best: current accuracy would pick "
                f"{', '.join(flag['misleading_choices'])}."
            )
    console.print(
        f"{summary['n_reads']} reads on {summary['n_source_pairs']} source pairs in "
        f"{seconds:.1f} s; results in {run_dir}/ (results.csv, results.parquet, summary.json)"
    )
