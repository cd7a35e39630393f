"""Section "costs": the work of every stage (costs.json) and what the results hold."""

from __future__ import annotations

import calendar
import time
from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext
from audit.rundir import ClientCounters
from reports import Bullets, Column, Section, Table

COLUMNS = [
    Column("stage", "stage", "text"),
    Column("units", "jobs or units", "integer"),
    Column("requests", "requests", "integer", help="chat calls made"),
    Column("sent", "sent", "integer", help="distinct requests that reached a server"),
    Column("cache_hits", "from cache", "integer", help="answered by the response cache"),
    Column(
        "deduplicated",
        "deduplicated",
        "integer",
        help="answered by an identical request of this run",
    ),
    Column("failed", "failed (NA)", "integer"),
    Column("prompt_tokens", "prompt tokens", "integer"),
    Column("completion_tokens", "completion tokens", "integer"),
    Column("seconds", "seconds", "number", digits=1),
    Column("reads", "reads", "integer"),
    Column("distinct_memories", "distinct memories", "integer"),
    Column("memory_bytes", "memory bytes", "integer"),
]
COUNTERS = tuple(c.key for c in COLUMNS[2:9])
"""The columns a ``ClientCounters`` fills, by its field names: requests to completion tokens."""


def _add(rows: dict[str, dict[str, Any]], stage: str, values: dict[str, Any]) -> None:
    row = rows.setdefault(stage, {"stage": stage})
    for key, value in values.items():
        row[key] = row.get(key, 0) + value


def cost_frame(ctx: ReportContext) -> tuple[pd.DataFrame, list[str]]:
    run = ctx.run
    rows: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    if run.costs is not None:
        for invocation in run.costs.invocations:
            if invocation.backends_start is not None:
                start = invocation.backends_start.seconds
                _add(rows, "LLM backends: start (model, server)", {"seconds": start})
            if invocation.deterministic is not None:
                stage = invocation.deterministic
                work = {"units": stage.jobs, "seconds": stage.seconds}
                _add(rows, "compress + exact read (deterministic jobs)", work)
                for condition, seconds in stage.conditions.items():  # (in the workers)
                    _add(rows, f"condition {condition}, in its jobs", {"seconds": seconds})
            if invocation.probe is not None:
                probe = invocation.probe
                _add(rows, "determinism probe", {"sent": probe.requests, "seconds": probe.seconds})
            if invocation.llm is not None:
                llm = invocation.llm
                _add(rows, "LLM stage", {"units": llm.units, "seconds": llm.seconds})
                for role in ("writer", "reader", "writer_and_reader"):
                    counters: ClientCounters | None = getattr(llm, role)
                    if counters is not None:
                        counted = {name: getattr(counters, name) for name in COUNTERS}
                        _add(rows, f"LLM {role.replace('_', ' ')} requests", counted)
        if len(run.costs.invocations) > 1:
            notes.append(
                f"costs.json: {len(run.costs.invocations)} invocations (a resumed run), summed"
            )
    else:
        notes.append("no costs.json in this run: the work of each stage is not recorded")
    df = run.results
    shas = df["memory_sha256"]
    distinct = df.loc[~shas.duplicated(), ["memory_sha256", "memory_bytes"]]  # two columns
    memories = int(distinct["memory_sha256"].notna().sum())
    stored = int(distinct["memory_bytes"].fillna(0).sum())
    _add(rows, "memories (from results)", {"distinct_memories": memories, "memory_bytes": stored})
    wanted = ["reader", "reader_kind", "cache_hit", "tokens_prompt", "tokens_completion"]
    wanted = [c for c in [*wanted, "latency_s"] if c in df]  # not a copy of every column
    for reader, group in df[wanted].groupby("reader", observed=True):
        values: dict[str, Any] = {"reads": len(group)}
        if str(group["reader_kind"].iloc[0]) != "exact":
            if "cache_hit" in group:
                values["cache_hits"] = int(group["cache_hit"].fillna(0).sum())
            for column, name in (
                ("tokens_prompt", "prompt_tokens"),
                ("tokens_completion", "completion_tokens"),
            ):
                if column in group:
                    values[name] = int(group[column].fillna(0).sum())
            if "latency_s" in group:
                values["seconds"] = float(group["latency_s"].fillna(0).sum())
        _add(rows, f"reads by {reader} (from results)", values)
    planned_units = run.integrity.planned_units or 0
    if not run.has_llm and planned_units:
        notes.append(
            f"the LLM stage was planned ({planned_units} units) but none of its reads is in "
            "the results: see the summary at the top"
        )
    elif not run.has_llm:
        notes.append("no LLM reader in this run: no requests, tokens or latency")
    else:
        notes.append("reads by an LLM reader: seconds are summed request latencies, not wall time")
    notes.append("memory bytes: distinct memories, each stored once")
    created = run.created
    if created and run.last_finished:
        try:
            start = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
            notes.append(
                f"wall time from config.json created ({created}) to the last finished job: "
                f"{run.last_finished - start:.1f} s"
            )
        except (ValueError, OverflowError):
            pass
    elif created:
        notes.append(f"run created {created}; end time not recorded")
    frame = pd.DataFrame(list(rows.values()))
    return frame, notes


def build(ctx: ReportContext) -> Section:
    frame, notes = cost_frame(ctx)
    columns = [c for c in COLUMNS if c.key in frame and frame[c.key].notna().any()]
    return Section(
        "costs",
        "Cost per stage",
        [Table("cost-table", columns, frame, csv="costs.csv"), Bullets(notes, muted=True)],
    )
