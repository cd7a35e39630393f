"""Validity of the LLM stage: failures are blamed on whoever failed.

* A. a failed read's cause follows what failed: the memory (dropped), the reader
  (misread, format failure: right values in a wrong form, whatever the memory), nobody
  can tell (undetermined: no record log), the
  infrastructure or a refused request (NA), the compressor or its LLM writer;
* B. an LLM writer with thinking on gets a reasoning allowance of its own, and a
  cut-off or empty writer answer is its own outcome, never a well-formed wrong log
  (end to end: ``audit run`` against a real HTTP server process);
* C. a key named twice in a model's JSON is no answer;
* D. the semantics shown to LLM readers state every rule E_q scores them by.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

import histories._interpreter as interpreter
from audit.cli import app
from audit.engine import judge, parse_answer
from audit.engine._exact import read_exact
from audit.engine._llm_stage import sample_pairs
from audit.reportdata._causes import ATTRIBUTIONS, attribute
from audit.rundir import OUTCOMES, SourcePairs
from compressors import ChatRequest, ChatResponse, ChatUnavailableError, ChunkView, build
from compressors.builtin.llm_writers import structured_memory
from histories import PRESETS, PUBLIC_SEMANTICS, SetRecord, generate
from tests._rows import result_csv

REASONING_TOKENS = 4096
"""The default reasoning allowance of a thinking writer (``llm_writers.REASONING_TOKENS``)."""

ROOT = Path(__file__).resolve().parents[3]
GOLD = {"k": "amber-101", "j": None}
ADEQUATE = SetRecord(id="a", key="k", value="amber-101", rev=1).canonical_json()
LOST = SetRecord(id="b", key="k", value="onyx-303", rev=1).canonical_json()
PROSE = "At step 1 the agent set k to amber-101 (revision 1)."
"""A memory that is no record log: prose, like direct_prose's history."""
ENVELOPE = json.dumps({"values": GOLD})


def reply(
    content: str | None,
    finish: str = "stop",
    reasoning: str | None = None,
    rejected: str | None = None,
    status: int | None = 200,
) -> ChatResponse:
    return ChatResponse(
        content=content,
        finish_reason=finish,
        reasoning=reasoning,
        rejected=rejected,
        status=status,
    )


# ------------------------------------------------------------ A. outcomes and causes


@pytest.mark.parametrize("memory", [ADEQUATE, LOST, PROSE])
@pytest.mark.parametrize(
    "response",
    [
        reply(f"```json\n{ENVELOPE}\n```"),  # in a code fence
        reply(f"Here is the answer: {ENVELOPE} Hope this helps."),  # prose around it
        reply(None, reasoning=f"I think the answer is {ENVELOPE}"),  # only in the reasoning
        reply("", reasoning=ENVELOPE),
        reply(ENVELOPE + "\n\n\n", finish="length"),  # cut off after the answer
        reply(ENVELOPE[:-2], finish="length"),  # cut off before the closing braces
        reply(f"```\n{json.dumps(GOLD)}\n```"),  # a bare map in a fence
        reply(json.dumps({"answer": {"values": GOLD}})),  # an unknown wrapper
    ],
)
def test_right_values_in_a_wrong_form_are_a_format_failure(response, memory):
    # whatever the memory, right values in a wrong form are the reader's format failure:
    # not "dropped" on a lost memory, not "undetermined" on prose; scored 0, never 1, and
    # the outcome stays the memory's verdict
    exact = read_exact(memory, list(GOLD), GOLD)
    verdict = judge(response, GOLD, exact)
    assert verdict.outcome == {"pass": "reader_error", "wrong_log": "wrong_log",
                               "unparsed": "unparsed"}[exact.outcome]  # fmt: skip
    assert (verdict.correct, verdict.correct_lenient) == (0, 0)
    assert verdict.answer == GOLD  # the values it gave, found in their wrapper
    assert _cause(verdict.outcome, verdict.answer) == "wrapper_only"  # "format failure"


