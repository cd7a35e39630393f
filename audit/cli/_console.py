"""Console output of ``audit run``: a progress display per stage and the end-of-run summary.

Every number comes from ``summary.json`` (``audit.scoring``) and every header says
its unit: source pairs at identity, blocks under a transform, reads for
equivariance.
"""

from __future__ import annotations

import re
import shlex
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from rich import box
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from audit.cli._common import plural, silence_stdout, terminal_text
from audit.cli._labels import fitting_aliases
from audit.engine import RequestEstimate, RequestTally, RunProgress, Stage, Tallies
from audit.scoring import (
    VERDICT_COLUMNS,
    VERDICT_LEGEND,
    Count,
    FloorFinding,
    Summary,
    SummaryCell,
    Verdict,
    VerdictRow,
    floor_message,
    listed,
    noise_note,
    spelling_text,
    verdict_rows,
)
from compressors import BASELINES
from histories import WRONG_ANSWERS

STAGE_NAMES: dict[Stage, tuple[str, str]] = {
    "deterministic": ("deterministic", "jobs"),
    "probe": ("determinism probe", "requests"),
    "llm": ("LLM stage", "units"),
}
"""A stage's name and what it counts, in the words of the manifest and docs/reliability.md:
a job is one source pair (every condition, budget and transform of it); an LLM unit is
one condition written over one pair instance at one budget and repeat, then read on
every branch; the determinism probe counts its requests (docs/backends.md)."""

LOG_EVERY_S = 30.0
"""Without a terminal (a log file, CI), a line at most this often while a stage runs."""


def describe_requests(
    tallies: Tallies | None,
    estimate: RequestEstimate | None,
    seconds: float,
    finished: bool = False,
) -> list[str]:
    """The LLM stage's lines under its bar: the requests so far, one backend role after
    another, then what is left."""
    found: list[RequestTally] = tallies() if tallies is not None else []
    lines = []
    if found:
        lines.append("; ".join(
            f"{t.role}: {t.requests} asked, {t.sent} sent, {t.cache_hits} cached, {t.failed} NA"
            + (f", {t.sent / seconds:.2f} sent/s" if seconds > 0 and t.sent else "")
            for t in found
        ))  # fmt: skip
    if estimate is not None and estimate.requests:
        lines.append(estimate.left(sum(t.answered for t in found), seconds, finished))
    return lines


class _StageBars(Progress):
    """Progress bars, with the LLM stage's request tallies and what is left on lines of
    their own (so the bars fit an 80-column terminal)."""

    tallies: Tallies | None = None
    estimate: RequestEstimate | None = None
    llm_task: TaskID | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.llm_task is not None:
            task = self._tasks[self.llm_task]
            elapsed = task.elapsed or 0.0
            for line in describe_requests(self.tallies, self.estimate, elapsed, task.finished):
                yield Text("  " + line, overflow="fold")


