"""Scoring of LLM reads: the strict envelope, lenient wrapper-only, and the outcome taxonomy.

These use fixed model outputs on purpose: the point of each case is one specific
malformed answer (empty content, answer only in reasoning, a bare map, truncated
JSON, extra keys), which a real small model produces only by chance.  The whole
path against the real local model is tested in tests/audit/engine/test_llm_stage.py.
"""

from __future__ import annotations

import json

import pytest

from audit.engine import judge, parse_answer, reader_request
from audit.engine._exact import read_exact
from audit.engine._llm_reader import answer_schema
from compressors import ChatResponse, ChunkView, build
from compressors.builtin.llm_writers import RECORD_LOG_SCHEMA, structured_memory
from histories import PUBLIC_SEMANTICS, SetRecord

GOLD = {"k": "amber-101", "j": None}
ADEQUATE = "\n".join(
    [SetRecord(id="a", key="k", value="amber-101", rev=1).canonical_json()]
)  # j has no record: null, as gold says
LOST = SetRecord(id="b", key="k", value="onyx-303", rev=1).canonical_json()


def reply(content, finish="stop", error=None, reasoning=None):
    return ChatResponse(content=content, finish_reason=finish, error=error, reasoning=reasoning)


ENVELOPE = json.dumps({"values": GOLD})
BARE = json.dumps(GOLD)


@pytest.mark.parametrize(
    ("response", "memory", "outcome", "strict", "lenient"),
    [
        (reply(ENVELOPE), ADEQUATE, "pass", 1, 1),
        (reply(BARE), ADEQUATE, "wrapper_only", 0, 1),
        # right values in a wrong form score 0 (the report calls it a format failure)
        (reply(ENVELOPE, finish="length"), ADEQUATE, "reader_error", 0, 0),  # cut off after
        (reply(ENVELOPE[:-2], finish="length"), ADEQUATE, "reader_error", 0, 0),  # ... mid-JSON
        (reply(ENVELOPE[:-3], finish="length"), ADEQUATE, "reader_error", 0, 0),  # ... mid-value
        (reply(None, reasoning=ENVELOPE), ADEQUATE, "reader_error", 0, 0),  # only in reasoning
        (reply(""), ADEQUATE, "reader_error", 0, 0),  # empty content
        (reply(json.dumps({"values": {"k": "amber-101"}})), ADEQUATE, "reader_error", 0, 0),
        (reply(json.dumps({"values": {**GOLD, "x": "1"}})), ADEQUATE, "reader_error", 0, 0),
        (reply(json.dumps({"values": GOLD, "note": "hi"})), ADEQUATE, "reader_error", 0, 0),
        (reply(json.dumps({"values": {"k": "onyx-303", "j": None}})), LOST, "wrong_log", 0, 0),
        (reply(json.dumps({"values": {"k": "amber-101", "j": None}})), LOST, "pass", 1, 1),
        (reply("the value is amber"), "free prose memory", "unparsed", 0, 0),
        (reply(None, error="ConnectError after 4 retries"), ADEQUATE, "na", None, None),
        (None, ADEQUATE, "na", None, None),
        (reply(json.dumps({"values": {"k": 101, "j": None}})), ADEQUATE, "reader_error", 0, 0),
    ],
)
def test_judge_outcomes(response, memory, outcome, strict, lenient):
    exact = read_exact(memory, list(GOLD), GOLD)
    verdict = judge(response, GOLD, exact)
    assert verdict.outcome == outcome
    assert verdict.correct == strict
    assert verdict.correct_lenient == lenient


def test_a_right_answer_from_a_lost_memory_still_passes():
    # the reader guessed right although the memory lost the evidence: pass, and the
    # retained-state adequacy column (from the exact reader) still says 0
    exact = read_exact(LOST, list(GOLD), GOLD)
    assert not exact.adequate
    assert judge(reply(ENVELOPE), GOLD, exact).outcome == "pass"


def test_parse_answer_forms():
    assert parse_answer(ENVELOPE, ["k", "j"]).form == "envelope"
    assert parse_answer(BARE, ["k", "j"]).form == "bare"
    assert parse_answer("[1]", ["k", "j"]).form == "invalid"
    assert parse_answer("{" * 100_000, ["k"]).form == "invalid"


def test_reader_request_is_stable_prefix_first_and_schema_optional():
    request = reader_request("MEMORY-TEXT", ["k", "j"], repeat=1)
    system, user = request.messages
    assert system.role == "system"
    assert PUBLIC_SEMANTICS in system.content
    assert "MEMORY-TEXT" not in system.content
    # the rules first (every prompt starts with them), then the query keys, the memory last
    assert system.content.startswith(PUBLIC_SEMANTICS)
    assert user.content.index('["k", "j"]') < user.content.index("MEMORY-TEXT")
    assert request.json_schema == answer_schema(["k", "j"])
    assert request.repeat == 1
    assert reader_request("m", ["k"], use_schema=False).json_schema is None
    schema = answer_schema(["k", "j"])["properties"]["values"]
    assert schema["required"] == ["k", "j"]
    assert schema["additionalProperties"] is False


def shared_prefix(a: str, b: str) -> str:
    end = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return a[:end]


def test_every_prompt_of_an_audit_starts_with_the_same_rules_and_varies_last():
    """Prompt layout 2, for a server's prefix cache: the reader's and every writer's
    system message start with the rules; the writers' differ only after the shared
    instructions (format, then budget); the user message is the query keys, then the
    memory, then the new chunk."""
    chunk = ChunkView([SetRecord(id="a", key="k", value="CHUNK-VALUE", rev=1)])
    reader_system = reader_request("m", ["k"]).messages[0].content
    systems = {}
    for name in ("prose_off", "prose_high", "structured_high"):
        for budget in (300, 1200):
            system, user = build(name).messages("MEMORY-TEXT", chunk, ["k", "j"], budget)
            assert system.content.startswith(PUBLIC_SEMANTICS + "\n\n"), name
            assert system.content.endswith(f"Budget: at most {budget} bytes (UTF-8)."), name
            query, memory = user.content.index('["k", "j"]'), user.content.index("MEMORY-TEXT")
            assert query < memory < user.content.index("CHUNK-VALUE"), name
            systems[name, budget] = system.content
    for (name, budget), text in systems.items():
        for (other, other_budget), other_text in systems.items():
            shared = len(shared_prefix(text, other_text))
            if name == other and budget != other_budget:  # only the budget's number differs
                assert text[:shared].endswith("Budget: at most "), (name, text[shared:])
            # every writer shares the rules and the role, whatever its format and budget
            assert shared > len(PUBLIC_SEMANTICS) + 200, (name, other)
        assert shared_prefix(text, reader_system).startswith(PUBLIC_SEMANTICS + "\n\n")


def test_structured_writer_output_becomes_a_record_log_or_stays_unparsed():
    records = [
        {"id": "a", "op": "set", "key": "k", "value": "amber-101", "rev": 1},
        {"id": "t", "op": "tick", "now": 4},
    ]
    memory = structured_memory(json.dumps({"records": records}))
    assert memory.splitlines()[0] == SetRecord(**records[0]).canonical_json()
    assert read_exact(memory, ["k"], {"k": "amber-101"}).outcome == "pass"
    for bad in ("not json at all", '{"records": [{"id": "a", "op": "set"}]}', "[]", '{"rec": []}'):
        assert structured_memory(bad) == bad
        assert read_exact(bad, ["k"], {"k": "amber-101"}).outcome == "unparsed"
    assert RECORD_LOG_SCHEMA["required"] == ["records"]
