"""What a wrong answer is (``histories.AnswerClasses``, the results' ``wrong_answer``).

The classes are checked against E_q on generated pairs: an oracle that works out each
binding record's value by E_q itself (the record made the winner of its key), and
which records are dead by the written rules, gives the class every candidate answer
must get; real compressors' rows must show a collision through as the other variant's
answer.  Constructed memories, read by the exact reader, must give each class.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.engine import run_job
from audit.engine._exact import read_exact
from audit.engine._rows import JobRows
from audit.plan import parse_transforms
from compressors import build, parse_spec
from histories import (
    BRANCHES,
    FAMILIES,
    VARIANTS,
    WRONG_ANSWERS,
    AnswerClasses,
    Branch,
    GenerationConfig,
    Pair,
    Record,
    SetRecord,
    VariantName,
    resolve,
)
from histories._generate import build_pair
from histories._pair import compute_gold

BINDING = ("set", "copy", "choose", "replay", "when")


def _as_if_won(history: list[Record], record: Record) -> str | None:
    """What ``record`` asserts, by E_q: the history with the record (a replay: and its
    target) above every revision, its validity window and condition dropped, and every
    revoke of it removed; then E_q on its key."""
    top = 1 + max((r.rev for r in history if hasattr(r, "rev")), default=0)
    freed = {record.id}
    if record.op == "replay":
        freed.add(record.target)  # type: ignore[union-attr]

    def lifted(r: Record) -> Record:
        if r.id not in freed:
            return r
        if r.op == "when":  # its condition dropped: a literal
            return SetRecord(id=r.id, key=r.key, value=r.value, rev=top)  # type: ignore[union-attr]
        fields: dict[str, Any] = {"rev": top} if r.id == record.id else {}
        if hasattr(r, "expires"):
            fields["expires"] = None
        if hasattr(r, "starts"):
            fields["starts"] = None
        return r.model_copy(update=fields)

    log = [lifted(r) for r in history if not (r.op == "revoke" and r.target in freed)]  # type: ignore[union-attr]
    key: str = record.key  # type: ignore[union-attr]
    return resolve(log, [key])[key]


def _dead(history: list[Record], record: Record) -> bool:
    """Revoked, or expired at the clock (a replay: its target), by the written rules."""
    by_id = {r.id: r for r in history}
    revoked = {
        r.target  # type: ignore[union-attr]
        for r in history
        if r.op == "revoke" and getattr(by_id.get(r.target), "op", None) != "revoke"  # type: ignore[union-attr]
    }
    clock = max((r.now for r in history if r.op == "tick" and r.id not in revoked), default=0)  # type: ignore[union-attr]
    found = by_id.get(record.target) if record.op == "replay" else record  # type: ignore[union-attr]
    if record.id in revoked or (found is not None and found.id in revoked):
        return True
    expires = getattr(found, "expires", None)
    return expires is not None and clock > expires


def bound_by_e_q(history: list[Record]) -> tuple[set[Any], set[Any]]:
    """(live, dead): each binding record's value by E_q, split by the written rules;
    live also holds every key's value."""
    binding = [r for r in history if r.op in BINDING]
    dead = {_as_if_won(history, r) for r in binding if _dead(history, r)}
    live = {_as_if_won(history, r) for r in binding if not _dead(history, r)}
    keys = {r.key for r in history if hasattr(r, "key")}  # type: ignore[union-attr]
    return live | set(resolve(history, sorted(keys)).values()), dead


def oracle(
    pair: Pair,
    variant: VariantName,
    branch: Branch,
    key: str,
    value: Any,
    bound: tuple[set[Any], set[Any]],
) -> str | None:
    """The class of ``{key: value}`` read on ``variant`` after ``branch``, from E_q
    (``bound``: ``bound_by_e_q`` of that history)."""
    other: VariantName = "B" if variant == "A" else "A"
    if value == resolve(pair.history(variant, branch), [key])[key]:
        return None  # right
    if value == resolve(pair.history(other, branch), [key])[key]:
        return "other_variant"
    if branch != "current" and value == resolve(pair.prefix(variant), [key])[key]:
        return "stale"
    if value is None:
        return "no_answer"
    if not isinstance(value, str):
        return "invented"
    live, dead = bound
    if value in dead:
        return "resurrected"
    return "bound_elsewhere" if value in live else "invented"


