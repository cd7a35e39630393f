"""``audit report`` and ``audit compare``: rebuild reports from stored runs (nothing re-run)."""

from __future__ import annotations

import errno
import functools
import math
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from audit.cli._common import echo_fitted, fail, plural, terminal_text

if TYPE_CHECKING:
    from audit.reportdata import Gate
    from audit.rundir import RunData
    from reports import Document


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's ``mallopt`` parameters (malloc.h)."""


YOUNG_COLLECTION = 20_000
"""Allocations between two passes of the cyclic collector over the youngest objects in
a report process (Python's default is 700)."""


@contextmanager
def report_process() -> Iterator[bool]:
    """Tune this process, while a report is built, for what that does: build and drop
    frames of hundreds of MB and millions of short-lived, acyclic objects; yields
    whether the heap was tuned (False off glibc).

    * The cyclic collector passes over young objects every ``YOUNG_COLLECTION``
      allocations, older ones a twentieth as often (Python's defaults spent 0.24 of a
      report's 2.9 CPU s in it, to find 10 objects).
    * Freed memory is kept for reuse instead of being handed back and faulted in again:
      arrays up to 32 MB come from the heap, up to 1 GB of freed heap is kept, and
      pyarrow allocates through glibc too, unless ARROW_DEFAULT_MEMORY_POOL names a
      pool: about 10 % less CPU, 60 MB more peak RSS.

    The collector's thresholds and pyarrow's pool are put back afterwards (a caller in
    the same process, a notebook or a test, keeps its own); glibc's settings stay.
    """
    import gc

    import pyarrow as pa

    thresholds, pool = gc.get_threshold(), pa.default_memory_pool()
    gc.set_threshold(YOUNG_COLLECTION, 20, 20)
    try:
        yield _keep_freed_memory()
    finally:
        gc.set_threshold(*thresholds)
        pa.set_memory_pool(pool)


def _keep_freed_memory() -> bool:
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, Windows)
        return False
    if not (mallopt(M_MMAP_THRESHOLD, 32 << 20) and mallopt(M_TRIM_THRESHOLD, 1 << 30)):
        return False
    import os

    import pyarrow as pa

    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:  # the user's choice stands
        pa.set_memory_pool(pa.system_memory_pool())
    return True


_Command = TypeVar("_Command", bound=Callable[..., None])