@pytest.mark.parametrize(
    ("response", "memory", "outcome"),
    [
        (reply(f"```json\n{json.dumps({'values': {'k': 'x', 'j': None}})}\n```"), ADEQUATE,
         "reader_error"),
        (reply("no idea"), PROSE, "unparsed"),
        (reply(json.dumps({"values": {"k": "onyx-303", "j": None}})), LOST, "wrong_log"),
        # a wrong answer in the content is the answer: the reasoning is not searched
        (reply(json.dumps({"values": {"k": "x", "j": None}}), reasoning=ENVELOPE), ADEQUATE,
         "reader_error"),
        (reply(ENVELOPE[:-3], finish="length"), ADEQUATE, "reader_error"),  # cut in a value
    ],
)  # fmt: skip
def test_wrong_values_keep_the_memory_verdict(response, memory, outcome):
    verdict = judge(response, GOLD, read_exact(memory, list(GOLD), GOLD))
    assert verdict.outcome == outcome
    assert verdict.correct == 0
    cause = {"reader_error": "misread", "unparsed": "undetermined", "wrong_log": "dropped"}
    assert _cause(verdict.outcome, verdict.answer) == cause[outcome]


def test_a_refused_request_is_na_not_a_wrong_answer():
    refused = reply(None, finish=None, rejected="maximum context length exceeded", status=400)
    for memory in (ADEQUATE, LOST, PROSE):
        verdict = judge(refused, GOLD, read_exact(memory, list(GOLD), GOLD))
        assert verdict.outcome == "na"
        assert (verdict.correct, verdict.correct_lenient) == (None, None)


def test_strict_and_lenient_scores_are_unchanged_by_the_lenient_parse():
    exact = read_exact(ADEQUATE, list(GOLD), GOLD)
    assert judge(reply(ENVELOPE), GOLD, exact).outcome == "pass"
    bare = judge(reply(json.dumps(GOLD)), GOLD, exact)
    assert (bare.outcome, bare.correct, bare.correct_lenient) == ("wrapper_only", 0, 1)


def _reads(
    outcomes: list[str], adequate: list[float | None], answers: list[Any] | None = None
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "transform": "identity",
            "outcome": outcomes,
            "correct": [None if o == "na" else 0.0 for o in outcomes],
            "adequate": adequate,
            "source_pair_id": "p",
            "variant": "A",
            "branch": "reveal",
            "memory_sha256": None,
            "answer": [None if a is None else json.dumps(a) for a in answers]
            if answers is not None
            else None,
            "gold": json.dumps(GOLD),
        }
    )


def _cause(outcome: str, answer: Any) -> str:
    """The report's cause of one failed read at identity."""
    frame = _reads([outcome], [None], [answer])
    return str(attribute(frame, SourcePairs({}, "none"), None).iloc[0])


def test_each_failure_cause_follows_what_failed():
    wrong = {"k": "x", "j": None}
    reads = [  # outcome, adequate, answer -> cause
        ("wrong_log", 0, wrong, "dropped"),
        ("reader_error", 1, wrong, "misread"),
        ("wrapper_only", 1, GOLD, "wrapper_only"),
        ("reader_error", 1, GOLD, "wrapper_only"),  # right values in a wrong form
        ("wrong_log", 0, GOLD, "wrapper_only"),
        ("unparsed", None, GOLD, "wrapper_only"),
        ("unparsed", None, None, "undetermined"),
        ("writer_truncated", 0, GOLD, "writer_failed"),  # E_q's answer: not the reader's
        ("writer_empty", 0, None, "writer_failed"),
        ("error", None, None, "compressor_error"),
        ("na", 1, None, "na"),
    ]
    frame = _reads([r[0] for r in reads], [r[1] for r in reads], [r[2] for r in reads])
    causes = attribute(frame, SourcePairs({}, "none"), None)
    assert causes.tolist() == [r[3] for r in reads]
    assert ATTRIBUTIONS["wrapper_only"] == "format failure"
    assert ATTRIBUTIONS["undetermined"].startswith("undetermined")
    assert ATTRIBUTIONS["na"].startswith("infrastructure")


def test_every_failing_outcome_has_a_cause():
    from audit.reportdata._causes import CAUSE_OF_OUTCOME

    assert set(OUTCOMES) - {"pass"} == set(CAUSE_OF_OUTCOME)
    assert set(CAUSE_OF_OUTCOME.values()) <= set(ATTRIBUTIONS)


# ----------------------------------------------------------- C. duplicate JSON keys


DUPLICATED = '{"values": {"k": "WRONG", "k": "amber-101", "j": null}}'