def _candidates(pair: Pair, history: list[Record], keep: list[bool]) -> list[Any]:
    """Answers a memory could give: E_q on a kept subset of the history (what a
    compressor keeps), every literal value of the pair, null, a value never bound, a
    value that is no string, and every key's value in the history."""
    kept = [r for r, k in zip(history, keep, strict=False) if k]
    found: list[Any] = [resolve(kept, pair.query)[pair.query[0]], None, "never-bound-0", 7]
    found += [getattr(r, "value", None) for r in pair.all_records() if hasattr(r, "value")]
    keys = sorted({r.key for r in pair.all_records() if hasattr(r, "key")})  # type: ignore[union-attr]
    return found + list(resolve(history, keys).values())  # other keys' values, sums too


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    index=st.integers(0, 30),
    seed=st.integers(0, 3),
    distractors=st.integers(0, 12),
    mix=st.sampled_from(["mixed", "plain", "task-like"]),
    keep=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_every_answer_is_classed_as_e_q_says(family, index, seed, distractors, mix, keep):
    config = GenerationConfig(families=[family], pairs_per_family=1, seed=seed,
                              distractors=distractors, distractor_mix=mix)  # fmt: skip
    pair = build_pair(FAMILIES[family], index, config)
    assert pair.gold == compute_gold(pair)  # the classifier reads the stored golds
    classes = AnswerClasses()
    key = pair.query[0]
    for variant in VARIANTS:
        for branch in BRANCHES:
            history = pair.history(variant, branch)
            bound = bound_by_e_q(history)
            for value in _candidates(pair, history, keep):
                expected = oracle(pair, variant, branch, key, value, bound)
                if expected is None:
                    continue
                got = classes.classify(pair, variant, branch, {key: value})
                assert got == expected, (pair.pair_id, variant, branch, value)


def test_a_collision_shows_through_as_the_other_variants_answer():
    """Real compressors on generated pairs: every wrong read has exactly one class and
    no right or NA read has one; where the two memories collided and one variant is
    right after the reveal, the other's answer is the other variant's (the exact reader
    reads one memory for both)."""
    config = GenerationConfig(families=["all"], pairs_per_family=2, seed=5, distractors=8)
    conditions = [(parse_spec(c), 400) for c in ("frontier", "tail", "probe_newest", "full")]
    seen: set[str] = set()
    collided_wrong = 0
    for family in sorted(FAMILIES):
        for index in range(config.pairs_per_family):
            pair = build_pair(FAMILIES[family], index, config)
            rows = run_job(pair.pair_id, pair, conditions, parse_transforms("identity"), 0).rows
            for row in rows:
                assert (row["wrong_answer"] is not None) == (row["correct"] == 0), row
                assert row["wrong_answer"] is None or row["wrong_answer"] in WRONG_ANSWERS
                seen.add(row["wrong_answer"])
            for condition in ("frontier", "tail", "probe_newest"):
                reveal = {
                    r["variant"]: r
                    for r in rows
                    if r["condition"] == condition and r["branch"] == "reveal"
                }
                if reveal["A"]["collision"] != 1:
                    continue
                right = [v for v, r in reveal.items() if r["correct"] == 1]
                if len(right) == 1:
                    wrong = reveal["B" if right == ["A"] else "A"]
                    assert wrong["wrong_answer"] == "other_variant", wrong
                    collided_wrong += 1
    assert collided_wrong > 0  # the property was exercised
    assert {"other_variant", "stale", "no_answer", "bound_elsewhere"} <= seen


# --------------------------------------------------------------------------- constructed