def _in_report_process(command: _Command) -> _Command:
    """The command run inside ``report_process`` (its signature, for typer, is kept)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        with report_process():
            command(*args, **kwargs)

    return cast(_Command, run)


@_in_report_process
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
    target = out or run_dir / REPORT_DIR
    if (run_dir / REPLICATION_FILE).exists() and not (run_dir / CONFIG_FILE).exists():
        write_document(build_replication(run_dir), target)
        typer.echo(f"wrote {target / 'replication.html'} and replication.md (a replication)")
        return
    run = load_run(run_dir)  # RunDataError: one line
    options = Options(
        seed=seed, resamples=resamples, reference=reference, pairwise=pairwise, max_pairs=max_pairs
    )
    if reference is not None and reference not in set(run.results["condition"].astype(str)):
        fail(f"--reference: no condition {reference!r} in {run_dir}")
    warn_if_not_whole([run])
    said = len(run.integrity.damage)
    with writable_target(target):
        paths = write_document(build_report(run, options), target)
    for problem in run.integrity.damage[said:]:  # found while the report read memories
        echo_fitted(f"warning: {run.path}: {problem}", err=True)
    drill_down = sum(p.suffix == ".html" for p in paths) - 1
    if not drill_down:  # say why on stderr too, not only inside the HTML
        from audit.rundir import load_source_pairs

        why = load_source_pairs(run).note
        if why is not None:
            typer.echo(terminal_text(f"warning: {run_dir}: {why}"), err=True)
    echo_fitted(
        f"wrote {target / 'report.html'}"
        + (f" (+{plural(drill_down, 'drill-down page')})" if drill_down else "")
        + f", report.md and {plural(sum(p.suffix == '.csv' for p in paths), 'CSV table')} "
        f"in {time.perf_counter() - started:.1f} s"
    )
    exit_if_not_whole([run])


@_in_report_process
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
        typer.Option(
            help="Compare every system with this condition of the baseline run. Default: "
            "each with the same condition of the baseline, and a condition in one run only "
            "with the other run's best strict condition."
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="NAME",
            help="Compare only these conditions (a label or a spec; repeat it or give a "
            "comma list).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the cluster bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
    transfer: Annotated[
        bool,
        typer.Option(
            "--transfer",
            help="The transfer test: does the first run's verdict (synthetic pairs) hold on "
            "the second's (other pairs: --preset natural)? Joint J side by side, Kendall's "
            "tau of the rankings, the conditions that do not hold.",
        ),
    ] = False,
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression",
            help="The gate for CI: exit 6 when a system of a later run is significantly "
            "worse than the baseline's it is compared with (McNemar on the shared source "
            "pairs, Holm p < 0.05; with --margin: not shown within the margin), exit 7 when "
            "the runs cannot be compared (other pairs, transforms or scoring version; "
            "nothing paired).",
        ),
    ] = False,
    score: Annotated[
        str,
        typer.Option(
            metavar="SCORE",
            help="The score compared: joint_J, current, reveal, override or adequacy "
            "(source pairs, at identity).",
        ),
    ] = "joint_J",
    test: Annotated[
        str,
        typer.Option(
            metavar="TEST",
            help="The McNemar test: exact (conservative: type-I error 0.030 at alpha 0.05 "
            "on 84 pairs at discordance 0.3) or mid-p (0.045).",
        ),
    ] = "exact",
    margin: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="With --fail-on-regression: non-inferiority; fail a system only where the "
            "upper end of the 95 % Tango interval of baseline minus it exceeds this "
            "difference in pass rate (0.05: five points).",
        ),
    ] = None,
) -> None:
    """Compare conditions and backends across runs on their shared pairs (paired deltas);
    with --fail-on-regression, a gate for CI; with --transfer, a synthetic run's verdict
    against a natural run's."""
    from audit.plan import split_conditions
    from audit.reportdata import (
        EXIT_NOT_COMPARABLE,
        Options,
        build_compare,
        not_comparable,
        unknown_names,
    )
    from audit.rundir import load_run
    from audit.scoring import COMPARED_SCORES
    from reports import write_document

    names = tuple(name for item in only or [] for name in split_conditions(item))
    if score not in COMPARED_SCORES:
        fail(f"--score: {score!r} is not one of {', '.join(COMPARED_SCORES)}")
    if test not in ("exact", "mid-p"):
        fail(f"--test: {test!r} is not one of exact, mid-p")
    if margin is not None and not fail_on_regression:
        fail("--margin is the gate's non-inferiority margin: give it with --fail-on-regression")
    if transfer:
        if len(run_dirs) != 2:
            fail("--transfer compares two runs: SYNTHETIC_RUN NATURAL_RUN")
        if reference is not None or names:
            fail("--transfer compares each condition with itself: give no --reference or --only")
        if fail_on_regression or score != "joint_J" or test != "exact":
            fail(
                "--transfer compares joint J on two pair sets: give no --fail-on-regression, "
                "--score or --test"
            )
    if len(run_dirs) < 2:
        fail("give at least two run directories")
    resolved = [path.resolve() for path in run_dirs]
    if len(set(resolved)) != len(resolved):
        fail("a run directory is given twice: compare different runs")
    runs = [load_run(path) for path in run_dirs]  # RunDataError: one line
    first_of: dict[str, Path] = {}
    for run in runs:  # a copied directory is the same run: its deltas would all be zero
        run_id = run.config_file.run_id if run.config_file is not None else None
        if run_id is not None and first_of.setdefault(run_id, run.path) != run.path:
            fail(
                f"{first_of[run_id]} and {run.path} hold the same run (run id {run_id}): one "
                "is a copy of the other; compare different runs"
            )
    if transfer:
        _transfer(runs, out, Options(seed=seed, resamples=resamples))
        return
    if reference is not None and unknown_names(runs[:1], [reference]):
        fail(f"--reference: no condition {reference!r} in the baseline run {run_dirs[0]}")
    for name in unknown_names(runs, names):
        fail(f"--only: no condition {name!r} in any of the runs")
    target = out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    options = Options(
        seed=seed, resamples=resamples, reference=reference, only=names, score=score,
        test="mid-p" if test == "mid-p" else "exact",  # checked above; the literal type
        gate=fail_on_regression, margin=margin,
    )  # fmt: skip
    with writable_target(target):
        comparison = build_compare(runs, options)
        paths = write_document(comparison.document, target)
    tables = sum(p.suffix == ".csv" for p in paths)
    warn_if_not_whole(runs)
    reasons = not_comparable(runs)
    for reason in reasons:  # loudly, with the gate or without it
        echo_fitted(f"warning: not comparable: {reason}", err=True)
    shared, compared = print_comparisons(comparison.document, reference, score)
    echo_fitted(f"wrote {target / 'compare.html'}, compare.md and {plural(tables, 'CSV table')}")
    status = EXIT_NOT_COMPARABLE if fail_on_regression else 2
    if not shared:
        fail(
            "the runs share no source pair (no history is the same in all of them): "
            "nothing could be compared; compare runs made on the same pairs (the same "
            "--preset and seed, or the same --pairs file)",
            status,
        )
    if not compared:
        fail(
            "no system of a later run meets one of the baseline (the same condition at the "
            "same budget): nothing was compared"
            + ("" if reference else "; --reference CONDITION names the baseline's condition"),
            status,
        )
    if fail_on_regression:
        _gate(comparison.gate, runs, reasons)
    exit_if_not_whole(runs)


