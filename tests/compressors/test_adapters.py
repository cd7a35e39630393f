"""Adapters of chat-memory libraries: the chat form of a chunk, the transcript memory,
the exact reader on transcripts, the no-LLM adapters against their library called
directly, exact figures on the pilot, budget overflow, and the LLM adapters'
plumbing (a fake writer client here; the embedded local model and vLLM below)."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from audit.cli import app
from audit.engine import phrasing_seeds
from audit.engine._exact import read_exact
from audit.engine._llm_stage import Unit, run_unit
from audit.engine._streaming import plan_variant, stream_variant
from audit.plan import LLMStagePlan
from compressors import (
    ChatRequest,
    ChatResponse,
    ChatUnavailableError,
    ChunkView,
    build,
    builtins,
    deterministic_builtins,
    parse_spec,
)
from compressors._registry import adapter_classes
from compressors.adapters import ChatAdapter, threshold_tokens
from histories import (
    ChatTurn,
    SetRecord,
    ToolCall,
    chat_messages,
    chat_records,
    dump_chat,
    parse_chat,
    transform,
)
from histories._records import record_from_json
from tests._pilot import pilot_of_24

runner = CliRunner()
BUDGET = 1200
NO_LLM = ("inspect_trim", "inspect_edit", "langchain_trim")
LLM = ("inspect_summary", "langchain_summary", "langmem_summary", "llamaindex_summary")


# --------------------------------------------------------------------------- chat form


def test_the_chat_form_is_a_request_a_call_its_result_and_an_acknowledgement(pilot):
    pair = pilot[0]
    prefix, _ = plan_variant(pair, "A")
    view: ChunkView = prefix[0][0]
    user, call, result, ack = view.messages
    assert (user.role, call.role, result.role, ack.role) == (
        "user",
        "assistant",
        "tool",
        "assistant",
    )
    assert call.tool_calls[0].function == "read_log"
    assert result.tool_call_id == call.tool_calls[0].id
    assert result.content.split("\n") == [r.canonical_json() for r in view.records]
    assert str(len(view.records)) in ack.content
    # the same records and seeds give the same turns; other seeds, other wording or id
    again = ChunkView(view.records, view.style, view.seed)
    assert again.messages == view.messages
    other = chat_messages(view.records, view.style, [s + 1 for s in view.seed])  # type: ignore[union-attr]
    assert other[1].tool_calls != view.messages[1].tool_calls


def test_identical_records_are_worded_identically_in_a_and_b(pilot):
    shared = 0
    for pair in pilot:
        plans = {v: plan_variant(pair, v) for v in ("A", "B")}
        for (a, _, _), (b, _, _) in zip(plans["A"][0], plans["B"][0], strict=False):
            if [r.canonical_json() for r in a.records] == [r.canonical_json() for r in b.records]:
                assert a.messages == b.messages
                shared += 1
            else:
                assert a.messages[2] != b.messages[2]
        for future in ("reveal", "override"):  # the shared future reads the same
            for (a, _, _), (b, _, _) in zip(
                plans["A"][1][future], plans["B"][1][future], strict=True
            ):
                assert a.messages == b.messages
    assert shared >= len(pilot)


def test_the_framing_is_a_function_of_the_chunk_s_lines_alone(pilot):
    # before, the framing and the call id came from the records' identity in the
    # source pair: the same under every transform, so a table built from the public
    # generator named each chunk's task records through its call id
    pair = pilot[3]
    (copy,) = transform(pair, "relabel", 1)
    source, relabelled = plan_variant(pair, "B")[0], plan_variant(copy, "B")[0]
    ids = set()
    for (s, _, _), (r, _, _) in zip(source, relabelled, strict=True):
        ids |= {s.messages[1].tool_calls[0].id, r.messages[1].tool_calls[0].id}
        # a view of the same lines built anywhere else is framed the same
        fresh = [record_from_json(line) for line in r.lines]
        assert chat_messages(fresh, r.style, phrasing_seeds(fresh)) == r.messages
    assert len(ids) == 2 * len(source)  # relabelled lines, other call ids


texts = st.lists(
    st.sampled_from(["a", "[", "]", "\\", "\n", " ", "{", "[user]", "[call c] f {}", "é"])
).map("".join)
turns = st.lists(
    st.one_of(
        st.builds(ChatTurn, st.sampled_from(["system", "user", "assistant", "summary"]), texts),
        st.builds(
            ChatTurn,
            st.just("assistant"),
            texts,
            st.lists(
                st.builds(ToolCall, st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True),
                          st.sampled_from(["read_log", "f"]), st.just("{}")),
                max_size=2,
            ).map(tuple),
        ),
        st.builds(
            ChatTurn, st.just("tool"), texts, st.just(()),
            st.one_of(st.none(), st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True)),
        ),
    ),
    max_size=6,
)  # fmt: skip


@given(turns)
@settings(max_examples=300, deadline=None)
def test_a_transcript_round_trips_whatever_its_content(values):
    assert parse_chat(dump_chat(values)) == values


def test_the_exact_reader_reads_a_transcripts_record_lines():
    record = SetRecord(id="r1", key="k", value="v", rev=1)
    chunk = list(chat_messages([record], "json", [7]))
    memory = dump_chat(chunk)
    assert read_exact(memory, ["k"], {"k": "v"}).outcome == "pass"
    assert read_exact(memory, ["k"], {"k": "w"}).outcome == "wrong_log"
    cleared = dump_chat([*chunk[:2], ChatTurn("tool", "(Tool result removed)", (), "x"), chunk[3]])
    assert chat_records(parse_chat(cleared)).complete
    assert read_exact(cleared, ["k"], {"k": "v"}).outcome == "wrong_log"
    # a summary may hold what the record lines lost: a wrong answer is not conclusive
    summarized = dump_chat([ChatTurn("summary", "k was set to w later"), *chunk])
    assert read_exact(summarized, ["k"], {"k": "v"}).outcome == "pass"
    assert read_exact(summarized, ["k"], {"k": "w"}).outcome == "unparsed"
    assert read_exact("plain prose", ["k"], {"k": "v"}).outcome == "unparsed"


# --------------------------------------------------------------------------- registry


def listed(names: Sequence[str]) -> dict[str, str]:
    """The one line `audit compressors` gives each of ``names``."""
    result = runner.invoke(app, ["compressors"])
    assert result.exit_code == 0, result.output
    lines = {}
    for name in names:
        (lines[name],) = [
            line for line in result.output.splitlines() if line.startswith(name + " ")
        ]
    return lines


def test_adapters_are_listed_never_run_by_default_and_name_their_extra():
    found = adapter_classes()
    others = {"cmd", "http", "mem0_local", "pydantic_window", "pydantic_clear",
              "pydantic_dedup", "pydantic_clamp", "pydantic_summary"}  # fmt: skip
    assert set(LLM + NO_LLM) | others == set(found)  # (the newer ones: their own test files)
    assert not set(found) & set(builtins())
    assert not set(found) & set(deterministic_builtins())
    for name, line in listed(LLM + NO_LLM).items():
        cls = found[name]
        assert isinstance(cls, type)
        assert issubclass(cls, ChatAdapter)
        assert f"[{cls.extra}]" in line
    assert {found[n].uses_llm for n in NO_LLM} == {False}
    assert {found[n].uses_llm for n in LLM} == {True}


def test_a_missing_extra_is_named_before_any_work(monkeypatch):
    from compressors.adapters import AdapterNotInstalledError
    from compressors.adapters.inspect_compaction import InspectTrim

    monkeypatch.setattr(InspectTrim, "requires", ("inspect_ai_not_installed_here",))
    with pytest.raises(AdapterNotInstalledError, match=r"memory-audit\[inspect-ai\]"):
        build("inspect_trim")
    result = runner.invoke(app, ["compressors"])
    assert "needs [inspect-ai]" in result.output
    flat = " ".join(result.output.split())  # the note wraps at the terminal's width
    assert "pip install -e '.[inspect-ai]' in a clone of memory-audit" in flat
    assert "(or pip install 'memory-audit[inspect-ai]')" in flat


def test_a_missing_parent_package_is_a_missing_extra_not_a_crash(monkeypatch):
    """``llama_index.core`` without ``llama_index``: finding the submodule imports its
    parent, and on a plain install (no adapters extra) `audit compressors` crashed."""
    from compressors.adapters import AdapterNotInstalledError
    from compressors.adapters.llamaindex_memory import LlamaIndexSummary

    monkeypatch.setattr(LlamaIndexSummary, "requires", ("llama_index_not_here.core",))
    assert LlamaIndexSummary.missing() == ["llama_index_not_here.core"]
    result = runner.invoke(app, ["compressors"])
    assert result.exit_code == 0, result.output
    assert "needs [llama-index]" in result.output
    with pytest.raises(AdapterNotInstalledError, match=r"memory-audit\[llama-index\]"):
        build("llamaindex_summary")


def test_adapter_parameters_are_validated():
    assert build("inspect_trim:preserve=0.5").params.preserve == 0.5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="preserve"):
        build("inspect_trim:preserve=2")
    with pytest.raises(ValueError, match="nope"):
        build("langchain_trim:nope=1")


# --------------------------------------------------------- the library called directly


def _bytes_tokens(turns: Sequence[ChatTurn]) -> int:
    return math.ceil(len(dump_chat(turns).encode()) / 4) if turns else 0


def _direct_langchain_trim(turns: list[ChatTurn], budget: int) -> list[ChatTurn]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, trim_messages

    by_id: dict[str, ChatTurn] = {}
    messages: list[Any] = []
    for i, turn in enumerate(turns):
        by_id[f"x{i}"] = turn
        if turn.role == "tool":
            messages.append(ToolMessage(turn.content, tool_call_id=turn.tool_call_id, id=f"x{i}"))
        elif turn.role == "assistant":
            calls = [{"name": c.function, "args": {}, "id": c.id} for c in turn.tool_calls]
            messages.append(AIMessage(turn.content, tool_calls=calls, id=f"x{i}"))
        else:
            messages.append(HumanMessage(turn.content, id=f"x{i}"))
    kept = trim_messages(
        messages,
        max_tokens=budget // 4,
        token_counter=lambda ms: _bytes_tokens([by_id[m.id] for m in ms]),
        strategy="last",
    )
    return [by_id[m.id] for m in kept]


def _direct_inspect(turns: list[ChatTurn], budget: int, strategy: Any) -> list[ChatTurn] | None:
    """inspect's strategy called directly, with the handler's rule re-stated: compact
    when over the threshold, up to four passes while it helps; None when it cannot."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageUser,
        get_model,
    )
    from inspect_ai.tool import ToolCall as InspectCall

    if _bytes_tokens(turns) <= budget // 4:
        return turns
    by_id: dict[str, ChatTurn] = {}
    messages: list[Any] = []
    for i, turn in enumerate(turns):
        by_id[f"x{i}"] = turn
        if turn.role == "tool":
            messages.append(
                ChatMessageTool(content=turn.content, tool_call_id=turn.tool_call_id, id=f"x{i}")
            )
        elif turn.role == "assistant":
            calls = [
                InspectCall(id=c.id, function=c.function, arguments={}) for c in turn.tool_calls
            ]
            messages.append(
                ChatMessageAssistant(content=turn.content, tool_calls=calls or None, id=f"x{i}")
            )
        else:
            messages.append(ChatMessageUser(content=turn.content, id=f"x{i}"))

    def back(ms: list[Any]) -> list[ChatTurn]:
        out = []
        for m in ms:
            turn = by_id[m.id]
            if m.role == "tool" and m.text != turn.content:  # cleared by Edit
                turn = ChatTurn("tool", m.text, (), turn.tool_call_id)
            out.append(turn)
        return out

    model = get_model("mockllm/model")
    current = messages
    tokens = _bytes_tokens(back(current))
    for _ in range(4):
        current = asyncio.run(strategy.compact(model, current, []))[0]
        new = _bytes_tokens(back(current))
        if new <= budget // 4:
            return back(current)
        if new >= tokens:
            return None
        tokens = new
    return None