@pytest.mark.parametrize(
    "content",
    [
        DUPLICATED,
        '{"k": "WRONG", "k": "amber-101", "j": null}',
        '{"values": {"k": "x", "j": null}, "values": {"k": "amber-101", "j": null}}',
    ],
)
def test_a_key_named_twice_is_no_answer(content):
    assert parse_answer(content, ["k", "j"]).form == "invalid"
    verdict = judge(reply(content), GOLD, read_exact(ADEQUATE, list(GOLD), GOLD))
    assert verdict.outcome == "reader_error"
    assert (verdict.correct, verdict.correct_lenient) == (0, 0)
    fenced = judge(reply(f"```json\n{content}\n```"), GOLD, read_exact(ADEQUATE, ["k", "j"], GOLD))
    assert fenced.outcome == "reader_error"  # the lenient parse refuses it too


def test_a_structured_writer_answer_with_a_key_named_twice_stays_unparsed():
    record = '{"id": "a", "op": "set", "key": "k", "value": "WRONG", "value": "v", "rev": 1}'
    content = '{"records": [' + record + "]}"
    assert structured_memory(content) == content
    assert read_exact(content, ["k"], {"k": "v"}).outcome == "unparsed"


# ------------------------------------------------------- D. the rules shown to readers

INTERPRETER_RULES = {
    "clock": "The clock is the largest ``now`` among non-revoked ticks (0 when there are none)",
    "revoked_tick": "among non-revoked ticks",
    "time_valid": "A record is time-valid while ``starts <= clock <= expires``",
    "revoke": "A revoke permanently invalidates its target",
    "revoke_of_revoke": "a revoke that targets a revoke has no effect",
    "candidates": "the candidates are the binding records for that key that are not revoked "
    "and are active",
    "when_active": "a ``when`` record only while its condition holds",
    "replay_active": "a ``replay`` only while its target is not revoked and the target itself "
    "would be active",
    "replay_window": "validity window included",
    "replay_missing": "A replay whose target is absent, or not a binding record, stays a "
    "candidate and evaluates to null",
    "highest_rev": "The candidate with the highest ``rev`` wins",
    "tie": "Two candidates sharing the top revision are a conflict and give null",
    "copy": "``copy`` resolves ``src``",
    "choose": "``choose`` resolves the selector and then the option it names (no such option "
    "-> null)",
    "no_fallback": "it never falls back to an older record",
    "cycle": "Cycles resolve to null",
    "add": "``add`` records newer than the winner",
    "add_integer": "which must then be an integer",
}
"""Each rule E_q applies -> the words of the interpreter's docstring that state it."""


def _flat(text: str) -> str:
    return " ".join(text.split())


def _docstring_rules() -> list[str]:
    """The sentences of the interpreter docstring's rule bullets."""
    doc = interpreter.__doc__ or ""
    bullets = re.split(r"\n\* ", doc.split("\n\n", 2)[2])
    assert len(bullets) >= 6, "the interpreter's docstring lost its rule bullets"
    sentences = []
    for bullet in bullets:
        flat = _flat(bullet.lstrip("* "))
        sentences += [s for s in re.split(r"(?<=\.)\s+(?=[A-Z`(])", flat) if s.strip()]
    return sentences


def test_every_rule_of_the_interpreter_is_named():
    from histories._semantics import RESOLUTION_RULES

    assert set(RESOLUTION_RULES) == set(INTERPRETER_RULES)
    named = [_flat(p) for p in INTERPRETER_RULES.values()]
    doc = _flat(interpreter.__doc__ or "")
    for rule, phrase in INTERPRETER_RULES.items():
        assert _flat(phrase) in doc, f"rule {rule}: the interpreter no longer says {phrase!r}"
    for sentence in _docstring_rules():
        assert any(p in sentence for p in named), (
            f"a rule of the interpreter has no id here or in RESOLUTION_RULES: {sentence!r}"
        )


def test_the_public_semantics_state_every_rule_the_reader_is_scored_on():
    from histories._semantics import RESOLUTION_RULES

    assert set(RESOLUTION_RULES) == set(INTERPRETER_RULES)
    public = _flat(PUBLIC_SEMANTICS)
    missing = {r: p for r, p in RESOLUTION_RULES.items() if _flat(p) not in public}
    assert not missing, f"PUBLIC_SEMANTICS does not state: {missing}"


