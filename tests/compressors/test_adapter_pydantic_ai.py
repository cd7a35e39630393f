"""Pydantic AI's harness compaction strategies: listed with their extra, the no-model
ones against the strategy called directly (``compact_now``, the harness's own entry
point outside a run), figures on the pilot, and the summarizing one through the
audit's writer client (a writer client answering here; the embedded local model in
the slow test)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.engine._streaming import plan_variant, stream_variant
from compressors import build
from compressors._registry import adapter_classes
from histories import dump_chat, parse_chat, transform
from tests._pilot import pilot_of_24
from tests.compressors.test_adapters import (
    Recorder,
    assert_a_failed_writer_request_is_na,
    listed,
    local_writer,
    summarize_with_a_fake_writer,
)

pytest.importorskip("pydantic_ai_harness")

runner = CliRunner()
BUDGET = 1200
NO_LLM = ("pydantic_window", "pydantic_clear", "pydantic_dedup", "pydantic_clamp")
SPECS = {  # a condition and a budget at which it compacts on the pilot
    "pydantic_window": ("pydantic_window:keep_messages=4", 1200),
    "pydantic_clear": ("pydantic_clear", 2400),
    "pydantic_dedup": ("pydantic_dedup", 1200),
    "pydantic_clamp": ("pydantic_clamp:max_part_tokens=2", 1200),
}


# compressors.adapters (the package) is imported inside the tests: importing it here,
# before tests.compressors.test_adapters, would shadow the function compressors.adapters there


def test_the_harness_strategies_are_listed_with_their_extra():
    from compressors.adapters import ChatAdapter

    found = adapter_classes()
    for name, line in listed((*NO_LLM, "pydantic_summary")).items():
        cls = found[name]
        assert isinstance(cls, type)
        assert issubclass(cls, ChatAdapter)
        assert "[pydantic-ai]" in line
    assert {found[n].uses_llm for n in NO_LLM} == {False}
    assert found["pydantic_summary"].uses_llm


def test_a_transcript_round_trips_through_pydantic_ai_messages(pilot):
    from compressors.adapters.pydantic_ai_compaction import from_pydantic, to_pydantic

    prefix, _ = plan_variant(pilot[0], "A")
    turns = [t for view, _, _ in prefix for t in view.messages]
    assert from_pydantic(to_pydantic(turns)) == turns


def _direct(name: str, turns: list[Any], budget: int) -> list[Any]:
    """The harness strategy called directly: ``compact_now`` when the history is over
    the strategy's trigger (the harness's own estimate with the same tokenizer)."""
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai_harness.compaction import (
        ClampOversizedMessages,
        ClearToolResults,
        DeduplicateFileReads,
        SlidingWindowCompaction,
        compact_now,
        estimate_context_tokens,
    )

    from compressors.adapters.pydantic_ai_compaction import from_pydantic, to_pydantic

    def tokens(text: str) -> int:
        return -(-len(text.encode()) // 4)

    def log(call: ToolCallPart) -> str | None:
        return "log" if call.tool_name == "read_log" else None

    limit = budget // 4
    strategy: Any = {
        "pydantic_window": lambda: SlidingWindowCompaction(
            max_tokens=limit, keep_messages=4, tokenizer=tokens
        ),
        "pydantic_clear": lambda: ClearToolResults(max_tokens=limit, tokenizer=tokens),
        "pydantic_dedup": lambda: DeduplicateFileReads(
            file_key=log, max_tokens=limit, tokenizer=tokens
        ),
        "pydantic_clamp": lambda: ClampOversizedMessages(max_part_tokens=2, tokenizer=tokens),
    }[name]()
    messages = to_pydantic(turns)
    if name != "pydantic_clamp" and estimate_context_tokens(messages, tokens) <= limit:
        return turns
    kept = asyncio.run(compact_now(strategy, messages, model=TestModel()))
    return from_pydantic(kept)


@pytest.mark.parametrize("name", NO_LLM)
def test_no_model_strategies_match_the_harness_called_directly(pilot, name):
    checked = compacted = 0
    spec, budget = SPECS[name]
    for pair in [*pilot[::6], *transform(pilot[2], "relabel", 1)]:
        for variant in ("A", "B"):
            compressor = build(spec)
            prefix, futures = plan_variant(pair, variant)
            memory, expected = "", []
            for view, _, _ in [*prefix, *futures["reveal"]]:
                memory = compressor.update(memory, view, pair.query, budget)
                given = [*expected, *view.messages]
                direct = _direct(name, given, budget)
                assert parse_chat(memory) == direct
                compacted += direct != given
                if len(memory.encode()) > budget:  # over: the audit empties it
                    memory, expected = "", []
                else:
                    expected = direct
                checked += 1
    assert checked > 30
    if name == "pydantic_clamp":  # it clamps responses and call arguments, never a tool
        assert compacted == 0  # result; no acknowledgement is longer than its clamped form
    else:
        assert compacted > 0, "the strategy never compacted: the test proves nothing"


def test_the_sliding_window_at_its_defaults_keeps_40_messages_and_runs_over(pilot):
    streamed = stream_variant(build("pydantic_window"), pilot[0], "A", BUDGET)
    assert streamed.overflow["current"] >= 1
    kept = stream_variant(build("pydantic_window:keep_messages=4"), pilot[0], "A", BUDGET)
    assert 0 < len(kept.memories["current"].encode()) <= BUDGET


def test_dedup_keeps_only_the_newest_read_of_the_log(pilot):
    prefix, _ = plan_variant(pilot[0], "A")
    memory = ""
    compressor = build("pydantic_dedup:max_tokens=1")
    for view, _, _ in prefix[:3]:
        memory = compressor.update(memory, view, pilot[0].query, 100_000)
    tools = [t for t in parse_chat(memory) if t.role == "tool"]
    assert [t.content for t in tools[:-1]] == ["[superseded file read]"] * (len(tools) - 1)
    assert tools[-1].content == "\n".join(r.canonical_json() for r in prefix[2][0].records)


# --------------------------------------------------------------------------- figures

FIGURES = {  # source pairs of the pilot's first 24 at 1,200 B, identity (docs/adapters.md)
    "pydantic_window": (1, 2, 20, 2, 2, 22),
    "pydantic_window:keep_messages=4": (6, 0, 7, 0, 0, 24),
    "pydantic_clear": (1, 2, 20, 2, 2, 22),
    "pydantic_dedup": (1, 2, 16, 2, 2, 21),
    "pydantic_clamp": (1, 2, 20, 2, 2, 22),
}
SCORES = ("current", "reveal", "override", "joint_J", "adequacy", "collision")


def test_no_model_strategies_give_the_documented_figures_on_the_pilot(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        ["run", "--pairs", pilot_of_24(tmp_path), "--conditions", ",".join(FIGURES), "--transforms",
         "identity", "--budget", str(BUDGET), "--out", str(out), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    cells = {c["condition"]: c["source pairs"] for c in summary["scores"] if c["family"] == "all"}
    for condition, expected in FIGURES.items():
        got = tuple(cells[condition][score]["k"] for score in SCORES)
        assert got == expected, condition


# ------------------------------------------------------------- the summarizing strategy


def test_the_summarizing_strategy_asks_the_writer_client(pilot):
    _, writer, memories = summarize_with_a_fake_writer("pydantic_summary:keep_messages=4", pilot[0])
    summaries = [t for m in memories for t in parse_chat(m) if t.role == "summary"]
    assert summaries
    assert any("SUMMARY of" in t.content for t in summaries)
    # incremental: a later request carries the earlier summary to update
    assert any("SUMMARY of" in json.dumps([m.content for m in r.messages])
               for r in writer.requests[1:])  # fmt: skip


def test_a_failed_writer_request_is_na_not_a_summary(pilot):
    assert_a_failed_writer_request_is_na("pydantic_summary:keep_messages=4", pilot[0])


@pytest.mark.skipif(
    os.environ.get("MEMORY_AUDIT_SKIP_LOCAL") == "1", reason="MEMORY_AUDIT_SKIP_LOCAL=1"
)
def test_the_summarizing_strategy_with_the_embedded_local_model(pilot, tmp_path):
    """One update over a memory the strategy must compact, answered by SmolLM2-135M
    through llama.cpp (the built-in ``local`` backend): the model's answer is the summary."""
    pair = pilot[0]
    prefix, _ = plan_variant(pair, "A")
    memory = dump_chat([*prefix[0][0].messages, *prefix[1][0].messages])

    async def summarize() -> tuple[str, list[str]]:
        async with local_writer(tmp_path) as client:
            compressor = build("pydantic_summary:keep_messages=4,max_tokens=24")
            compressor.client = recorder = Recorder(client)
            new = await compressor.aupdate(memory, prefix[2][0], pair.query, BUDGET)
            return new, recorder.answers

    new, answers = asyncio.run(summarize())
    assert answers
    summaries = [t for t in parse_chat(new) if t.role == "summary"]
    assert summaries
    assert any(a.strip()[:20] in summaries[-1].content for a in answers if a.strip())
