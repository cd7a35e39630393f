"""Console output of ``audit run``: a progress display per stage and the end-of-run summary.

Every number comes from ``summary.json`` (``audit.scoring``) and every header says
its unit: source pairs at identity, blocks under a transform, reads for
equivariance.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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

from audit.cli._common import silence_stdout, terminal_text
from audit.engine import RequestTally, RunProgress, Stage, Tallies
from audit.scoring import article, grouped_matches, listed, probe_advice
from compressors import BASELINES

STAGE_NAMES: dict[Stage, tuple[str, str]] = {
    "deterministic": ("deterministic", "jobs"),
    "llm": ("LLM stage", "units"),
}
"""A stage's name and what it counts, in the words of the manifest and docs/reliability.md:
a job is one source pair (every condition, budget and transform of it); an LLM unit is
one condition written over one pair instance at one budget and repeat, then read on
every branch."""

LOG_EVERY_S = 30.0
"""Without a terminal (a log file, CI), a line at most this often while a stage runs."""


def describe_tallies(tallies: list[RequestTally], seconds: float) -> str:
    """The LLM stage's requests so far, one backend role after another."""
    parts = []
    for t in tallies:
        rate = f", {t.sent / seconds:.2f} sent/s" if seconds > 0 and t.sent else ""
        parts.append(
            f"{t.role}: {t.requests} asked, {t.sent} sent, {t.cache_hits} cached, "
            f"{t.failed} NA{rate}"
        )
    return "; ".join(parts)


class _StageBars(Progress):
    """Progress bars, with the LLM stage's request tallies on a line of their own (so the
    bars fit an 80-column terminal)."""

    tallies: Tallies | None = None
    llm_task: TaskID | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.tallies is not None and self.llm_task is not None:
            elapsed = self._tasks[self.llm_task].elapsed or 0.0
            text = describe_tallies(self.tallies(), elapsed)
            if text:
                yield Text("  " + text, overflow="fold")


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
        """Without a terminal: each stage's [total, start time, tallies, done]."""
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
                transient=True,
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

    def begin(self, stage: Stage, done: int, total: int, tallies: Tallies | None = None) -> None:
        name, unit = STAGE_NAMES[stage]
        if self._bars is not None:
            task = self._bars.add_task(name, total=total, completed=done, unit=unit)
            self._tasks[stage] = task
            if stage == "llm":
                self._bars.tallies, self._bars.llm_task = tallies, task
            return
        self._plain[stage] = [total, time.monotonic(), tallies, done]
        self._active = stage
        self._last_line = time.monotonic()

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
            total, _, _, done = self._plain[stage]
            if done < total and time.monotonic() - self._last_line >= self.log_every_s:
                self._line(stage)

    def _line(self, stage: Stage) -> None:
        total, started, tallies, done = self._plain[stage]
        now = time.monotonic()
        self._last_line = now
        name, unit = STAGE_NAMES[stage]
        line = f"{name}: {done}/{total} {unit}, {now - started:.0f} s"
        if tallies is not None:
            line += "; " + describe_tallies(tallies(), now - started)
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


def _fmt(kn: dict[str, int] | None) -> str:
    if not kn or kn["n"] == 0:
        return "-"
    if kn.get("k_high", kn["k"]) != kn["k"]:
        return f"{kn['k']}..{kn['k_high']}/{kn['n']}"
    return f"{kn['k']}/{kn['n']}"


def _cells(summary: dict[str, Any], exact: bool) -> list[dict[str, Any]]:
    return [
        e for e in summary["scores"] if e["family"] == "all" and (e["reader"] == "exact") == exact
    ]


