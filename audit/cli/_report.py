"""``audit report`` and ``audit compare``: rebuild reports from stored runs (nothing re-run)."""

from __future__ import annotations

import errno
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from audit.cli._common import echo_fitted, fail, plural, terminal_text

if TYPE_CHECKING:
    from audit.rundir import RunData
    from reports import Document


def report_command(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="A run directory written by `audit run`.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Output directory (default: RUN_DIR/report).")
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option(
            help="Compare every condition with this one. Default: the reference preregistered "
            "with audit run --reference, else the best strict condition by joint J (chosen "
            "from the data). Any reference but the preregistered one is labelled post hoc."
        ),
    ] = None,
    pairwise: Annotated[
        bool, typer.Option(help="Compare every two conditions instead of each with the best.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the cluster bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
    max_pairs: Annotated[
        int, typer.Option(min=0, help="Source pairs in the drill-down, failures first (0: all).")
    ] = 200,
) -> None:
    """Write report.html, report.md and the summary tables (CSV) for a stored run."""
    from audit.reportdata import Options, build_replication, build_report
    from audit.rundir import CONFIG_FILE, REPLICATION_FILE, REPORT_DIR, load_run
    from reports import write_document

    started = time.perf_counter()
    if (run_dir / REPLICATION_FILE).exists() and not (run_dir / CONFIG_FILE).exists():
        target = out or run_dir / REPORT_DIR
        write_document(build_replication(run_dir), target)
        typer.echo(f"wrote {target / 'replication.html'} and replication.md (a replication)")
        return
    run = load_run(run_dir)  # RunDataError: one line
    options = Options(
        seed=seed, resamples=resamples, reference=reference, pairwise=pairwise, max_pairs=max_pairs
    )
    if reference is not None and reference not in set(run.results["condition"].astype(str)):
        fail(f"--reference: no condition {reference!r} in {run_dir}")
    target = out or run_dir / REPORT_DIR
    warn_if_not_whole([run])
    with writable_target(target):
        paths = write_document(build_report(run, options), target)
    pages = [p for p in paths if p.suffix == ".html"]
    drill_down = len(pages) - 1
    echo_fitted(
        f"wrote {target / 'report.html'}"
        + (f" (+{plural(drill_down, 'drill-down page')})" if drill_down else "")
        + f", report.md and {plural(sum(p.suffix == '.csv' for p in paths), 'CSV table')} "
        f"in {time.perf_counter() - started:.1f} s"
    )
    exit_if_not_whole([run])


def compare_command(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR", help="Two or more run directories; the first is the baseline."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (default: runs/compare-<timestamp>)."),
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option(help="Compare every system with this condition of the baseline run."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the cluster bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
) -> None:
    """Compare conditions and backends across runs on their shared pairs (paired deltas)."""
    from audit.reportdata import Options, build_compare
    from audit.rundir import load_run
    from reports import write_document

    if len(run_dirs) < 2:
        fail("give at least two run directories")
    resolved = [path.resolve() for path in run_dirs]
    if len(set(resolved)) != len(resolved):
        fail("a run directory is given twice: compare different runs")
    runs = [load_run(path) for path in run_dirs]  # RunDataError: one line
    if reference is not None and reference not in set(runs[0].results["condition"].astype(str)):
        fail(f"--reference: no condition {reference!r} in the baseline run {run_dirs[0]}")
    target = out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    data = build_compare(runs, Options(seed=seed, resamples=resamples, reference=reference))
    with writable_target(target):
        paths = write_document(data, target)
    tables = sum(p.suffix == ".csv" for p in paths)
    warn_if_not_whole(runs)
    shared, compared = print_comparisons(data, reference)
    echo_fitted(f"wrote {target / 'compare.html'}, compare.md and {plural(tables, 'CSV table')}")
    if not shared:
        fail(
            "the runs share no source pair (no history is the same in all of them): "
            "nothing could be compared; compare runs made on the same pairs (the same "
            "--preset and seed, or the same --pairs file)"
        )
    if not compared:
        fail(
            "no system of a later run meets one of the baseline (the same condition at the "
            "same budget): nothing was compared"
            + ("" if reference else "; --reference CONDITION names the baseline's condition")
        )
    exit_if_not_whole(runs)


SHOWN_COMPARISONS = 8
"""Paired differences printed by ``audit compare``: significant ones first, then the
largest; the rest are in compare.html."""


def print_comparisons(document: Document, reference: str | None) -> tuple[int, int]:
    """The comparison's answer in the terminal: how many paired differences, how many
    significant after Holm, the first few, each with its interval and Holm p, and the
    systems left uncompared.  Returns (source pairs shared by every run, comparisons)."""
    from audit.reportdata import uncompared
    from reports import Table

    tables = {
        block.id: block.data
        for section in document.sections
        for block in section.blocks
        if isinstance(block, Table)
    }
    systems = tables.get("systems-table")
    shared = int(systems["joint_J_n"].max()) if systems is not None and len(systems) else 0
    if systems is None or not shared:
        return 0, 0
    table = tables.get("comparisons-table")
    compared = 0 if table is None else len(table)
    if table is not None and compared:
        _print_differences(table, shared)
    runs = tables["runs-table"]
    baseline = str(runs.loc[runs["baseline"].astype(bool), "label"].iloc[0])
    left = uncompared(systems, table if table is not None else systems.iloc[0:0], baseline)
    if left:
        echo_fitted(f"not compared (the baseline {baseline} has no system to pair them with):")
        for entry in left:
            echo_fitted(f"  {entry}", indent=4)
        if reference is None:
            echo_fitted(
                "  (--reference CONDITION compares every system with one condition of the "
                "baseline)",
                indent=3,
            )
    return shared, compared


def _print_differences(table: Any, shared: int) -> None:
    """Every paired difference (the first few), significant ones first, then the largest."""
    significant = int(table["significant"].sum())
    echo_fitted(
        f"{plural(len(table), 'paired difference')} on {shared} shared source pairs; "
        f"{significant or 'none'} significant after Holm "
        "(second minus first in joint J, 95 % Newcombe interval, p after Holm)"
    )
    order = table.assign(size=table["delta"].abs()).sort_values(
        ["significant", "size"], ascending=[False, False], kind="stable"
    )
    for _, row in order.head(SHOWN_COMPARISONS).iterrows():
        mark = "*" if row["significant"] else " "
        echo_fitted(
            f"{mark} {row['b']} - {row['a']} at {int(row['budget'])} B: "
            f"{format_delta(row['delta'], row['delta_low'], row['delta_high'])} "
            f"p={format_p(row['p_holm'])}",
            indent=4,
        )
    if len(table) > SHOWN_COMPARISONS:
        echo_fitted(f"  ... {len(table) - SHOWN_COMPARISONS} more in compare.html")
    if significant:
        typer.echo("  * significant after Holm")


def format_p(p: float) -> str:
    """A Holm p-value in three decimals; ``n/a`` where no pair had a pass or fail."""
    if math.isnan(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def format_delta(delta: float, low: float, high: float) -> str:
    """``+0.29 [0.08, 0.50]``; ``n/a`` where no pair was shared (the test had no data)."""
    if math.isnan(delta):
        return "n/a"
    return f"{delta:+z.2f} [{low:+z.2f}, {high:+z.2f}]"  # z: -0.00 is shown as +0.00


@contextmanager
def writable_target(target: Path) -> Iterator[None]:
    """A report that cannot be written there says where else to write it."""
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC):
            raise
        where = error.filename or target
        fail(
            f"{where}: {error.strerror}: the report cannot be written there; give --out "
            "with a directory that can take it (the run itself is only read)",
            1,
        )


def warn_if_not_whole(runs: Sequence[RunData]) -> None:
    """Say on stderr what is wrong with each run that is not whole, before anything
    else is printed (the README promises it first)."""
    for run in runs:
        for problem in run.integrity.problems(str(run.path)):
            typer.echo(terminal_text(f"warning: {run.path}: {problem}"), err=True)


def exit_if_not_whole(runs: Sequence[RunData]) -> None:
    """Exit with the worst status of the runs: 4 (damaged) or 3 (incomplete); return
    when every run is whole (``warn_if_not_whole`` said why)."""
    code = max((run.integrity.exit_code for run in runs), default=0)
    if code:
        raise typer.Exit(code)