def _gate(gate: Gate, runs: Sequence[RunData], shown: Sequence[str]) -> None:
    """``--fail-on-regression``: the gate's answer, last, and its exit status: 7 when
    the runs cannot be compared, then 3 or 4 when one is not whole (the gate cannot
    vouch for a part), 6 when a system is worse, else 0 (go on)."""
    from audit.reportdata import EXIT_NOT_COMPARABLE, EXIT_REGRESSION

    if gate.refusals:
        for reason in gate.refusals:
            if reason not in shown:
                echo_fitted(f"gate: {reason}", err=True)
        fail("gate: refused: the runs cannot be compared (see above)", EXIT_NOT_COMPARABLE)
    exit_if_not_whole(runs)
    if gate.regressions:
        echo_fitted(f"gate: failed: {gate.failed()}")
        for line in gate.regressions:
            echo_fitted(f"  {line}", indent=4)
        raise typer.Exit(EXIT_REGRESSION)
    echo_fitted(f"gate: passed: no system of a later run ({gate.judged} compared) is {gate.rule}")


def _transfer(runs: Sequence[RunData], out: Path | None, options: Any) -> None:
    """``audit compare SYNTHETIC NATURAL --transfer``: the document, and its answer."""
    from audit.reportdata import build_transfer
    from reports import write_document

    target = out or Path("runs") / f"transfer-{time.strftime('%Y%m%d-%H%M%S')}"
    with writable_target(target):
        document = build_transfer(runs[0], runs[1], options)
        paths = write_document(document, target)
    warn_if_not_whole(runs)
    tables = _tables(document)
    if tables["transfer-table"].empty:
        fail("the runs share no condition at the same budget and reader: nothing to compare")
    for _, row in tables["transfer-rank-table"].iterrows():
        echo_fitted(
            f"Kendall's tau, {row['scope']} ({row['conditions']}; {row['reader']}, "
            f"{row['budget']} B): {row['tau']:+.2f} [{row['tau_low']:+.2f}, "
            f"{row['tau_high']:+.2f}] (bootstrap over source pairs)"
        )
    table = tables["transfer-table"]
    broken = table[~table["holds"]]
    echo_fitted(
        f"{len(broken)} of {len(table)} conditions' synthetic joint J does not hold on "
        "the second run's pairs (Fisher exact, Holm p < 0.05)" + (":" if len(broken) else "")
    )
    for _, row in broken.iterrows():
        echo_fitted(
            f"  {row['label']}: {row['synthetic_rate']:.2f} -> {row['natural_rate']:.2f} "
            f"p={format_p(row['p_holm'])}",
            indent=4,
        )
    echo_fitted(
        f"wrote {target / 'transfer.html'}, transfer.md and "
        f"{plural(sum(p.suffix == '.csv' for p in paths), 'CSV table')}"
    )
    exit_if_not_whole(runs)


def _tables(document: Document) -> dict[str, Any]:
    """A document's tables' data by id."""
    from reports import Table

    found = (block for section in document.sections for block in section.blocks)
    return {block.id: block.data for block in found if isinstance(block, Table)}