def _print_exact(console: Console, summary: dict[str, Any]) -> None:
    """The exact reader's table: in full when the terminal holds it, else a compact
    headline (condition, current, reveal, joint J, late-ref, collisions) that fits 80
    columns; names and denominators are never cut, the report has the rest."""
    entries = _cells(summary, exact=True)
    if not entries:
        return
    budgets = {e["budget"] for e in entries}
    moved = any(e["transform"] != "identity" for e in entries)
    left = ["override", *(["the budget"] if len(budgets) == 1 else []),
            *(["every transform's column"] if moved else []), "equivariance"]  # fmt: skip
    _print_fitting(
        console,
        lambda compact, aliases: _exact_table(summary, entries, compact, aliases),
        [e["condition"] for e in entries],
        f"{listed(left)} are",
    )
    console.print(EXACT_LEGEND)
    for line in best_lines(summary, entries):
        console.print(line)
    missing = missing_baselines(summary, entries)
    if missing:
        console.print(missing)


def missing_baselines(summary: dict[str, Any], entries: list[dict[str, Any]]) -> str:
    """A note when the run has no floor or no ceiling to read its conditions against
    (``--conditions my_memory`` alone gives a score with nothing to compare it to)."""
    kinds = {summary.get("kinds", {}).get(e["condition"], "strict") for e in entries}
    if "strict" not in kinds:
        return ""
    roles = (("probe", "shortcut probe (the floor)"), ("archive", "archive (the ceiling)"))
    absent = [word for kind, word in roles if kind not in kinds]
    if not absent:
        return ""
    listed_now = shlex.quote(",".join([*dict.fromkeys(e["condition"] for e in entries), BASELINES]))
    return (
        f"note: no {' and no '.join(absent)} in this run, so nothing says whether these "
        "memories beat a shortcut or how far they are from the whole history: add "
        f"`baselines` to the conditions (--conditions {listed_now})"
    )


EXACT_LEGEND = (
    "(source pairs with both variants right: current = now, reveal = after the reveal "
    "future, joint J = on both futures; late-ref = the memory still answers a late "
    "reference; collided = the two variants' memories are identical, a failure for a "
    "strict memory; an archive re-reads the raw history, so its collisions cost nothing)"
)


def best_lines(summary: dict[str, Any], entries: list[dict[str, Any]]) -> list[str]:
    """Per budget at identity: the best strict condition by joint J, the ceiling (best
    archive) and the floor (best probe), ties named: the headline in one line."""
    kinds = summary.get("kinds", {})
    at_identity = [e for e in entries if e["transform"] == "identity"]
    lines = []
    for budget in sorted({e["budget"] for e in at_identity}):
        here = [e for e in at_identity if e["budget"] == budget]
        parts = []
        tops: dict[str, int] = {}
        for kind, word in (("strict", "best"), ("archive", "ceiling"), ("probe", "floor")):
            group = [e for e in here if kinds.get(e["condition"], "strict") == kind]
            if not group:
                continue
            top = max(e["source pairs"]["joint_J"]["k"] for e in group)
            n = group[0]["source pairs"]["joint_J"]["n"]
            names = [e["condition"] for e in group if e["source pairs"]["joint_J"]["k"] == top]
            tie = f" (a tie of {len(names)})" if len(names) > 1 else ""
            who = ", ".join(names) if top else "none passes"
            parts.append(f"{word} {who} {top}/{n}{tie if top else ''}")
            tops[kind] = top
        lines.append(f"joint J at {budget} B: " + "; ".join(parts))
        if "probe" in tops and "strict" in tops and tops["probe"] > tops["strict"]:
            lines.append(
                f"note: at {budget} B the floor is above the best at identity, where a "
                "probe wins on the task's surface alone; the shortcut check compares them "
                "under every transform (which breaks that surface) and names each "
                "condition that never does better"
            )
    return lines


TableMaker = Callable[[bool, dict[str, str] | None], Table]
"""Builds a table: (compact, condition aliases) -> table."""


def _print_fitting(
    console: Console, make: TableMaker, conditions: list[str], left_out: str
) -> None:
    """The full table when the terminal holds it; else the compact one, with short
    aliases for long condition names if even that is too wide (names and denominators
    are never cut), and a line saying where the left-out columns are."""
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
        aliases = _aliases(conditions)
        compact = make(True, aliases)
    console.print(compact)
    for name, alias in aliases.items():
        console.print(f"{alias} = {name}", highlight=False, soft_wrap=True)
    console.print(f"(at {console.width} columns: {left_out} in summary.json and the report)")


