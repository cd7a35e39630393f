"""Validity of the LLM stage: failures are blamed on whoever failed.

* A. a failed read's cause follows what failed: the memory (dropped), the reader
  (misread, format failure: right values in a wrong form, whatever the memory), nobody
  can tell (undetermined: no record log), the
  infrastructure or a refused request (NA), the compressor;
* C. a key named twice in a model's JSON is no answer;
* D. the semantics shown to LLM readers state every rule E_q scores them by.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd
import pytest

import histories._interpreter as interpreter
from audit.engine import judge, parse_answer, read_exact
from audit.reportdata._causes import ATTRIBUTIONS, attribute
from audit.rundir import OUTCOMES, SourcePairs
from compressors import ChatResponse
from compressors.builtin.llm_writers import structured_memory
from histories import PUBLIC_SEMANTICS, SetRecord

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