class ConsoleProgress:
    """A ``RunProgress`` for the console: bars on a terminal; otherwise (a log file) a
    line at most every ``log_every_s`` seconds while a stage runs, from a timer, so a
    stage of slow requests still shows its requests moving; nothing when quiet."""

    def __init__(self, console: Console, *, terminal: bool, log_every_s: float = LOG_EVERY_S):
        self.console = console
        self.terminal = terminal
        self.log_every_s = log_every_s
        self._bars: _StageBars | None = None
        self._tasks: dict[Stage, TaskID] = {}
        self._plain: dict[Stage, list[Any]] = {}
        """Without a terminal: each stage's [total, start time, tallies, done, estimate]."""
        self._active: Stage | None = None
        self._last_line = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> ConsoleProgress:
        if self.terminal:
            self._bars = _StageBars(
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,  # the last state of each stage stays on the terminal
            )
            self._bars.__enter__()
        elif self.log_every_s > 0:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
        if self._bars is not None:
            self._bars.__exit__(None, None, None)

    def begin(
        self,
        stage: Stage,
        done: int,
        total: int,
        tallies: Tallies | None = None,
        estimate: RequestEstimate | None = None,
    ) -> None:
        name, unit = STAGE_NAMES[stage]
        if self._bars is not None:
            task = self._bars.add_task(name, total=total, completed=done, unit=unit)
            self._tasks[stage] = task
            if stage == "llm":
                self._bars.tallies, self._bars.llm_task = tallies, task
                self._bars.estimate = estimate
            return
        self._plain[stage] = [total, time.monotonic(), tallies, done, estimate]
        self._active = stage
        self._last_line = time.monotonic()

    def note(self, text: str) -> None:
        """A step's status line, at once: above the bars on a terminal, else a log line."""
        self.console.print(text, highlight=False, markup=False, soft_wrap=not self.terminal)

    def advance(self, stage: Stage, done: int) -> None:
        if self._bars is not None:
            self._bars.update(self._tasks[stage], completed=done)
            return
        if stage not in self._plain:
            return
        self._plain[stage][3] = done
        total, started = self._plain[stage][0], self._plain[stage][1]
        now = time.monotonic()
        if now - self._last_line < self.log_every_s and done < total:
            return
        if done >= total and now - started < self.log_every_s:
            return  # a short stage needs no line
        self._line(stage)

    def _tick(self) -> None:
        """Without a terminal: a line every ``log_every_s`` while a stage has work left,
        even when nothing finishes (one slow LLM unit)."""
        while not self._stop.wait(self.log_every_s / 4):
            stage = self._active
            if stage is None:
                continue
            total, _, _, done, _ = self._plain[stage]
            if done < total and time.monotonic() - self._last_line >= self.log_every_s:
                self._line(stage)

    def _line(self, stage: Stage) -> None:
        total, started, tallies, done, estimate = self._plain[stage]
        now = time.monotonic()
        self._last_line = now
        name, unit = STAGE_NAMES[stage]
        line = f"{name}: {done}/{total} {unit}, {now - started:.0f} s"
        requests = describe_requests(tallies, estimate, now - started, done >= total)
        if requests:
            line += "; " + "; ".join(requests)
        self.console.print(line, highlight=False, soft_wrap=True)


@contextmanager
def run_progress(enabled: bool = True) -> Iterator[RunProgress | None]:
    """The console's progress for a run (on stderr): bars on a terminal, a periodic line
    otherwise, ``None`` when ``enabled`` is false (``--quiet``)."""
    if not enabled:
        yield None
        return
    with ConsoleProgress(Console(stderr=True), terminal=sys.stderr.isatty()) as progress:
        yield progress


def _print_exact(console: Console, summary: Summary) -> None:
    """The exact reader's table: in full when the terminal holds it, else a compact
    headline (condition, current, reveal, joint J, late-ref, collisions) that fits 80
    columns; names and denominators are never cut, the report has the rest."""
    entries = summary.overall(exact=True)
    if not entries:
        return
    budgets = {e.budget for e in entries}
    moved = any(e.transform != "identity" for e in entries)
    left = ["override", *(["the budget"] if len(budgets) == 1 else []),
            *(["every transform's column"] if moved else []), "equivariance"]  # fmt: skip
    _print_fitting(
        console,
        lambda compact, aliases: _exact_table(summary, entries, compact, aliases),
        [e.condition for e in entries],
        f"{listed(left)} are",
    )
    console.print(EXACT_LEGEND)
    for line in best_lines(summary):
        console.print(line)
    _print_missing_baselines(console, summary)


def _print_missing_baselines(console: Console, summary: Summary) -> None:
    """A note when the run has no floor or no ceiling to read its conditions against
    (``--conditions my_memory`` alone gives a score with nothing to compare it to)."""
    entries = summary.overall(exact=True)
    kinds = {summary.kind(e.condition) for e in entries}
    roles = (
        ("probe", "shortcut probe (the floor)", "whether these memories beat a shortcut"),
        ("archive", "archive (the ceiling)", "how far they are from the whole history"),
    )
    absent = [(word, unknown) for kind, word, unknown in roles if kind not in kinds]
    if "strict" not in kinds or not absent:
        return
    # each condition as it was written (a plugin's label is its class's name, which
    # --conditions does not take), from the plan
    planned = summary.config.get("conditions") or [e.condition for e in entries]
    written = [str(c if isinstance(c, str) else c.get("spec")) for c in planned]
    listed_now = shlex.quote(",".join([*dict.fromkeys(written), BASELINES]))
    console.print(
        f"note: no {' and no '.join(w for w, _ in absent)} in this run, so nothing says "
        f"{' or '.join(u for _, u in absent)}: add `baselines` to the conditions "
        f"(--conditions {listed_now})"
    )


EXACT_LEGEND = (
    "(source pairs with both variants right: current = now, reveal = after the reveal "
    "future, joint J = on both futures; late-ref = the memory still answers a late "
    "reference; collided = the two variants' memories are identical, or read the same "
    "after the reveal, a failure for a strict memory; an archive re-reads the raw "
    "history, so its collisions cost nothing)"
)