ALIAS_LONGER_THAN = 16
"""A condition name longer than this gets a short alias when the table does not fit."""


def _aliases(names: list[str]) -> dict[str, str]:
    """Short names (``c1``, ``c2``...) for the long condition names, so a narrow terminal
    shows every column whole; the names themselves are printed under the table."""
    long = [n for n in dict.fromkeys(names) if len(n) > ALIAS_LONGER_THAN]
    return {name: f"c{index}" for index, name in enumerate(long, start=1)}


def _exact_table(
    summary: dict[str, Any],
    entries: list[dict[str, Any]],
    compact: bool,
    aliases: dict[str, str] | None = None,
) -> Table:
    transforms = list(dict.fromkeys(e["transform"] for e in entries))
    others = [] if compact else [t for t in transforms if t != "identity"]
    budgets = {e["budget"] for e in entries}
    title = (
        "Exact reader, all families, k/n source pairs at identity"
        if compact
        else "Exact reader, all families: k/n source pairs at identity; "
        "under a transform, k/n blocks (every renamed or permuted instance)"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=compact)
    columns = ["condition", "budget", "current", "reveal", "override", "joint J",
               "late-ref adequacy", "collisions"]  # fmt: skip
    if compact:
        columns = ["condition", *(["budget"] if len(budgets) > 1 else []), "current",
                   "reveal", "joint J", "late-ref", "collided"]  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "condition" else "right",
                         no_wrap=True)  # fmt: skip
    for transform in others:
        table.add_column(f"reveal\n@{transform}", justify="right", no_wrap=True)
    if not compact:
        table.add_column("equivariance\nviolations\n(pairs, rename)", justify="right")
    by_key = {(e["condition"], e["budget"], e["transform"]): e for e in entries}
    kinds = summary.get("kinds", {})
    # archives are marked by kind: only the best of them is the ceiling (bm25 is an
    # archive and can score below the floor)
    marks = {"archive": " (archive)", "probe": "" if compact else " (probe)"}  # probe_*
    for (condition, budget, transform), entry in by_key.items():
        if transform != "identity" and "identity" in transforms:
            continue
        pairs = entry["source pairs"]
        name = (aliases or {}).get(condition, condition) + marks.get(
            kinds.get(condition, "strict"), ""
        )
        values = {
            "condition": name, "budget": str(budget), "current": _fmt(pairs["current"]),
            "reveal": _fmt(pairs["reveal"]), "override": _fmt(pairs["override"]),
            "joint J": _fmt(pairs["joint_J"]),
            "late-ref adequacy": _fmt(pairs["late_reference_adequacy"]),
            "late-ref": _fmt(pairs["late_reference_adequacy"]),
            "collisions": _fmt(pairs["collision"]),
            "collided": _fmt(pairs["collision"]),
        }  # fmt: skip
        cells = [values[column] for column in columns]
        for other in others:
            moved = by_key.get((condition, budget, other))
            cells.append(_fmt(moved["blocks"]["reveal"]) if moved else "-")
        if not compact:
            # equivariance under the same-length renamings; relabel changes label lengths,
            # so a budgeted memory may keep other records there (the report shows it apart)
            renamed = by_key.get((condition, budget, "rename")) or by_key.get(
                (condition, budget, "decoy")
            )
            violations = renamed["equivariance_violations"]["source pairs"] if renamed else None
            cells.append(_fmt(violations) if renamed else "-")
        table.add_row(*cells)
    return table


def _print_llm(console: Console, summary: dict[str, Any]) -> None:
    """The LLM reader's table: in full when it fits, else compact (names and denominators
    never cut; lenient scores and outcomes are in the report)."""
    rows = _cells(summary, exact=False)
    stage = summary.get("run", {}).get("config", {}).get("llm")
    if not rows or not stage:
        return
    _print_fitting(
        console,
        lambda compact, aliases: _llm_table(rows, compact, aliases),
        [e["condition"] for e in rows],
        "lenient scores, override and outcomes are",
    )
    models = ", ".join(
        f"{role} {stage.get(role)} = {stage.get(role + '_model') or 'unknown model'}"
        for role in ("writer", "reader")
        if stage.get(role)
    )
    repeats = stage["repeats"]
    line = (
        f"LLM stage: {stage['sample']} source pair{'' if stage['sample'] == 1 else 's'} x "
        f"{repeats} repeat{'' if repeats == 1 else 's'}; {models}."
    )
    if "local" in (stage.get("writer"), stage.get("reader")):
        line += (
            " The embedded model is tiny and answers poorly; a real audit points --config "
            "at a vLLM server."
        )
    console.print(line)