def _direct(name: str, turns: list[ChatTurn], budget: int) -> list[ChatTurn] | None:
    if name == "langchain_trim":
        return _direct_langchain_trim(turns, budget)
    from inspect_ai.model import CompactionEdit, CompactionTrim

    strategy = CompactionTrim() if name == "inspect_trim" else CompactionEdit()
    return _direct_inspect(turns, budget, strategy)


@pytest.mark.parametrize("name", NO_LLM)
def test_no_llm_adapters_match_their_library_called_directly(pilot, name):
    checked = 0
    for pair in [*pilot[::5], *transform(pilot[2], "relabel", 1)]:
        for variant in ("A", "B"):
            compressor = build(name)
            prefix, futures = plan_variant(pair, variant)
            memory, expected = "", []
            for view, _, _ in [*prefix, *futures["reveal"]]:
                memory = compressor.update(memory, view, pair.query, BUDGET)
                direct = _direct(name, [*expected, *view.messages], BUDGET)
                if direct is None or len(dump_chat(direct).encode()) > BUDGET:
                    assert len(memory.encode()) > BUDGET  # over: the audit empties it
                    memory, expected = "", []
                else:
                    assert parse_chat(memory) == direct
                    expected = direct
                checked += 1
    assert checked > 50


# --------------------------------------------------------------------------- figures