def _set(rid: str, value: str, rev: int, **more: Any) -> dict[str, Any]:
    return {"id": rid, "op": "set", "key": "k", "value": value, "rev": rev, **more}


def _pair(
    pair_id: str, a: list[dict[str, Any]], b: list[dict[str, Any]], reveal: list[dict[str, Any]]
) -> Pair:
    raw = {
        "pair_id": pair_id, "family": "hand", "query": ["k"],
        "variants": {"A": {"chunks": [a]}, "B": {"chunks": [b]}},
        "futures": {"reveal": [reveal], "override": [[_set("o1", "jade", 9)]]},
    }  # fmt: skip
    pair = Pair.model_validate(raw)
    return pair.model_copy(update={"gold": compute_gold(pair)})


ROLLBACK = _pair(
    "rollback",
    [_set("e1", "amber", 1), _set("e2", "onyx", 2)],
    [_set("e1", "cedar", 1), _set("e2", "onyx", 2)],
    [{"id": "r1", "op": "revoke", "target": "e2"}],
)
"""A: amber then onyx; B: cedar then onyx; the reveal revokes onyx (A amber, B cedar)."""
TOMBSTONE = _pair(
    "tombstone",
    [_set("e1", "amber", 1), _set("e2", "onyx", 2), {"id": "t1", "op": "revoke", "target": "e1"}],
    [_set("e1", "amber", 1), _set("e2", "onyx", 2)],
    [{"id": "r1", "op": "revoke", "target": "e2"}],
)
"""amber is revoked in A only; the reveal revokes onyx (A null, B amber)."""


SUMS = _pair(
    "sums",
    [_set("e1", "amber", 1), {**_set("e2", "10", 1), "key": "n"},
     {"id": "e3", "op": "add", "key": "n", "delta": 5, "rev": 2}],
    [_set("e1", "amber", 1), {**_set("e2", "10", 1), "key": "n"}],
    [_set("e4", "cedar", 2)],
)  # fmt: skip
"""Another key, ``n``, is 10 plus 5 in A: 15 is a value A binds, though no record says it."""


def _lines(*records: dict[str, Any]) -> str:
    return "\n".join(json.dumps(r, separators=(",", ":")) for r in records)


CONSTRUCTED = [
    # (pair, variant, branch, memory, class)
    (ROLLBACK, "A", "reveal", _lines(_set("e1", "cedar", 1)), "other_variant"),
    (ROLLBACK, "A", "reveal", _lines(_set("e2", "onyx", 2)), "stale"),
    (TOMBSTONE, "A", "current", _lines(_set("e1", "amber", 1)), "resurrected"),
    (ROLLBACK, "A", "current", _lines(_set("e1", "amber", 1)), "bound_elsewhere"),
    (ROLLBACK, "A", "current", _lines(_set("x9", "zinc", 5)), "invented"),
    (ROLLBACK, "A", "current", "", "no_answer"),
    (ROLLBACK, "A", "reveal", "the key was amber, I think", "no_answer"),
    (TOMBSTONE, "B", "reveal", "", "other_variant"),  # A's answer is null: the collision
    (SUMS, "A", "current", _lines(_set("m1", "15", 3)), "bound_elsewhere"),
    (SUMS, "B", "current", _lines(_set("m1", "15", 3)), "invented"),
]


def test_constructed_memories_give_each_class():
    classes = AnswerClasses()
    got = []
    for pair, variant, branch, memory, expected in CONSTRUCTED:
        gold = pair.gold.of(variant).of(branch)  # type: ignore[union-attr]
        read = read_exact(memory, pair.query, gold)
        assert read.outcome != "pass"
        found = classes.classify(pair, variant, branch, read.answer)
        assert found == expected, (variant, branch, memory, read.answer)
        got.append(found)
    # an LLM answer with the right values in a wrong form, through the row builder
    rows = JobRows("job", llm=True)
    shared = rows.shared(ROLLBACK, "frontier", build(parse_spec("frontier")), 400, reader="r")
    right = json.dumps({"k": "amber"})
    rows.add(shared, [rows.read(variant="A", branch="reveal", outcome="wrapper_only",
                                correct=0, answer=right, gold=right)])  # fmt: skip
    got.append(rows.rows[0]["wrong_answer"])
    assert got[-1] == "right_values"
    assert set(got) == set(WRONG_ANSWERS)  # every class, each from a memory built for it