def best_lines(summary: Summary, notes: bool = True) -> list[str]:
    """Per budget, of the exact reader's verdicts: the best strict condition by joint J
    (``Verdict.keeps_k``), the ceiling (best archive) and the floor (best probe), ties
    named: the headline in one line (``notes``: and a note where the floor is above the
    best)."""
    exact = [v for v in summary.verdicts if v.reader == "exact"]
    lines = []
    for budget in sorted({v.budget for v in exact}):
        parts = []
        tops: dict[str, int] = {}
        for kind, word in (("strict", "best"), ("archive", "ceiling"), ("probe", "floor")):
            found = [v for v in exact if v.budget == budget and v.kind == kind]
            if not found:
                continue
            top = max(v.keeps_k for v in found)
            n = found[0].n
            names = [v.condition for v in found if v.keeps_k == top]
            tie = f" (a tie of {len(names)})" if len(names) > 1 else ""
            who = ", ".join(names) if top else "none passes"
            parts.append(f"{word} {who} {top}/{n}{tie if top else ''}")
            tops[kind] = top
        lines.append(f"joint J at {budget} B: " + "; ".join(parts))
        means = [
            c.mean_memory_bytes
            for c in summary.overall(exact=True)
            if c.budget == budget and c.transform == "identity"
            and summary.kind(c.condition) != "archive"
        ]  # fmt: skip
        # (an archive re-reads the history instead; no figure is no evidence of it)
        if notes and means and all(mean == 0 for mean in means):
            lines.append(
                f"note: at {budget} B every memory is empty: no record fits in it (a budget "
                "counts UTF-8 bytes)"
            )
        if notes and "probe" in tops and "strict" in tops and tops["probe"] > tops["strict"]:
            lines.append(
                f"note: at {budget} B the floor is above the best at identity: a probe keeps "
                "more from the task's surface alone than any condition from its meaning"
            )
    return lines


TableMaker = Callable[[bool, dict[str, str] | None], Table]
"""Builds a table: (compact, condition aliases) -> table."""


def _print_fitting(
    console: Console, make: TableMaker, conditions: list[str], left_out: str | None
) -> None:
    """The full table when the terminal holds it; else the compact one, with short
    aliases for long condition names if even that is too wide (names and denominators
    are never cut), and a line saying where the left-out columns are (``None``: the
    compact table leaves none out)."""
    unbounded = console.options.update_width(100_000)  # a measurement is clamped to it

    def fits(table: Table) -> bool:
        return Measurement.get(console, unbounded, table).maximum <= console.width

    full = make(False, None)
    if fits(full):
        console.print(full)
        return
    aliases: dict[str, str] = {}
    compact = make(True, None)
    if not fits(compact):
        aliases = fitting_aliases(conditions, lambda some: fits(make(True, some)))
        compact = make(True, aliases)
    console.print(compact)
    for name, alias in aliases.items():
        console.print(f"{alias} = {name}", highlight=False, soft_wrap=True)
    if left_out:
        console.print(f"(at {console.width} columns: {left_out} in summary.json and the report)")


