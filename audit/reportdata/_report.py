"""``build_report``: a stored run as a ``reports.Document``, section by section."""

from __future__ import annotations

from collections.abc import Callable

from audit.reportdata import (
    _budget,
    _compactions,
    _comparisons,
    _costs,
    _drilldown,
    _failures,
    _families,
    _glance,
    _headline,
    _method,
    _transforms,
)
from audit.reportdata._context import Options, ReportContext
from audit.rundir import MemoryStore, RunData
from audit.scoring import reader_agreement, score_results
from reports import Code, Document, Facts, Section, Text

SECTIONS: list[Callable[[ReportContext], Section]] = [
    _headline.build,
    _comparisons.build,
    _families.build,
    _transforms.build,
    _failures.build,
    _budget.build,
    _compactions.build,
    _costs.build,
    _method.build,
    _drilldown.build,
]
"""The report's sections, in order: a new section is one module and one line here."""


def facts(ctx: ReportContext) -> Facts:
    """The run in a few lines: where, when, what was run, on which machine."""
    run, scores = ctx.run, ctx.scores
    plan = run.plan
    df = run.results
    families = [str(f) for f in df["family"].unique()]  # in order of appearance
    readers = list(dict.fromkeys(s[0] for s in scores.systems))
    budgets = sorted(
        {s[2] for s in scores.systems} or set(plan.budgets if plan else ())
    )  # a condition may set its own
    transforms = [str(t) for t in plan.transforms] if plan else scores.transforms()
    items: list[tuple[str, Text]] = [("run", [Code(str(run.path))])]
    if run.created:
        items.append(("created", run.created))
    items += [
        (
            "pairs",
            f"{df['source_pair_id'].nunique()} independent source pairs in "
            f"{len(families)} families ({', '.join(families)}); {len(df):,} reads",
        ),
        ("conditions", ", ".join(run.conditions)),
        ("budgets", ", ".join(map(str, budgets)) + " B"),
        ("transforms", ", ".join(transforms) + (f" (seed {plan.seed})" if plan else "")),
        ("readers", ", ".join(readers) + ("" if run.has_llm else " (no LLM reader in this run)")),
    ]
    items += [(f"reader {name}", line) for name, line in reproducibility(run)]
    environment = run.config_file.environment if run.config_file else None
    if environment is not None and environment.machine:
        machine = environment.machine
        if environment.python:
            machine += f"; Python {environment.python}"
        if environment.git_commit:
            machine += f"; commit {environment.git_commit[:12]}"
        items.append(("machine", machine))
    return Facts(items)


def reproducibility(run: RunData) -> list[tuple[str, str]]:
    """Per LLM reader: its backend's mode, its determinism probe and, with repeats, how
    often it disagreed with itself on an identical memory (the noise floor)."""
    recorded = run.config_file.backends if run.config_file is not None else {}
    # a reader is named backend:model in the results, its backend alone in config.json
    agreements = {a.reader.split(":", 1)[0]: a for a in reader_agreement(run.results)}
    labels = {a.reader.split(":", 1)[0]: a.reader for a in agreements.values()}
    lines: list[tuple[str, str]] = []
    for name in sorted(set(agreements) | {n for n, r in recorded.items() if "reader" in r.roles}):
        parts: list[str] = []
        record = recorded.get(name)
        if record is not None:
            if record.mode:
                parts.append(f"mode {record.mode}")
            probe = record.determinism
            if probe is not None:
                times = (
                    f", the lowest of {record.measurements} invocations"
                    if record.measurements > 1
                    else ""
                )
                parts.append(
                    f"determinism {probe.identical}/{probe.compared} identical answers "
                    f"(the same requests one at a time, then all at once shuffled{times})"
                )
            else:
                parts.append(f"determinism not measured ({record.unmeasured or 'no probe'})")
        else:
            parts.append("determinism not recorded (a run made before it was measured)")
        agreement = agreements.get(name)
        if agreement is not None and agreement.groups:
            parts.append(
                f"the same memory read again: another score in {agreement.score_differs}/"
                f"{agreement.groups} read groups, another answer in "
                f"{agreement.answer_differs}/{agreement.groups}"
            )
        elif agreement is not None:
            parts.append("self-agreement not measured (needs --repeats 2 or more)")
        lines.append((labels.get(name, name), "; ".join(parts)))
    return lines


def build_report(run: RunData, options: Options | None = None) -> Document:
    """Everything ``reports.write_document`` needs, as plain data; nothing is re-run."""
    options = options or Options()
    scores = score_results(run.results, run.conditions)
    memories = MemoryStore(run.path)
    try:
        ctx = ReportContext(run, scores, options, memories)
        sections = [build(ctx) for build in SECTIONS]
        # a memory the drill-down read that is not the one its sha256 names was left out:
        # said before the summary is built, which shows the run's damage
        run.integrity.add_damaged_jobs(run.path, memories.damaged())
        return Document(
            title=f"memory audit: {run.label}",
            facts=facts(ctx),
            summary=_glance.build(ctx),
            sections=sections,
            stem="report",
        )
    finally:
        memories.close()