SHOWN_COMPARISONS = 8
"""Paired differences printed by ``audit compare``, in the document's order (a system in
one run first); the rest, and every system with the same result in both runs, are in
compare.html."""


def print_comparisons(
    document: Document, reference: str | None, score: str = "joint_J"
) -> tuple[int, int]:
    """The comparison's answer in the terminal: the key of the run labels, how many
    comparisons and how many significant after Holm, the first few (a system in one run
    first), each with its interval and Holm p, the systems with the same result in
    both runs on one line, and the systems left uncompared.  Returns (source pairs
    shared by every run, comparisons)."""
    from audit.reportdata import answer_text, same_text, uncompared

    tables = _tables(document)
    runs = tables["runs-table"]
    for label, path, first in zip(runs["label"], runs["path"], runs["baseline"], strict=True):
        echo_fitted(f"{label}{' (baseline)' if first else ''}: {path}")
    systems = tables.get("systems-table")
    shared = int(systems[f"{score}_n"].max()) if systems is not None and len(systems) else 0
    if systems is None or not shared:
        return 0, 0
    table = tables.get("comparisons-table")
    compared = 0 if table is None else len(table)
    if table is not None and compared:
        echo_fitted(f"{shared} shared source pairs. {answer_text(table, score)}")
        _print_differences(table, score)
        same = same_text(table)
        if same:
            echo_fitted(same)
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


def _print_differences(table: Any, score: str) -> None:
    """The comparisons that are not the same in both runs, under a line that says why
    each two were compared; in each group, significant ones first, then the largest."""
    from audit.reportdata import SAME_GROUP
    from audit.scoring import COMPARED_SCORES, sentence

    shown = table[table["group"] < SAME_GROUP]
    if shown.empty:
        return
    several = table["budget"].nunique() > 1
    shown = shown.assign(size=shown["delta"].abs()).sort_values(
        ["group", "significant", "size"], ascending=[True, False, False], kind="stable"
    )
    head = shown.head(SHOWN_COMPARISONS)
    names = [
        f"{row['b']} - {row['a']}" + (f" at {int(row['budget'])} B" if several else "")
        for _, row in head.iterrows()
    ]
    numbers = [
        f"{format_delta(row['delta'], row['delta_low'], row['delta_high'])}  "
        f"p{'' if format_p(row['p_holm']).startswith('<') else '='}{format_p(row['p_holm'])}"
        + (f" [{row['verdict']}]" if row.get("verdict") else "")
        for _, row in head.iterrows()
    ]
    width = max(len(name) for name in names)
    room = shutil.get_terminal_size((80, 24)).columns - 4 - max(len(n) for n in numbers)
    title = COMPARED_SCORES[score]
    echo_fitted(
        f"{sentence(title)}, the left system minus the right [95 % interval], "
        "Holm p" + ("; * significant after Holm:" if shown["significant"].any() else ":")
    )
    why = None
    for name, number, (_, row) in zip(names, numbers, head.iterrows(), strict=True):
        if row["why"] != why:
            why = row["why"]
            echo_fitted(f"{sentence(str(why))}:")
        mark = "*" if row["significant"] else " "
        echo_fitted(
            f"{mark} {name:<{width}}  {number}" if width <= room else f"{mark} {name}: {number}",
            indent=4,
        )
    if len(shown) > SHOWN_COMPARISONS:
        echo_fitted(f"  ... {len(shown) - SHOWN_COMPARISONS} more in compare.html")


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
    """A report that cannot be written there says where else to write it; a target that
    is a file is refused before any work (it cannot be a report's directory)."""
    if target.exists() and not target.is_dir():
        fail(f"--out {target} exists and is not a directory: give --out a directory")
    try:
        yield
    except OSError as error:
        unwritable = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.ENOTDIR)
        if error.errno not in unwritable:
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
    for run in runs:  # wrapped at the terminal, later lines indented
        for problem in run.integrity.problems(str(run.path)):
            echo_fitted(f"warning: {run.path}: {problem}", err=True)


def exit_if_not_whole(runs: Sequence[RunData]) -> None:
    """Exit with the worst status of the runs: 4 (damaged) or 3 (incomplete); return
    when every run is whole (``warn_if_not_whole`` said why)."""
    code = max((run.integrity.exit_code for run in runs), default=0)
    if code:
        raise typer.Exit(code)