def test_the_column_is_one_byte_per_read_and_names_in_a_frame():
    rows = JobRows("job")
    shared = rows.shared(ROLLBACK, "tail", build(parse_spec("tail")), 400, reader="exact")
    reads = [
        rows.read(variant="A", branch="reveal", outcome="wrong_log", correct=0,
                  answer=json.dumps({"k": "onyx"})),
        rows.read(variant="A", branch="current", outcome="pass", correct=1),
        rows.read(variant="B", branch="reveal", outcome="na", correct=None),
    ]  # fmt: skip
    rows.add(shared, reads)
    table = rows.columns.table()
    column = table["wrong_answer"]
    assert str(column.type) == "dictionary<values=string, indices=int8, ordered=0>"
    assert column.combine_chunks().dictionary.to_pylist() == list(WRONG_ANSWERS)
    assert table.to_pandas()["wrong_answer"].tolist()[0] == "stale"
    assert table.to_pandas()["wrong_answer"].isna().tolist() == [False, True, True]


def test_an_answer_of_several_keys_takes_the_first_class_of_its_keys():
    """A tau2 pair asks two keys: each wrong key is classed, the answer takes the first
    class in precedence order, whatever the order of the keys."""
    raw = ROLLBACK.model_dump()
    raw["query"] = ["j", "k"]
    raw["variants"]["A"]["chunks"][0].append({**_set("e9", "x", 1), "key": "j"})
    raw["variants"]["B"]["chunks"][0].append({**_set("e9", "x", 1), "key": "j"})
    pair = Pair.model_validate({**raw, "pair_id": "two", "gold": None})
    pair = pair.model_copy(update={"gold": compute_gold(pair)})
    classes = AnswerClasses()
    cases = [
        ({"j": None, "k": "onyx"}, "stale"),  # no answer on j, the pre-update value on k
        ({"j": "nope", "k": None}, "invented"),
        ({"j": "x", "k": None}, "no_answer"),
        ({"j": "x", "k": "cedar"}, "other_variant"),
        ({"j": "x", "k": "amber"}, "right_values"),
    ]
    assert [classes.classify(pair, "A", "reveal", answer) for answer, _ in cases] == [
        expected for _, expected in cases
    ]


def test_rows_stored_before_the_column_read_back_with_it_empty_and_score_without_it():
    """A job stored by the version before the column (a resume across it) reads back
    with the column empty; a results frame without it scores with no wrong-answer
    counts, never zeros."""
    import pandas as pd

    from audit.rundir import STORED_SCHEMA, normalize, table_from_bytes
    from audit.rundir._store import table_bytes
    from audit.scoring import summarize

    rows = JobRows("job")
    shared = rows.shared(ROLLBACK, "tail", build(parse_spec("tail")), 400, reader="exact")
    rows.add(shared, [rows.read(variant="A", branch="reveal", outcome="wrong_log", correct=0,
                                answer=json.dumps({"k": "onyx"}))])  # fmt: skip
    packed = rows.pack()
    older = table_from_bytes(packed.results).drop_columns(["wrong_answer"])
    back = table_from_bytes(table_bytes(older))
    assert back.schema.equals(STORED_SCHEMA)
    assert back["wrong_answer"].null_count == 1
    frame = rows.columns.table().to_pandas()
    with_column = summarize(normalize(frame), {})
    assert with_column["scores"][0]["wrong answers (reads)"] == {"stale": 1}
    without = summarize(normalize(pd.DataFrame(frame.drop(columns=["wrong_answer"]))), {})
    assert "wrong answers (reads)" not in without["scores"][0]
