"""Validity of the LLM stage: failures are blamed on whoever failed.

* C. a key named twice in a model's JSON is no answer;
* D. the semantics shown to LLM readers state every rule E_q scores them by.
"""

from __future__ import annotations

import re

import pytest

import histories._interpreter as interpreter
from audit.engine import judge, parse_answer, read_exact
from compressors import ChatResponse
from compressors.builtin.llm_writers import structured_memory
from histories import PUBLIC_SEMANTICS, SetRecord

GOLD = {"k": "amber-101", "j": None}
ADEQUATE = SetRecord(id="a", key="k", value="amber-101", rev=1).canonical_json()


def reply(content: str | None, finish: str = "stop") -> ChatResponse:
    return ChatResponse(content=content, finish_reason=finish, status=200)


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