def test_the_rules_that_were_missing_are_stated():
    public = _flat(PUBLIC_SEMANTICS)
    assert "a revoked tick does not advance the clock" in public
    assert "A revoke that targets another revoke has no effect" in public
    assert "with target's validity window" in public


# ------------------------------------------------------------ B. LLM writers


class Answers:
    """A chat client answering every request with one response."""

    def __init__(self, response: ChatResponse) -> None:
        self.response = response
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return self.response


def _update(condition: str, response: ChatResponse, budget: int = 1200) -> ChatRequest:
    import asyncio

    from compressors import parse_spec

    writer = build(parse_spec(condition))
    client = Answers(response)
    writer.client = client
    chunk = ChunkView([SetRecord(id="a", key="k", value="v", rev=1)])
    asyncio.run(writer.aupdate("", chunk, ["k"], budget))
    return client.requests[-1]


def test_thinking_writers_get_a_reasoning_allowance_of_their_own():
    from compressors.builtin import llm_writers

    assert llm_writers.REASONING_TOKENS == REASONING_TOKENS
    ok = reply("memory")
    assert _update("prose_off", ok).max_tokens == 400
    assert _update("prose_high", ok).max_tokens == 400 + REASONING_TOKENS
    assert _update("structured_high", ok).max_tokens == 400 + REASONING_TOKENS
    custom = _update("prose_high:answer_tokens=300,reasoning_tokens=1000", ok)
    assert custom.max_tokens == 1300
    assert _update("prose_off:answer_tokens=300", ok).max_tokens == 300
    # max_tokens is the request's whole cap, as sent (a thinking model's reasoning counts)
    assert _update("structured_high:max_tokens=160", ok).max_tokens == 160
    from compressors import InvalidParamsError, parse_spec

    for spec in (
        "prose_off:reasoning_tokens=100",  # no thinking, no reasoning allowance
        "prose_high:max_tokens=500,reasoning_tokens=100",  # a cap and allowances: which?
        "prose_high:max_tokens=500,answer_tokens=100",
    ):
        with pytest.raises(InvalidParamsError):
            build(parse_spec(spec))


def test_a_refused_writer_request_is_na_not_an_empty_memory():
    with pytest.raises(ChatUnavailableError, match="refused"):
        _update("prose_off", reply(None, finish=None, rejected="context too long", status=400))


def _rules(pair: Any) -> list[dict[str, Any]]:
    reveal_line = pair.futures.reveal[0][0].canonical_json()
    prose = "Write the new memory as plain text"
    structured = "Your memory is a record log"
    return [
        {  # the reader: every request refused (e.g. its context is too small)
            "contains": ["You read an agent's memory"],
            "replies": [{"status": 400, "body": {"error": {"message": "context too long"}}}],
        },
        {  # prose_off on the reveal future's first chunk: an empty answer
            "contains": [prose, reveal_line],
            "thinking": False,
            "replies": [
                {"content": "", "reasoning": "key_target is fern", "finish_reason": "stop"}
            ],
        },
        {  # prose_off otherwise: a memory
            "contains": [prose],
            "thinking": False,
            "replies": [{"content": "key_target: zephyr-492 (rev 2)"}],
        },
        {  # prose_high: the reasoning eats the allowance, no answer
            "contains": [prose],
            "thinking": True,
            "replies": [
                {
                    "content": None,
                    "reasoning": "Let me think about the records. " * 20,
                    "reasoning_field": "reasoning_content",
                    "finish_reason": "length",
                    "usage": {
                        "prompt_tokens": 300,
                        "completion_tokens": 120,
                        "completion_tokens_details": {"reasoning_tokens": 120},
                    },
                }
            ],
        },
        {  # structured_high: a whole record log, then padding to the limit
            "contains": [structured],
            "thinking": True,
            "replies": [
                {
                    "content": '{"records": []}\n\n\n\n',
                    "reasoning": "nothing to keep",
                    "reasoning_field": "reasoning_content",
                    "finish_reason": "length",
                    "usage": {
                        "prompt_tokens": 300,
                        "completion_tokens": 50,
                        "completion_tokens_details": {"reasoning_tokens": 20},
                    },
                }
            ],
        },
    ]