def _exact_table(
    summary: Summary,
    entries: list[SummaryCell],
    compact: bool,
    aliases: dict[str, str] | None = None,
) -> Table:
    transforms = list(dict.fromkeys(e.transform for e in entries))
    others = [] if compact else [t for t in transforms if t != "identity"]
    budgets = {e.budget for e in entries}
    at = f"at {', '.join(str(b) for b in sorted(budgets))} B"
    title = (
        f"Exact reader {at}, all families, k/n source pairs at identity"
        if compact
        else f"Exact reader {at}, all families: k/n source pairs at identity; "
        "under a transform, k/n blocks (every renamed or permuted instance)"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=compact)
    # a column's header -> its score
    columns = {"condition": "", "budget": "", "current": "current", "reveal": "reveal",
               "override": "override", "joint J": "joint_J",
               "late-ref adequacy": "late_reference_adequacy",
               "collisions": "collision"}  # fmt: skip
    if compact:
        columns = {"condition": "", **({"budget": ""} if len(budgets) > 1 else {}),
                   "current": "current", "reveal": "reveal", "joint J": "joint_J",
                   "late-ref": "late_reference_adequacy", "collided": "collision"}  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "condition" else "right",
                         no_wrap=True)  # fmt: skip
    for transform in others:
        table.add_column(f"reveal\n@{transform}", justify="right", no_wrap=True)
    if not compact:
        table.add_column("equivariance\nviolations\n(pairs, rename)", justify="right")
    by_key = {(e.condition, e.budget, e.transform): e for e in entries}
    # archives are marked by kind: only the best of them is the ceiling (bm25 is an
    # archive and can score below the floor)
    marks = {"archive": " (archive)", "probe": "" if compact else " (probe)"}  # probe_*
    for (condition, budget, transform), entry in by_key.items():
        if transform != "identity" and "identity" in transforms:
            continue
        name = (aliases or {}).get(condition, condition) + marks.get(summary.kind(condition), "")
        cells = [name, *([str(budget)] if "budget" in columns else [])]
        cells += [entry.text(metric) for metric in columns.values() if metric]
        for other in others:
            moved = by_key.get((condition, budget, other))
            cells.append(moved.text("reveal", "blocks") if moved else "-")
        if not compact:
            # equivariance under the same-length renamings; relabel changes label lengths,
            # so a budgeted memory may keep other records there (the report shows it apart)
            renamed = by_key.get((condition, budget, "rename")) or by_key.get(
                (condition, budget, "decoy")
            )
            violations = renamed.equivariance_violations["source pairs"] if renamed else None
            cells.append(violations.text() if violations else "-")
        table.add_row(*cells)
    return table


def _print_llm(console: Console, summary: Summary) -> None:
    """The LLM reader's table: in full when it fits, else compact (names and denominators
    never cut; lenient scores and outcomes are in the report)."""
    rows = summary.overall(exact=False)
    stage = summary.config.get("llm")
    if not rows or not stage:
        return
    _print_readers(console, summary)
    _print_fitting(
        console,
        lambda compact, aliases: _llm_table(rows, compact, aliases),
        [e.condition for e in rows],
        "lenient scores, override and outcomes are",
    )
    console.print(llm_stage_line(stage))


def llm_stage_line(stage: dict[str, Any]) -> str:
    """What the LLM stage read and with which models (the embedded one named as the
    pipeline check it is): printed with or without ``--verbose``."""
    models = ", ".join(
        f"{role} {stage.get(role)} = {stage.get(role + '_model') or 'unknown model'}"
        for role in ("writer", "reader")
        if stage.get(role)
    )
    line = (
        f"LLM stage: {plural(stage['sample'], 'source pair')} x "
        f"{plural(stage['repeats'], 'repeat')}; {models}."
    )
    from audit.backends import SMOLLM2  # (only for a run with an LLM stage)

    if SMOLLM2.model_id in (stage.get("writer_model"), stage.get("reader_model")):
        line += (
            " The embedded model is tiny and answers poorly; a real audit points --config "
            "at a vLLM server."
        )
    return line


def _print_readers(console: Console, summary: Summary) -> None:
    """A reader that failed its check on ``full``, and a writer no valid reader can
    read (``ReaderCheck``, ``WriterCheck``: the report's texts too)."""
    for check in summary.readers:
        if check.verdict:
            _warn(console, f" (reader {check.reader}): {check.verdict}: {check.text()}; its "
                           "rows below are marked and rank nothing.")  # fmt: skip
    for writer in summary.writers:
        _warn(console, f" ({writer.condition} at {writer.budget} B): {writer.verdict}: "
                       f"{writer.text()}.")  # fmt: skip