def _llm_table(
    rows: list[dict[str, Any]], compact: bool, aliases: dict[str, str] | None = None
) -> Table:
    readers = list(dict.fromkeys(e["reader"] for e in rows))
    varying = {
        name: len({str(e[name]) for e in rows}) > 1 for name in ("budget", "transform", "reader")
    }
    if compact:
        title = "LLM reader on the LLM sample, k/n source pairs, strict"
        if not varying["reader"]:
            title += f" ({readers[0]})"
        columns = ["condition", *(c for c in ("budget", "transform", "reader") if varying[c]),
                   "current", "reveal", "joint J"]  # fmt: skip
    else:
        title = "LLM reader on the LLM sample: k/n source pairs, strict (lenient in brackets)"
        columns = ["condition", "budget", "transform", "reader", "current", "reveal",
                   "override", "joint J", "outcomes (reads)"]  # fmt: skip
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=compact)
    for column in columns:
        left = column in ("condition", "transform", "reader", "outcomes (reads)")
        table.add_column(column, justify="left" if left else "right",
                         no_wrap=column != "outcomes (reads)")  # fmt: skip
    for e in rows:
        pairs = e["source pairs"]

        def both(metric: str, pairs: dict[str, Any] = pairs) -> str:
            if compact:
                return _fmt(pairs[metric])
            return f"{_fmt(pairs[metric])} [{_fmt(pairs.get(f'{metric}_lenient'))}]"

        values = {
            "condition": (aliases or {}).get(e["condition"], e["condition"]),
            "budget": str(e["budget"]),
            "transform": e["transform"], "reader": e["reader"],
            "current": both("current"), "reveal": both("reveal"),
            "override": both("override"), "joint J": both("joint_J"),
            "outcomes (reads)": ", ".join(
                f"{k} {v}" for k, v in sorted(e["outcomes (reads)"].items())
            ),
        }  # fmt: skip
        table.add_row(*(values[column] for column in columns))
    return table


def _print_equivariance(console: Console, alerts: list[dict[str, Any]]) -> None:
    """A false order-invariance claim as a warning; spelling dependence as one note."""
    for alert in alerts:
        if alert["check"] != "order":
            continue
        _warn(
            console,
            f": {alert['condition']} claims order invariance, but "
            f"at {alert['budget']} B its memory changed under {alert['transform']} on "
            f"{alert['k']}/{alert['n']} source pairs ({alert['reads_k']}/{alert['reads_n']} "
            "reads): the claim is false.",
        )
    spelled = [
        f"{a['condition']} {a['k']}/{a['n']}"
        + (f" at {a['budget']} B" if len({b["budget"] for b in alerts}) > 1 else "")
        for a in alerts
        if a["check"] == "labels" and a["kind"] == "strict" and a["reader"] == "exact"
    ]
    if spelled:
        console.print(
            "note: these memories depend on how labels are spelled (equivariance violated "
            f"under renaming, source pairs): {', '.join(spelled)}."
        )