@pytest.fixture(scope="module")
def server_process(tmp_path_factory) -> Iterator[tuple[str, Path, Any]]:
    base = tmp_path_factory.mktemp("fake")
    pair = sample_pairs(generate(PRESETS["cca-pilot"]), 1)[0]
    (base / "rules.json").write_text(json.dumps(_rules(pair)))
    port_file, body_log = base / "port", base / "bodies.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests._fake_openai", str(base / "rules.json"), str(port_file),
         str(body_log)],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert process.poll() is None, "the fake server exited"
            assert time.monotonic() < deadline, "the fake server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}/v1", body_log, pair
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def writer_run(server_process, tmp_path_factory) -> tuple[Path, list[dict[str, Any]], Any]:
    url, body_log, pair = server_process
    base = tmp_path_factory.mktemp("run")
    config = base / "audit.toml"
    config.write_text(
        f'cache_path = "{base / "responses.sqlite"}"\n'
        f'[backends.fake]\nbase_url = "{url}"\nmodel = "fake-model"\nmax_retries = 0\n'
    )
    out = base / "run"
    result = CliRunner().invoke(
        app,
        ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms", "identity",
         "--workers", "1", "--quiet", "--budget", "600", "--llm-sample", "1", "--repeats", "1",
         "--reader", "fake", "--writer", "fake", "--config", str(config), "--out", str(out),
         "--llm-conditions", "prose_high,prose_off,structured_high,frontier",
         "--llm-transforms", "identity"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with result_csv(out).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    bodies = [json.loads(line) for line in body_log.read_text().splitlines()]
    return out, rows, bodies, pair


def _of(rows: list[dict[str, Any]], condition: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["condition"] == condition]


def test_a_writer_cut_off_while_reasoning_is_its_own_outcome(writer_run):
    _, rows, bodies, pair = writer_run
    starved = _of(rows, "prose_high")
    assert len(starved) == 12  # 2 variants x 3 branches x (exact, fake)
    assert {r["outcome"] for r in starved} == {"writer_truncated"}  # never wrong_log
    assert {r["correct"] for r in starved} == {"0"}
    assert {r["writer_finish_reason"] for r in starved} == {"length"}
    for r in starved:
        updates = len(pair.variants.of(r["variant"]).chunks)  # the prefix's updates
        if r["branch"] != "current":
            updates += len(pair.futures.of(r["branch"]))  # and its future's
        assert int(r["writer_reasoning_tokens"]) == 120 * updates  # reported, summed
        assert int(r["writer_content_tokens"]) == 0
        assert int(r["writer_reasoning_chars"]) > 0
        assert "cut off at its token limit in update 1 of" in r["error"]
    # the reasoning has an allowance of its own: max_tokens = answer + reasoning
    thinking = [b for b in bodies if (b.get("chat_template_kwargs") or {}).get("enable_thinking")]
    assert thinking
    assert {b["max_tokens"] for b in thinking} == {600 // 3 + REASONING_TOKENS}
    not_thinking = [
        b for b in bodies
        if (b.get("chat_template_kwargs") or {}).get("enable_thinking") is False
        and "Write the new memory as plain text" in b["messages"][0]["content"]
    ]  # fmt: skip
    assert {b["max_tokens"] for b in not_thinking} == {600 // 3}


def test_an_empty_writer_answer_fails_only_the_memories_written_from_it(writer_run):
    _, rows, _, _ = writer_run
    off = _of(rows, "prose_off")
    by_branch = {b: {r["outcome"] for r in off if r["branch"] == b} for b in
                 ("current", "reveal", "override")}  # fmt: skip
    assert by_branch["reveal"] == {"writer_empty"}  # the empty answer was in the reveal future
    assert by_branch["current"] == {"unparsed", "na"}  # exact: prose; reader: refused
    assert by_branch["override"] == {"unparsed", "na"}
    empty = [r for r in off if r["outcome"] == "writer_empty"]
    assert {r["writer_finish_reason"] for r in empty} == {"stop"}
    assert all("answered nothing" in r["error"] for r in empty)
    normal = [r for r in off if r["branch"] == "current"]
    assert {r["writer_finish_reason"] for r in normal} == {"stop"}
    assert {r["writer_reasoning_tokens"] for r in normal} == {"0"}  # no reasoning text


def test_a_whole_answer_padded_to_the_limit_is_not_a_cut_off(writer_run):
    _, rows, _, pair = writer_run
    structured = _of(rows, "structured_high")
    assert not {r["outcome"] for r in structured} & {"writer_truncated", "writer_empty"}
    exact = [r for r in structured if r["reader"] == "exact"]
    assert {r["outcome"] for r in exact} <= {"wrong_log", "pass"}  # the empty log E_q reads
    assert {r["writer_finish_reason"] for r in exact} == {"length"}
    for r in (r for r in exact if r["branch"] == "current"):
        updates = len(pair.variants.of(r["variant"]).chunks)
        assert (int(r["writer_reasoning_tokens"]), int(r["writer_content_tokens"])) == (
            20 * updates,
            30 * updates,
        )


def test_a_refused_reader_request_is_na(writer_run):
    _, rows, _, _ = writer_run
    read = [r for r in _of(rows, "frontier") if r["reader"] == "fake"]
    assert len(read) == 6
    assert {r["outcome"] for r in read} == {"na"}
    assert {r["correct"] for r in read} == {""}
    assert all("refused (HTTP 400)" in r["error"] for r in read)


def test_writer_columns_are_appended_and_empty_for_deterministic_reads(writer_run):
    out, rows, _, _ = writer_run
    header = result_csv(out).read_text().splitlines()[0].split(",")
    assert header[-5:-1] == [
        "writer_finish_reason", "writer_reasoning_tokens", "writer_content_tokens",
        "writer_reasoning_chars",
    ]  # fmt: skip
    assert header[-1] == "wrong_answer"  # added after them: new columns go at the end
    exact_frontier = [r for r in _of(rows, "frontier") if r["reader"] == "exact"]
    assert exact_frontier
    assert all(r["writer_finish_reason"] == "" for r in exact_frontier)


def test_the_report_blames_the_writer_and_the_server_not_the_memory(writer_run):
    out, _, _, _ = writer_run
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    taxonomy = pd.read_csv(out / "report" / "taxonomy.csv")
    high = taxonomy[taxonomy["condition"] == "prose_high"]
    assert high["cause_writer_failed"].sum() == 12
    assert high["cause_dropped"].sum() == 0
    off = taxonomy[taxonomy["condition"] == "prose_off"]
    assert off["cause_dropped"].sum() == 0  # prose: undetermined, never dropped
    assert off["cause_undetermined"].sum() == 4  # exact reads of current and override
    assert off["cause_writer_failed"].sum() == 4  # both readers' reveal reads
    frontier = taxonomy[(taxonomy["condition"] == "frontier") & (taxonomy["reader"] != "exact")]
    assert frontier["cause_na"].sum() == 6
    assert frontier["cause_misread"].sum() == 0


# ------------------------------------------- E. a reader must read before it is scored


def _full_reads(reader: str, reveal: list[int | None], condition: str = "full") -> list[dict]:
    """Rows of ``condition`` read by ``reader``: current and override right, reveal as
    given per source pair (None: NA)."""
    rows = []
    for index, value in enumerate(reveal):
        for variant in ("A", "B"):
            for branch, right in (("current", 1), ("reveal", value), ("override", 1)):
                rows.append({
                    "pair_id": f"p{index}", "source_pair_id": f"p{index}", "family": "f",
                    "variant": variant, "branch": branch, "repeat": 0, "budget": 600,
                    "condition": condition, "kind": "archive" if condition == "full" else
                    "strict", "transform": "identity", "reader": reader,
                    "reader_kind": "exact" if reader == "exact" else "llm",
                    "outcome": "na" if right is None else "pass" if right else "reader_error",
                    "correct": right,
                })  # fmt: skip
    return rows


@pytest.mark.parametrize(
    ("reveal", "status"),
    [
        ([1] * 7 + [0] * 3, "reads"),  # 27/30 blocks: 90 % of the exact reader's 30/30
        ([1] * 6 + [0] * 4, "cannot read"),  # 26/30
        ([1] * 6 + [0] * 2 + [None] * 2, "not checked"),  # 26..28/30: NA decides
    ],
)
def test_a_reader_is_checked_on_full_against_the_exact_reader(reveal, status):
    from audit.rundir import normalize
    from audit.scoring import reader_checks, score_results
    from audit.scoring._readers import NOT_A_VERDICT
    from audit.scoring._summary import summary_of

    frame = normalize(pd.DataFrame(
        _full_reads("exact", [1] * 10) + _full_reads("llm", reveal)
        + _full_reads("llm", [1] * 10, "a") + _full_reads("llm", [0] * 10, "b")
    ))  # fmt: skip
    scores = score_results(frame)
    (check,) = reader_checks(scores)
    assert (check.exact_k, check.exact_n, check.n, check.source_pairs) == (30, 30, 30, 10)
    assert check.status == status
    summary = summary_of(scores, {}, len(frame), 10)
    marked = {e["condition"] for e in summary["scores"] if e.get("not_a_verdict")}
    if status == "reads":
        assert marked == set()
        assert [w["reader"] for w in summary["selection"]] == ["llm"]  # a and b ranked
    else:
        assert marked == {"full", "a", "b"}
        assert summary["selection"] == []  # no verdict: ranked nowhere
    if status == "cannot read":
        assert {e["not_a_verdict"] for e in summary["scores"] if e["reader"] == "llm"} == {
            NOT_A_VERDICT
        }


def test_a_reader_that_cannot_read_the_whole_history_gives_no_verdict(tmp_path: Path):
    from audit.scoring._readers import NOT_A_VERDICT
    from tests._fake_openai import Reply, Rule, serving_in_thread

    with serving_in_thread("blind") as fake:  # answers every read with the wrong key
        fake.rules = [Rule(contains=["You read an agent's memory"],
                           replies=[Reply(content='{"values": {"nothing": "here"}}')])]  # fmt: skip
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
            f'[backends.blind]\nbase_url = "{fake.base_url}"\nmodel = "blind"\nmax_retries = 0\n'
        )
        command = ["run", "--preset", "cca-pilot", "--conditions", "frontier,frontier_latest,full",
                   "--transforms", "identity", "--workers", "1", "--budget", "600",
                   "--llm-sample", "2", "--repeats", "1", "--llm-transforms", "identity",
                   "--reader", "blind", "--llm-conditions", "frontier,frontier_latest",
                   "--config", str(config)]  # fmt: skip
        out, again = tmp_path / "run", tmp_path / "again"
        result = CliRunner().invoke(app, [*command, "--out", str(out)])
        # the same command again, for compare (a copy of a run is refused: one run id)
        repeated = CliRunner().invoke(app, [*command, "--out", str(again)])
    assert result.exit_code == 0, result.output
    assert repeated.exit_code == 0, repeated.output
    summary = json.loads((out / "summary.json").read_text())
    stage = summary["run"]["config"]["llm"]
    assert "full" in stage["conditions"]  # read first, though not asked
    (check,) = summary["readers"]
    assert check["status"] == "cannot read"
    assert (check["k"], check["n"], check["exact_k"], check["exact_n"]) == (0, 6, 6, 6)
    llm = [e for e in summary["scores"] if e["reader"] != "exact"]
    assert llm
    assert {e.get("not_a_verdict") for e in llm} == {NOT_A_VERDICT}
    assert not any(e.get("not_a_verdict") for e in summary["scores"] if e["reader"] == "exact")
    assert [w["reader"] for w in summary["selection"]] == ["exact"]  # ranked nowhere
    said = " ".join(result.output.split())
    assert f"(reader {check['reader']}): {NOT_A_VERDICT}: on full" in said
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    for name in ("report.md", "report.html"):
        assert NOT_A_VERDICT in (out / "report" / name).read_text()
    headline = pd.read_csv(out / "report" / "headline.csv")
    blind = headline[headline["reader"] != "exact"]
    assert set(blind["role"]) == {"not a verdict"}
    assert set(blind["ranks"]) == {"-"}
    comparisons = pd.read_csv(out / "report" / "comparisons.csv")
    assert set(comparisons["reader"]) == {"exact"}
    compare = CliRunner().invoke(app, ["compare", str(out), str(again), "--out",
                                       str(tmp_path / "compare")])  # fmt: skip
    assert compare.exit_code == 0, compare.output
    assert f"[{NOT_A_VERDICT}]" in " ".join(compare.output.split())
    compared = pd.read_csv(tmp_path / "compare" / "compare.csv")
    assert set(compared.loc[compared["reader_b"] != "exact", "verdict"]) == {NOT_A_VERDICT}
    assert NOT_A_VERDICT in (tmp_path / "compare" / "compare.md").read_text()


@pytest.mark.parametrize("reader_reads", [True, False])
def test_a_writer_no_valid_reader_can_read_gives_no_verdict(reader_reads: bool):
    from audit.rundir import normalize
    from audit.scoring import score_results
    from audit.scoring._summary import summary_of

    prose = _full_reads("exact", [0] * 10, "prose_off")  # the exact reader: no record log
    for row in prose:
        row.update(outcome="unparsed", correct=0, kind="strict")
    frame = normalize(pd.DataFrame(
        _full_reads("exact", [1] * 10) + prose
        + _full_reads("llm", [1] * 10 if reader_reads else [0] * 10)
        + _full_reads("llm", [0] * 10, "prose_off")
    ))  # fmt: skip
    summary = summary_of(score_results(frame), {}, len(frame), 10)
    marked = {(e["reader"], e["condition"]) for e in summary["scores"] if e.get("not_a_verdict")}
    if reader_reads:  # a valid reader read the prose: its verdict stands
        assert summary["writers"] == []
        assert marked == set()
    else:
        (writer,) = summary["writers"]
        assert (writer["condition"], writer["unparsed"], writer["reads"]) == ("prose_off", 60, 60)
        assert ("exact", "prose_off") in marked


# ------------------------------------------------- an LLM writer that echoes its prompt


def test_a_memory_made_of_the_prompts_words_echoes_it_and_the_history_does_not():
    from audit.engine._llm_stage import echo_failure, echoes
    from audit.engine._streaming import plan_variant
    from compressors.builtin.llm_writers import ProseOff

    pair = generate(PRESETS["cca-pilot"])[0]
    (view, _, _), *_ = plan_variant(pair, "A")[0]
    system, user = ProseOff().messages("", view, pair.query, 600)
    instructions = [system.content]
    # a small model's habit: the role paragraph back, with a line of its own
    parrot = system.content.split("\n\n", 1)[1] + "\nkey: value"
    assert echo_failure(*echoes(parrot, instructions))
    # what a writer should keep: the records, in prose or as lines, never echoes
    assert echoes(view.text, instructions)[0] == 0
    assert not echo_failure(*echoes(user.content, instructions))
    assert not echo_failure(*echoes("", instructions))  # nothing to judge: no run of 8


def test_a_writer_that_echoes_its_prompt_gives_no_verdict(tmp_path: Path):
    # before: its memories were prose the exact reader could not parse, scored as any
    # writer's (undetermined), and ranked beside the others when a reader passed
    from audit.scoring._readers import ECHOING_WRITER
    from compressors.builtin.llm_writers import _ROLE
    from tests._fake_openai import Reply, Rule, serving_in_thread

    with serving_in_thread("parrot") as fake:
        fake.rules = [Rule(contains=["You maintain the memory"], replies=[Reply(content=_ROLE)])]
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
            f'[backends.parrot]\nbase_url = "{fake.base_url}"\nmodel = "parrot"\n'
            "max_retries = 0\n"
        )
        out = tmp_path / "run"
        result = CliRunner().invoke(app, [
            "run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
            "identity", "--workers", "1", "--quiet", "--budget", "600", "--llm-sample", "2",
            "--repeats", "1", "--llm-transforms", "identity", "--writer", "parrot",
            "--llm-conditions", "prose_off", "--config", str(config), "--out", str(out),
        ])  # fmt: skip
    assert result.exit_code == 0, result.output
    with result_csv(out).open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["condition"] == "prose_off"]
    assert len(rows) == 12
    assert {r["outcome"] for r in rows} == {"writer_echo"}
    assert all(r["correct"] == "0" and "repeats its prompt" in r["error"] for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    (writer,) = summary["writers"]
    assert (writer["condition"], writer["echoed"], writer["reads"]) == ("prose_off", 12, 12)
    assert writer["verdict"] == ECHOING_WRITER
    marks = {e["condition"]: e.get("not_a_verdict") for e in summary["scores"]}
    assert marks["prose_off"] == ECHOING_WRITER
    assert not marks["frontier"]