def _llm_table(
    rows: list[SummaryCell], compact: bool, aliases: dict[str, str] | None = None
) -> Table:
    readers = list(dict.fromkeys(e.reader for e in rows))
    varying = {
        name: len({str(getattr(e, name)) for e in rows}) > 1
        for name in ("budget", "transform", "reader")
    }
    if compact:
        title = "LLM reader on the LLM sample, k/n source pairs, strict"
        if not varying["budget"]:
            title = title.replace("LLM sample", f"LLM sample at {rows[0].budget} B")
        if not varying["reader"]:
            title += f" ({readers[0]})"
        columns = ["condition", *(c for c in ("budget", "transform", "reader") if varying[c]),
                   "current", "reveal", "joint J"]  # fmt: skip
    else:
        title = "LLM reader on the LLM sample: k/n source pairs, strict (lenient in brackets)"
        columns = ["condition", "budget", "transform", "reader", "current", "reveal",
                   "override", "joint J", "outcomes (reads)"]  # fmt: skip
    if any(e.not_a_verdict for e in rows):
        columns.append("verdict")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=compact)
    for column in columns:
        left = column in ("condition", "transform", "reader", "outcomes (reads)", "verdict")
        table.add_column(column, justify="left" if left else "right",
                         no_wrap=column not in ("outcomes (reads)", "verdict"))  # fmt: skip
    for e in rows:

        def both(metric: str, e: SummaryCell = e) -> str:
            lenient = "" if compact else f" [{e.text(f'{metric}_lenient')}]"
            return e.text(metric) + lenient

        values = {
            "condition": (aliases or {}).get(e.condition, e.condition),
            "budget": str(e.budget), "transform": e.transform, "reader": e.reader,
            "current": both("current"), "reveal": both("reveal"),
            "override": both("override"), "joint J": both("joint_J"),
            "outcomes (reads)": ", ".join(f"{k} {v}" for k, v in sorted(e.outcomes.items())),
            "verdict": "not a verdict" if e.not_a_verdict else "",
        }  # fmt: skip
        table.add_row(*(values[column] for column in columns))
    return table


def _print_wrong_answers(console: Console, summary: Summary) -> None:
    """``--verbose``: the wrong reads at identity by what their answer is (summary.json's
    ``wrong answers (reads)``; the classes that occur, in precedence order)."""
    rows = [
        (e, e.wrong_answers) for e in summary.scores
        if e.family == "all" and e.transform == "identity" and e.wrong_answers is not None
    ]  # fmt: skip
    present: list[str] = [w for w in WRONG_ANSWERS if any(found.get(w) for _, found in rows)]
    if not present:
        return
    _print_fitting(
        console,
        lambda compact, aliases: _wrong_table(rows, present, compact, aliases),
        [e.condition for e, _ in rows],
        None,  # compact only packs the columns closer
    )


def _wrong_table(
    rows: list[tuple[SummaryCell, dict[str, int]]],
    present: list[str],
    compact: bool,
    aliases: dict[str, str] | None,
) -> Table:
    several = {name: len({getattr(e, name) for e, _ in rows}) > 1 for name in ("budget", "reader")}
    table = Table(
        title="Wrong reads at identity, by what the answer is (reads; docs/method.md)",
        box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=compact,
    )  # fmt: skip
    keys = ["condition", *(name for name in ("budget", "reader") if several[name])]
    for key in keys:
        table.add_column(key, justify="right" if key == "budget" else "left", no_wrap=True)
    table.add_column("wrong", justify="right")
    for name in present:
        table.add_column(name.replace("_", "\n"), justify="right")
    for e, found in rows:
        names = {"condition": (aliases or {}).get(e.condition, e.condition),
                 "budget": str(e.budget), "reader": e.reader}  # fmt: skip
        table.add_row(
            *(names[key] for key in keys),
            str(sum(found.values())),
            *(str(found.get(name, 0)) for name in present),
        )
    return table


def _print_equivariance(console: Console, summary: Summary, spelling: bool = True) -> None:
    """A false order-invariance claim as a warning; spelling dependence as one note
    (``spelling``: ``--verbose``); the texts are the report's."""
    found = summary.equivariance_alerts
    for finding in found:
        if finding.check == "order":
            _warn(console, f": {finding.text()}")
    spelled = [
        f for f in found if f.check == "labels" and f.kind == "strict" and f.reader == "exact"
    ]
    if spelling and spelled:
        budgets = len({f.budget for f in spelled}) > 1
        text = spelling_text(
            spelled, lambda f: f.condition + (f" at {f.budget} B" if budgets else "")
        )
        console.print(f"note: {''.join(text)}")


def _print_floor(console: Console, summary: Summary, verbose: bool) -> None:
    """Conditions this audit cannot tell from the probe floor (``floor_message``, the
    report's text too): one warning per reader and budget; ``verbose``: its rule, then
    a line per condition saying where it did not beat the best probe."""
    by_where: dict[tuple[str, int], list[FloorFinding]] = {}
    for finding in summary.probe_matches:
        by_where.setdefault((finding.reader, finding.budget), []).append(finding)
    for (reader, budget), findings in by_where.items():
        strict = {
            e.condition for e in summary.scores
            if (e.reader, e.budget) == (reader, budget) and summary.kind(e.condition) == "strict"
        }  # fmt: skip
        message = floor_message(findings, len(strict))
        who = "" if reader == "exact" else f" (reader {reader})"
        said = f"{who}: {message.headline[0].lower()}{message.headline[1:]} at {budget} B"
        if message.beaten:
            said += f": {message.beaten}"
        if not verbose:
            _warn(console, f"{said} (--verbose: its tests).")
            continue
        _warn(console, f"{said}. {message.body}")
        width = max(len(name) for name, _ in message.items)
        for name, where in message.items:  # wrapped under the name, never cut
            console.print(Padding(Text(f"{name:<{width}}  {where}", overflow="fold"), (0, 0, 0, 2)))