def _print_probe_matches(console: Console, matches: list[dict[str, Any]]) -> None:
    """Conditions no better than a shortcut probe: one warning per reader and budget.
    One matched condition reads as one sentence; several read as one sentence, a line
    per condition naming its probes, and one line saying what each probe exploits (the
    default audit's five matched conditions used to be five near-identical paragraphs)."""
    by_where: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for group in grouped_matches(matches):
        by_where.setdefault((group["reader"], group["budget"]), []).append(group)
    for (reader, budget), groups in by_where.items():
        who = "" if reader == "exact" else f" (reader {reader})"
        transforms = ", ".join(groups[0]["transforms"])
        kinds = listed(list(dict.fromkeys(h for g in groups for h in g["heuristics"])), "or")
        if len(groups) == 1:
            found = groups[0]["matches"]
            probes = ", ".join(
                m["probe"] + (f" (it exploits {m['exploits']})" if m.get("exploits") else "")
                for m in found
            )
            advice = (
                groups[0]["advice"] if found[0].get("advice") else "add a transform that breaks it"
            )
            one = len(found) == 1
            _warn(
                console,
                f"{who}: this audit cannot tell {groups[0]['condition']} "
                f"from {article(kinds)} {kinds} heuristic at {budget} B: "
                f"{'the probe' if one else 'the probes'} {probes} "
                f"{'does' if one else 'each do'} at least as well on joint J under every transform "
                f"({transforms}); {advice}.",
            )
            continue
        matched = list({m["probe"]: m for g in groups for m in g["matches"]}.values())
        advice = probe_advice("each condition", matched, groups[0]["transforms"])
        _warn(
            console,
            f"{who}: this audit cannot tell {len(groups)} conditions "
            f"from {article(kinds)} {kinds} heuristic at {budget} B: probes that know nothing "
            f"of semantics do at least as well on joint J under every transform ({transforms}); "
            f"{advice}.",
        )
        width = max(len(g["condition"]) for g in groups)
        for group in groups:
            console.print(
                f"  {group['condition']:<{width}}  "
                + ", ".join(m["probe"] for m in group["matches"]),
                highlight=False,
            )
        exploits = "; ".join(
            f"{m['probe']} exploits {m['exploits']}" for m in matched if m.get("exploits")
        )
        if exploits:
            console.print(Padding(Text(f"({exploits})"), (0, 0, 0, 2)))


class _RunConsole(Console):
    """A console whose reader may leave (``audit run --seeds 1,2,3 | head -1``): the
    display is the least of a run, so the run goes on, quietly, and finishes its work
    (Rich's default exits 1 there, which ended a replication after its first seed)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence_stdout()


def plain_console() -> Console:
    """A console that prints text as it is: no markup (a condition named ``[/x]`` made
    Rich raise), no colours on the digits of paths and counts (``_warn`` styles its
    label itself)."""
    return _RunConsole(highlight=False, markup=False)


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


def print_summary(summary: dict[str, Any], run_dir: Path, seconds: float) -> None:
    console = plain_console()
    summary = displayable(summary)
    run_dir = Path(terminal_text(str(run_dir)))
    _print_exact(console, summary)
    _print_llm(console, summary)
    _print_probe_matches(console, summary.get("probe_matches", []))
    _print_equivariance(console, summary.get("equivariance_alerts", []))
    for flag in summary["selection"]:
        if flag["warn"] and flag["misleading"]:
            who = "" if flag["reader"] == "exact" else f" (reader {flag['reader']})"
            noise = (
                " Within noise: no such difference is significant by an exact McNemar test "
                "on these source pairs."
                if flag.get("within_noise")
                else ""
            )
            _warn(
                console,
                f"{who}: at {flag['budget']} B, current accuracy ranks "
                f"{', '.join(flag['best_by_current'])} best, but reveal accuracy ranks "
                f"{', '.join(flag['best_by_reveal'])} best: current accuracy would pick "
                f"{', '.join(flag['misleading'])}.{noise}",
            )
    raised = sum(
        e["outcomes (reads)"].get("error", 0) for e in summary["scores"] if e["family"] == "all"
    )
    if raised:
        _warn(
            console,
            ": each counts against it (scored 0, no adequate memory, a collision), never as "
            f"a smaller n; the tracebacks are in {run_dir}/run.log",
            label=f"{raised} reads failed because a compressor raised",
            style="bold red",
        )
    console.print(
        f"{summary['n_reads']} reads on {summary['n_source_pairs']} source pairs in "
        f"{seconds:.1f} s; results in {run_dir}/ (results.csv, results.parquet, summary.json)"
    )


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
            *(_fmt(joint["per_seed"].get(seed)) for seed in seeds),
            _fmt(pooled) + interval, agree,
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