# what each no-LLM adapter keeps on the pilot's first 24 pairs at 1,200 B (docs/adapters.md):
# source pairs at identity, blocks under relabel:5 (transform seed 0)
FIGURES = {
    "inspect_trim": {"current": 7, "reveal": 2, "override": 24, "joint_J": 2, "adequacy": 2,
                     "collision": 22, "relabel_joint_J": (10, 120)},
    "inspect_edit": {"current": 1, "reveal": 2, "override": 23, "joint_J": 2, "adequacy": 2,
                     "collision": 22, "relabel_joint_J": (10, 120)},
    "langchain_trim": {"current": 7, "reveal": 2, "override": 24, "joint_J": 2, "adequacy": 2,
                       "collision": 22, "relabel_joint_J": (10, 120)},
}  # fmt: skip


@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("adapters") / "run"
    result = runner.invoke(
        app,
        ["run", "--pairs", pilot_of_24(out.parent), "--conditions", ",".join(NO_LLM), "--transforms",
         "identity,relabel:5", "--budget", str(BUDGET), "--seed", "0", "--out", str(out), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("name", NO_LLM)
def test_no_llm_adapters_give_the_documented_figures_on_the_pilot(pilot_run, name):
    cells = {
        (c["condition"], c["transform"]): c
        for c in pilot_run["scores"]
        if c["family"] == "all" and c["budget"] == BUDGET
    }
    identity, relabel = cells[(name, "identity")], cells[(name, "relabel")]
    expected = FIGURES[name]
    for score in ("current", "reveal", "override", "joint_J", "adequacy", "collision"):
        got = identity["source pairs"][score]
        assert (got["k"], got["k_high"], got["n"]) == (expected[score], expected[score], 24), score
    blocks = relabel["blocks"]["joint_J"]
    assert (blocks["k"], blocks["n"]) == expected["relabel_joint_J"]


def test_a_memory_over_the_budget_is_emptied_and_counted(pilot):
    pair = pilot[0]
    compressor = build("langchain_trim:max_tokens=100000")  # the library keeps everything
    streamed = stream_variant(compressor, pair, "A", 600)
    assert streamed.overflow["current"] >= 1
    last = plan_variant(pair, "A")[0][-1][0]  # emptied, then only the last chunk, if it fits
    assert streamed.memories["current"] in ("", dump_chat(last.messages))
    kept = stream_variant(build("langchain_trim"), pair, "A", 600)
    assert 0 < len(kept.memories["current"].encode()) <= 600
    assert threshold_tokens(600) == 150


# ---------------------------------------------------------------- LLM adapters (plumbing)


class FakeWriter:
    """A writer client that answers every request with a summary naming its turn count."""

    def __init__(self, error: str | None = None) -> None:
        self.requests: list[ChatRequest] = []
        self.error = error

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if self.error is not None:
            return ChatResponse(content=None, error=self.error)
        return ChatResponse(
            content=f"SUMMARY of {len(request.messages)} messages", finish_reason="stop"
        )


def summarize_with_a_fake_writer(spec: str, pair: Any) -> tuple[Any, FakeWriter, list[str]]:
    """The compressor of ``spec`` streamed through variant A's prefix and reveal at
    BUDGET (a memory over it emptied, as the audit does), its writer a FakeWriter, every
    request of repeat 1: the compressor, the writer and each memory it wrote."""
    compressor = build(spec)
    compressor.client = writer = FakeWriter()
    prefix, futures = plan_variant(pair, "A")

    async def stream() -> list[str]:
        memory, memories = "", []
        for view, _, _ in [*prefix, *futures["reveal"]]:
            memory = await compressor.aupdate(memory, view, pair.query, BUDGET, repeat=1)
            memory = "" if len(memory.encode()) > BUDGET else memory
            memories.append(memory)
        return memories

    memories = asyncio.run(stream())
    assert writer.requests, f"{spec} never asked the writer"
    assert {r.tag for r in writer.requests} == {f"writer:{compressor.label}"}
    assert {r.repeat for r in writer.requests} == {1}
    return compressor, writer, memories


def assert_a_failed_writer_request_is_na(spec: str, pair: Any) -> None:
    """A writer that fails makes the update raise ChatUnavailableError (an NA read),
    never a memory."""
    compressor = build(spec)
    compressor.client = FakeWriter(error="connection refused")
    prefix, _ = plan_variant(pair, "A")

    async def stream() -> None:
        memory = ""
        for view, _, _ in prefix:
            memory = await compressor.aupdate(memory, view, pair.query, BUDGET)
            memory = "" if len(memory.encode()) > BUDGET else memory

    with pytest.raises(ChatUnavailableError, match="connection refused"):
        asyncio.run(stream())


def _spec(name: str) -> str:
    return f"{name}:keep_messages=4" if name == "langchain_summary" else name


@pytest.mark.parametrize("name", LLM)
def test_llm_adapters_summarize_through_the_writer_client(pilot, name):
    _, writer, memories = summarize_with_a_fake_writer(_spec(name), pilot[0])
    assert all(r.max_tokens for r in writer.requests)
    assert any(
        t.role == "summary" and "SUMMARY of" in t.content
        for memory in memories
        for t in parse_chat(memory)
    )


@pytest.mark.parametrize("name", LLM)
def test_a_failed_writer_request_is_na_not_a_summary(pilot, name):
    assert_a_failed_writer_request_is_na(_spec(name), pilot[0])


def test_an_llm_adapter_in_the_llm_stage_gives_rows_and_na_on_failure(pilot):
    pair = pilot[0]
    stage = LLMStagePlan(writer="fake", writer_model="fake-model",
                         conditions=[parse_spec("langmem_summary")], sample=1, repeats=1)  # fmt: skip
    unit = Unit("u1", pair, parse_spec("langmem_summary"), BUDGET, 0)
    rows = asyncio.run(run_unit(unit, stage, FakeWriter(), None)).pack()
    from audit.rundir import table_from_bytes

    table = table_from_bytes(rows.results).to_pandas()
    assert len(table) == 6
    assert set(table["outcome"]) <= {"pass", "wrong_log", "unparsed"}
    failed = asyncio.run(run_unit(unit, stage, FakeWriter(error="boom"), None)).pack()
    table = table_from_bytes(failed.results).to_pandas()
    assert set(table["outcome"]) == {"na"}
    assert table["error"].str.contains("boom").all()


# ------------------------------------------------------- the embedded local model (slow)

LOCAL_SPECS = {
    "inspect_summary": "inspect_summary:max_tokens=24",
    "langchain_summary": "langchain_summary:keep_messages=4,max_tokens=24",
    "langmem_summary": "langmem_summary:max_summary_tokens=24",
    "llamaindex_summary": "llamaindex_summary:max_tokens=24",
}


@pytest.mark.skipif(
    os.environ.get("MEMORY_AUDIT_SKIP_LOCAL") == "1", reason="MEMORY_AUDIT_SKIP_LOCAL=1"
)
def test_llm_adapters_summarize_with_the_embedded_local_model(pilot, tmp_path: Path):
    """Plumbing (SmolLM2-135M through llama.cpp, the built-in ``local`` backend): each
    summarizing adapter, given a memory its library must compact, sends its library's
    request to the local backend through the audit's client and keeps the model's
    answer as the summary, on a pilot pair at identity and relabelled.  One update
    each: a 135M model on two shared cores takes seconds per request (``audit run
    --writer local`` runs whole streams the same way).  One slot of 8,192 tokens:
    inspect's summary prompt alone is about 1,500 tokens, more than the default
    2,048-token slot holds with a memory (docs/adapters.md); one thread, several times
    faster than two on a loaded two-core machine."""
    cases = []
    for pair in (pilot[0], *transform(pilot[0], "relabel", 1)):
        prefix, _ = plan_variant(pair, "A")
        memory = dump_chat([*prefix[0][0].messages, *prefix[1][0].messages])  # ~1.5 kB
        cases.append((pair, memory, prefix[2][0]))

    async def summarize() -> list[tuple[str, list[ChatTurn], list[str]]]:
        out = []
        async with local_writer(tmp_path) as client:
            for name, label in LOCAL_SPECS.items():
                for pair, memory, chunk in cases:
                    compressor = build(label)
                    compressor.client = recorder = Recorder(client)
                    new = await compressor.aupdate(memory, chunk, pair.query, BUDGET)
                    out.append((name, parse_chat(new), recorder.answers))
        return out

    results = asyncio.run(summarize())
    assert len(results) == 2 * len(LOCAL_SPECS)
    for name, kept, answers in results:
        assert answers, f"{name} sent no request"
        summaries = [t for t in kept if t.role == "summary"]
        assert summaries, (name, kept)
        # the summary is built from the model's answer (libraries wrap or strip it)
        assert any(a.strip()[:20] in summaries[-1].content for a in answers if a.strip()), (
            name,
            answers,
            summaries[-1].content,
        )


def local_writer(tmp_path: Path) -> AbstractAsyncContextManager[Any]:
    """The built-in ``local`` backend as the writer: one slot of 8,192 tokens, one
    thread (its config written to ``tmp_path``)."""
    from audit.backends import load_config, open_backend

    path = tmp_path / "audit.toml"
    path.write_text("[backends.local]\nn_parallel = 1\nn_ctx_per_slot = 8192\nn_threads = 1\n")
    return open_backend("local", load_config(path, env_file=None, environ=False), role="writer")


class Recorder:
    """A writer client passing every request on and keeping the answers."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.answers: list[str] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        response = await self.client.chat(request)
        assert response.error is None, response
        assert response.rejected is None, response
        self.answers.append(response.content or "")
        return response


def test_one_adapter_with_two_parameter_sets_gives_two_llm_units(pilot):
    """Two conditions of one compressor that differ only in parameters are two units of
    the LLM stage (their keys once collided, so one was silently dropped); a condition
    without parameters keeps the key it always had (runs resume across versions)."""
    from audit.engine._llm_stage import plan_units

    specs = [parse_spec("langchain_summary"), parse_spec("langchain_summary:keep_messages=4")]
    stage = LLMStagePlan(writer="fake", writer_model="fake-model", conditions=specs,
                         sample=1, repeats=1, transforms=["identity"])  # fmt: skip
    units = plan_units(stage, pilot, [BUDGET], 0)
    assert len(units) == 2
    assert len({u.key for u in units}) == 2
    assert {u.condition.label for u in units} == {s.label for s in specs}


# ------------------------------------------------------------------ repeated compaction


def _reveal_row(pair: str, variant: str, adequate: float | None, outcome: str) -> dict:
    return {"reader": "exact", "condition": "c", "budget": 600, "transform": "identity",
            "transform_index": 0, "pair_id": pair, "source_pair_id": pair, "repeat": 0,
            "variant": variant, "branch": "reveal", "adequate": adequate, "correct": 1.0,
            "outcome": outcome}  # fmt: skip


def test_the_compaction_curve_takes_unjudged_memories_as_bounds_and_errors_as_failures():
    """No block is left out of n (as for every score): an unparsed memory gives bounds,
    a compressor that raised fails its block whatever its row says."""
    import pandas as pd

    from audit.scoring import compaction_curve

    rows = [
        _reveal_row("p1", "A", 1.0, "pass"), _reveal_row("p1", "B", 1.0, "pass"),
        _reveal_row("p2", "A", 1.0, "pass"), _reveal_row("p2", "B", None, "unparsed"),
        _reveal_row("p3", "A", 1.0, "error"), _reveal_row("p3", "B", 1.0, "pass"),
        _reveal_row("p4", "A", 0.0, "wrong_log"), _reveal_row("p4", "B", 1.0, "pass"),
    ]  # fmt: skip
    curve = compaction_curve(pd.DataFrame(rows))
    assert len(curve) == 1
    row = curve.iloc[0]
    assert (row["adequacy_k"], row["adequacy_k_high"], row["adequacy_n"]) == (1, 2, 4)


@pytest.fixture(scope="module")
def rechunk_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("rechunk") / "run"
    result = runner.invoke(
        app,
        ["run", "--pairs", pilot_of_24(out.parent), "--conditions", "tail,frontier", "--transforms",
         "identity,rechunk:2", "--budget", str(BUDGET), "--out", str(out), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_repeated_compaction_is_a_curve_per_condition_and_never_a_shortcut(rechunk_run):
    import pandas as pd

    from audit.scoring import compaction_curve

    summary = json.loads((rechunk_run / "summary.json").read_text())
    curve = compaction_curve(pd.read_parquet(rechunk_run / "results.parquet"))
    for condition in ("tail", "frontier"):
        mine = curve[curve["condition"] == condition]
        assert list(mine["transform"]) == ["identity", "rechunk", "rechunk"]
        assert set(mine["adequacy_n"]) == {24}
        identity = next(
            c for c in summary["scores"]
            if c["condition"] == condition and c["transform"] == "identity"
            and c["family"] == "all"
        )  # fmt: skip
        # at identity a block is a source pair: the curve starts at the table's figure
        assert mine.iloc[0]["adequacy_k"] == identity["source pairs"]["adequacy"]["k"]
    # rechunk keeps every record: a memory that keeps what matters is not hurt by it
    frontier = curve[curve["condition"] == "frontier"]
    assert frontier["adequacy_k"].min() >= frontier.iloc[0]["adequacy_k"] - 1
    assert not [g for g in summary["shortcut_gaps"] if g["transform"] == "rechunk"]
    result = runner.invoke(app, ["report", str(rechunk_run)])
    assert result.exit_code == 0, result.output
    report = (rechunk_run / "report" / "report.md").read_text()
    assert "Repeated compaction" in report
    assert "No rechunk transform" not in report
    assert "under rechunk" not in report  # no "Shortcut:" finding for it
    robustness = report.split("Transform robustness", 1)[1].split("###", 1)[0]
    assert "only the identity instances" in robustness  # rechunk is not compared there
    assert (rechunk_run / "report" / "compactions.csv").exists()