class _RunConsole(Console):
    """A console whose reader may leave (``audit run --seeds 1,2,3 | head -1``): the run
    goes on quietly and finishes its work (Rich's default exits 1 there)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence_stdout()


class _TrimmedLines:
    """stdout without the space Rich leaves at the end of each line it wraps."""

    _TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)\n")

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(self._TRAILING.sub(r"\1\n", text))

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, flush, encoding
        return getattr(self._stream, name)


def plain_console() -> Console:
    """A console that prints text as it is: no markup (a condition named ``[/x]`` made
    Rich raise), no colours on the digits of paths and counts (``_warn`` styles its
    label itself), no space left at the end of a wrapped line."""
    return _RunConsole(highlight=False, markup=False, file=_TrimmedLines(sys.stdout))  # type: ignore[arg-type]


def _warn(console: Console, rest: str, label: str = "warning", style: str = "bold yellow") -> None:
    """A styled label, then plain text."""
    console.print(Text.assemble((label, style), rest))


def displayable(value: Any) -> Any:
    """Every string of a summary (keys too) as visible text: a condition name is any
    text a user or a plugin chose, and a terminal must not act on its control
    characters (an escape sequence can set the window title or colour what follows).
    ``terminal_text`` is one-to-one on what it changes, so lookups by name still agree."""
    if isinstance(value, str):  # one line: a newline in a name must not fake a line
        return terminal_text(value)
    if isinstance(value, dict):
        return {displayable(k): displayable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [displayable(v) for v in value]
    return value


def _print_verdicts(console: Console, summary: Summary) -> None:
    """The answer first: per reader and budget, one line per strict condition (keeps,
    beats floor?, collides, flattered?: ``Verdict.cells``, the report's texts too),
    then the ceiling (the best archive) and the floor (the best probe), after the
    legend that says what the words mean."""
    found = summary.verdicts
    if not found:
        return
    for line in textwrap.wrap(VERDICT_LEGEND, width=max(40, console.width),
                              break_long_words=False, break_on_hyphens=False):  # fmt: skip
        console.print(line, soft_wrap=True)
    groups: dict[tuple[str, int], list[Verdict]] = {}
    for verdict in found:
        groups.setdefault((verdict.reader, verdict.budget), []).append(verdict)
    for (reader, budget), here in groups.items():
        console.print(
            f"Verdicts at {budget} B, {'exact reader' if reader == 'exact' else reader}, "
            f"{plural(max(v.n for v in here), 'source pair')}:",
            soft_wrap=True,
        )
        _print_verdict_rows(console, verdict_rows(here))


def _print_verdict_rows(console: Console, shown: list[VerdictRow]) -> None:
    """Aligned verdict lines under a header of the answers' titles; a name too long for
    the terminal gets a line of its own, its answers on the next."""
    rows = [(row.label, row.cells, row.remark) for row in shown]
    keys = [key for key, _ in VERDICT_COLUMNS]
    widths = {
        key: max(len(title), *(len(cells.get(key, "")) for _, cells, _ in rows))
        for key, title in VERDICT_COLUMNS
    }
    name_width = max(len("condition"), *(len(name) for name, _, _ in rows))
    answers_width = sum(widths.values()) + 2 * (len(keys) - 1)
    own_line = 2 + name_width + 2 + answers_width > console.width
    if own_line:
        name_width = 2

    def line(name: str, cells: dict[str, str], remark: str) -> str:
        if remark:
            text = f"{cells['keeps']:<{widths['keeps']}}  {remark}"
        else:
            text = "  ".join(f"{cells[k]:<{widths[k]}}" for k in keys)
        if own_line:
            return f"    {text}".rstrip()
        return f"  {name:<{name_width}}  {text}".rstrip()

    titles = dict(VERDICT_COLUMNS)
    console.print(line("condition", titles, ""), soft_wrap=True)
    for name, cells, remark in rows:
        if own_line:  # a name wider than the terminal (a cmd: path) folds, never overflows
            for part in textwrap.wrap(name, console.width - 2, break_on_hyphens=False,
                                      subsequent_indent="  "):  # fmt: skip
                console.print(f"  {part}", soft_wrap=True)
        console.print(line(name, cells, remark), soft_wrap=True)


def print_summary(
    summary: Mapping[str, Any], run_dir: Path, seconds: float | None, verbose: bool = False
) -> None:
    """The run's answer (summary.json's object): the verdicts first, then what needs a
    warning; ``verbose`` adds the tables by metric and transform and the floor check's
    every test.  ``seconds``: how long the run took (None: nothing ran this time)."""
    console = plain_console()
    found = Summary.model_validate(displayable(dict(summary)))
    run_dir = Path(terminal_text(str(run_dir)))
    _print_verdicts(console, found)
    if verbose:
        _print_exact(console, found)
        _print_llm(console, found)
        _print_wrong_answers(console, found)
    else:
        for line in best_lines(found):  # (the exact table has them)
            console.print(line)
        _print_readers(console, found)
        stage = found.config.get("llm")
        if stage and found.overall(exact=False):
            console.print(llm_stage_line(stage))
    for finding in found.budget_alerts or ():  # its scores are of empty memories
        _warn(console, f": {finding.text()}")
    _print_floor(console, found, verbose)
    _print_equivariance(console, found, spelling=verbose)
    if not verbose:
        _print_missing_baselines(console, found)
    flags = [flag for flag in found.selection if flag.warn and flag.misleading]
    noise = [] if verbose else [flag for flag in flags if flag.within_noise]
    for flag in flags:
        if flag not in noise:
            who = "" if flag.reader == "exact" else f" (reader {flag.reader})"
            _warn(console, f"{who}: {flag.text()}")
    if noise:
        console.print(f"note: {noise_note(noise)}")
    written = [n for n in ("results.parquet", "results.csv") if (run_dir / n).exists()]
    seed = found.config.get("seed")
    console.print(
        f"{found.n_reads} reads on {found.n_source_pairs} source pairs"
        + ("" if seconds is None else f" in {seconds:.1f} s")
        + ("" if seed is None else f" (transform seed {seed})")
        + f"; results in {run_dir}/ ({', '.join(written)}, summary.json)"
        + ("" if verbose else "; --verbose: every score by metric and transform")
    )


def _kn(found: Mapping[str, Any] | None) -> str:
    return "-" if found is None else Count.model_validate(found).text()


def print_replication(rows: list[dict[str, Any]], root: Path) -> None:
    """Per system: joint J per seed, pooled, and whether the seeds agree."""
    console = plain_console()
    rows = displayable(rows)
    seeds = sorted({s for row in rows for s in row["joint_J"]["per_seed"]}, key=int)
    table = Table(
        title="Replication: joint J at identity, k/n source pairs per generation seed and pooled",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("condition")
    table.add_column("budget", justify="right")
    for seed in seeds:
        table.add_column(f"seed {seed}", justify="right")
    table.add_column("pooled [95 % Wilson]", justify="right")
    table.add_column("seeds differ?\n(heterogeneity p)", justify="right")
    for row in rows:
        if row["reader"] != "exact":
            continue
        joint = row["joint_J"]
        pooled = joint["pooled"]
        interval = f" [{pooled['low']:.2f}, {pooled['high']:.2f}]" if pooled["n"] else ""
        p = joint["heterogeneity_p"]
        agree = "-" if p is None else (f"yes, p {p:.3g}" if p < 0.05 else f"no evidence, p {p:.2f}")
        table.add_row(
            row["condition"], str(row["budget"]),
            *(_kn(joint["per_seed"].get(seed)) for seed in seeds),
            _kn(pooled) + interval, agree,
        )  # fmt: skip
    console.print(table)
    per_seed = [c["n"] for row in rows for c in row["joint_J"]["per_seed"].values() if c["n"]]
    console.print(
        'seeds differ?: an exact test that the seeds share one joint J rate. "no evidence" '
        "is not agreement: with "
        + (f"{min(per_seed)} source pairs a seed" if per_seed else "few source pairs")
        + " it sees only large differences (low power)."
    )
    console.print(f"replication of {len(seeds)} seeds in {root}/ (replication.json, seed-N/)")
