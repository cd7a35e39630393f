"""mem0 (``mem0ai``): listed with its extra, its extraction pipeline run offline (a
writer client answering mem0's own extraction prompt here; the embedded local model
in the slow test), the store as the memory, additive only, the local embedder."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import re

import pytest

from audit.engine._streaming import plan_variant
from compressors import ChatRequest, ChatResponse, ChatUnavailableError, build
from compressors._registry import adapter_classes
from histories import Pair
from tests.compressors.test_adapters import (
    FakeWriter,
    assert_a_failed_writer_request_is_na,
    listed,
    local_writer,
)

if importlib.util.find_spec("mem0") is None:  # not imported here: the adapter imports it
    pytest.skip("mem0ai is not installed", allow_module_level=True)

BUDGET = 1200
_RECORD = re.compile(r'\{"id":"[^"]+","op":"set","key":"([^"]+)","value":"([^"]+)"')


class FactWriter:
    """A writer client answering mem0's extraction prompt as a model following it
    would: one fact per ``set`` record among the new messages, as mem0's JSON."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        prompt = request.messages[-1].content
        new = prompt.split("## New Messages", 1)[1].split("## Observation Date", 1)[0]
        facts = [{"text": f"{k} is {v}"} for k, v in _RECORD.findall(new.replace('\\"', '"'))]
        return ChatResponse(content=json.dumps({"memory": facts}), finish_reason="stop")


def test_mem0_is_listed_with_its_extra_and_calls_a_model():
    cls = adapter_classes()["mem0_local"]
    assert cls.uses_llm
    assert "[mem0]" in listed(["mem0_local"])["mem0_local"]


def load_store(memory: str) -> list[str]:
    from compressors.adapters.mem0_memory import load_store

    return load_store(memory)


def _stream(compressor, pair: Pair, branch: str = "override") -> list[str]:
    prefix, futures = plan_variant(pair, "A")

    async def run() -> list[str]:
        memory, memories = "", []
        for view, _, _ in [*prefix, *futures[branch]]:
            memory = await compressor.aupdate(memory, view, pair.query, 100_000, repeat=0)
            memories.append(memory)
        return memories

    return asyncio.run(run())


def test_mem0_extracts_through_the_writer_and_its_store_is_the_memory(pilot):
    compressor = build("mem0_local")
    compressor.client = writer = FactWriter()
    pair = pilot[0]
    memories = _stream(compressor, pair)
    prefix, futures = plan_variant(pair, "A")
    assert len(writer.requests) == len(prefix) + len(futures["override"])
    assert {r.tag for r in writer.requests} == {f"writer:{compressor.label}"}
    system = writer.requests[0].messages[0]
    assert system.role == "system"
    assert "memory" in system.content.lower()
    # every fact is kept, once, oldest first: mem0 2.2 only ever adds
    facts = [
        f"{r.key} is {r.value}"
        for view, _, _ in [*prefix, *futures["override"]]
        for r in view.records
        if r.op == "set"
    ]
    assert load_store(memories[-1]) == list(dict.fromkeys(facts))
    for earlier, later in itertools.pairwise(memories):
        assert later.startswith(earlier)  # nothing edited, nothing deleted


def test_the_stale_and_the_new_value_are_both_kept(pilot):
    """mem0's issue 5193 by construction: an overridden key keeps both facts."""
    pair = pilot[0]
    compressor = build("mem0_local")
    compressor.client = FactWriter()
    final = load_store(_stream(compressor, pair)[-1])
    keys = [line.split(" is ", 1)[0] for line in final]
    assert len(keys) > len(set(keys))


def test_existing_memories_reach_the_extraction_prompt(pilot):
    compressor = build("mem0_local")
    compressor.client = writer = FactWriter()
    _stream(compressor, pilot[0])
    later = writer.requests[-1].messages[-1].content
    existing = later.split("## Existing Memories", 1)[1].split("## New Messages", 1)[0]
    assert " is " in existing  # the store, retrieved through the local embedder


def test_an_unparsable_answer_leaves_the_store_as_it_was(pilot):
    """mem0 logs a reply that is not its JSON and adds nothing (its issue 4536: a store
    left empty); the memory is the store, unchanged."""
    compressor = build("mem0_local")
    compressor.client = FakeWriter()  # "SUMMARY of N messages": not JSON
    memories = _stream(compressor, pilot[0])
    assert set(memories) == {""}


def test_a_failed_writer_request_is_na(pilot):
    assert_a_failed_writer_request_is_na("mem0_local", pilot[0])


def test_the_store_round_trips_and_the_embedder_is_deterministic():
    from compressors.adapters.mem0_memory import HashEmbedder, dump_store

    assert load_store(dump_store(["a is b", "c\nd", " "])) == ["a is b", "c d"]
    embedder = HashEmbedder()
    one = embedder.embed("amber_kelp_3 is quartz-743")
    assert one == embedder.embed("amber_kelp_3 is quartz-743")
    assert abs(sum(v * v for v in one) - 1) < 1e-9
    near = embedder.embed("amber_kelp_3 was set")
    far = embedder.embed("ivory_tidal_9 harbor")
    dot = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert dot(one, near) > dot(one, far)


@pytest.mark.skipif(
    os.environ.get("MEMORY_AUDIT_SKIP_LOCAL") == "1", reason="MEMORY_AUDIT_SKIP_LOCAL=1"
)
def test_mem0_with_the_embedded_local_model(pilot, tmp_path):
    """One update sent to SmolLM2-135M through llama.cpp: mem0's extraction prompt
    (about 9,000 tokens) is longer than the model's 8,192-token context, and the
    server refuses it; the update is NA naming why, never an error text kept as the
    memory and never a wrong read."""
    pair = pilot[0]
    prefix, _ = plan_variant(pair, "A")

    async def add() -> str:
        async with local_writer(tmp_path) as client:
            compressor = build("mem0_local:max_tokens=64")
            compressor.client = client
            return await compressor.aupdate("k is v", prefix[0][0], pair.query, BUDGET)

    with pytest.raises(ChatUnavailableError, match="exceeds the available context size"):
        asyncio.run(add())
