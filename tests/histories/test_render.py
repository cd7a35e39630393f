"""Renderings: json and log round-trip exactly, prose is seeded and loses no field."""

from __future__ import annotations

import json
import pickle
import random
import re
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from histories._records import (
    IDENTIFIER_PATTERN,
    RECORD_KINDS,
    AddRecord,
    ChooseRecord,
    CopyRecord,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    WhenRecord,
)
from histories._render import (
    RenderParseError,
    _prose_phrasings,
    parse_record_line,
    parse_records,
    render_record_line,
    render_records,
)

# ----------------------------------------------------------------------------- strategies

identifiers = st.from_regex(IDENTIFIER_PATTERN, fullmatch=True)
_NASTY = '"\\\n\r\t(),=:{}[]\u2028\u2029\x85\x00 \u00e9\u4e2d\U0001f600'
texts = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(_NASTY)), max_size=40
)
revisions = st.integers(0, 10**12)
ticks = st.integers(0, 10**12)
optional_ticks = st.none() | ticks
deltas = st.integers(-(10**12), 10**12)

set_records = st.builds(
    SetRecord,
    id=identifiers,
    key=identifiers,
    value=texts,
    rev=revisions,
    expires=optional_ticks,
    starts=optional_ticks,
)
copy_records = st.builds(
    CopyRecord,
    id=identifiers,
    key=identifiers,
    src=identifiers,
    rev=revisions,
    expires=optional_ticks,
    starts=optional_ticks,
)
choose_records = st.builds(
    ChooseRecord,
    id=identifiers,
    key=identifiers,
    selector=identifiers,
    options=st.dictionaries(texts, identifiers, min_size=1, max_size=5),
    rev=revisions,
)
revoke_records = st.builds(RevokeRecord, id=identifiers, target=identifiers)
replay_records = st.builds(
    ReplayRecord, id=identifiers, key=identifiers, target=identifiers, rev=revisions
)
tick_records = st.builds(TickRecord, id=identifiers, now=ticks)
add_records = st.builds(
    AddRecord, id=identifiers, key=identifiers, delta=deltas, rev=revisions, expires=optional_ticks
)
when_records = st.builds(
    WhenRecord,
    id=identifiers,
    key=identifiers,
    cond_key=identifiers,
    cond_value=texts,
    value=texts,
    rev=revisions,
    expires=optional_ticks,
)
STRATEGIES = {
    "set": set_records,
    "copy": copy_records,
    "choose": choose_records,
    "revoke": revoke_records,
    "replay": replay_records,
    "tick": tick_records,
    "add": add_records,
    "when": when_records,
}
records = st.one_of(*STRATEGIES.values())
record_lists = st.lists(records, max_size=6)
short_lists = st.lists(records, max_size=3)


def test_strategies_cover_every_kind() -> None:
    assert set(STRATEGIES) == set(RECORD_KINDS)


# ----------------------------------------------------------------------------- fixtures

EXAMPLE: list[Record] = [
    SetRecord(id="e01", key="key_target", value="amber-101", rev=2, expires=8),
    SetRecord(
        id="e02", key="key_b", value='say "hi", (then) \\ bye\n\u2028\u00e9', rev=3, starts=4
    ),
    CopyRecord(id="e03", key="key_alias", src="key_target", rev=1, expires=6, starts=2),
    ChooseRecord(
        id="e04",
        key="key_pick",
        selector="key_mode",
        options={"day": "key_a", "ni,ght)": "key_b"},
        rev=5,
    ),
    RevokeRecord(id="e05", target="e01"),
    ReplayRecord(id="e06", key="key_target", target="e01", rev=7),
    TickRecord(id="t01", now=11),
    AddRecord(id="e07", key="key_count", delta=-13, rev=9, expires=12),
    AddRecord(id="e08", key="key_count", delta=14, rev=10),
    WhenRecord(
        id="e09",
        key="key_light",
        cond_key="key_mode",
        cond_value="night",
        value="dim",
        rev=2,
        expires=15,
    ),
]


def field_fragments(record: Record) -> list[str]:
    """How each field value must appear in prose: identifiers and ints bare, text quoted."""
    quote = quoted
    fragments = [record.id]
    for name, value in record.to_dict().items():
        if name in {"id", "op"}:
            continue
        if name in {"value", "cond_value"}:
            fragments.append(quote(value))
        elif name == "options":
            for label, target in value.items():
                fragments += [quote(label), target]
        else:
            fragments.append(str(value))
    return fragments


def quoted(text: str) -> str:
    return (
        json.dumps(text, ensure_ascii=False)
        .replace("\x85", "\\u0085")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# ----------------------------------------------------------------------------- round trips


@given(rs=record_lists)
@example(rs=EXAMPLE)  # the fixed example, every run
@settings(max_examples=200)
def test_structured_round_trip(rs: list[Record]) -> None:
    for style in ("json", "log"):
        text = render_records(rs, style)
        back = parse_records(text, style)
        assert back == rs, style
        # Equality of dicts ignores order; the canonical bytes do not.
        assert [r.canonical_json() for r in back] == [r.canonical_json() for r in rs], style


@given(rs=short_lists)
def test_json_is_canonical_json_lines(rs: list[Record]) -> None:
    text = render_records(rs, "json")
    assert text == "\n".join(r.canonical_json() for r in rs)
    # The documented canonical form: compact json.dumps of to_dict(), unicode kept.
    compact = (",", ":")
    assert text == "\n".join(
        json.dumps(r.to_dict(), separators=compact, ensure_ascii=False) for r in rs
    )


@given(rs=short_lists)
def test_log_lines_are_one_call_per_record(rs: list[Record]) -> None:
    lines = render_records(rs, "log").splitlines()
    assert len(lines) == len(rs)
    for line, record in zip(lines, rs, strict=True):
        assert line.startswith(f"memory.{record.op}(id=")
        assert line.endswith(")")


def test_log_line_format() -> None:
    assert render_record_line(EXAMPLE[0], "log") == (
        'memory.set(id="e01", key="key_target", value="amber-101", rev=2, expires=8)'
    )
    assert render_record_line(EXAMPLE[3], "log") == (
        'memory.choose(id="e04", key="key_pick", selector="key_mode", '
        'options={"day": "key_a", "ni,ght)": "key_b"}, rev=5)'
    )
    assert render_record_line(EXAMPLE[1], "log") == (
        'memory.set(id="e02", key="key_b", value="say \\"hi\\", (then) \\\\ bye\\n\\u2028\u00e9", '
        "rev=3, starts=4)"
    )


def test_log_parser_accepts_spacing_and_any_argument_order() -> None:
    line = ' memory.set( rev = 2 ,value="amber-101",key="key_target",id="e01",expires=8 )  '
    assert parse_record_line(line, "log") == EXAMPLE[0]


def test_blank_lines_are_skipped() -> None:
    for style in ("json", "log"):
        lines = render_records(EXAMPLE[:2], style).split("\n")
        text = "\n" + lines[0] + "\n  \n\t\n" + lines[1] + "\n\n"
        assert parse_records(text, style) == EXAMPLE[:2]
    assert parse_records("", "json") == []


def test_render_record_line_matches_render_records() -> None:
    for style in ("json", "log"):
        assert [render_record_line(r, style) for r in EXAMPLE] == (
            render_records(EXAMPLE, style).split("\n")
        )
    rng = random.Random(5)
    assert [render_record_line(r, "prose", rng) for r in EXAMPLE] == (
        render_records(EXAMPLE, "prose", seed=5).split("\n")
    )


# ----------------------------------------------------------------------------- prose


def test_prose_example_line() -> None:
    lines = {render_record_line(EXAMPLE[0], "prose", random.Random(s)) for s in range(50)}
    assert (
        'user: From now on key_target is "amber-101" (note e01, revision 2, valid through tick 8).'
        in lines
    )


def test_every_op_has_three_phrasings() -> None:
    phrasings = _prose_phrasings()
    assert set(phrasings) == set(RECORD_KINDS)
    for op, options in phrasings.items():
        assert len(options) >= 3, op


@pytest.mark.parametrize("op", sorted(RECORD_KINDS))
def test_every_phrasing_keeps_every_field(op: str) -> None:
    """Each phrasing of each op, with and without optional fields."""
    samples = [r for r in EXAMPLE if r.op == op]
    for record in samples:
        for phrasing in _prose_phrasings()[op]:
            line = phrasing(record.to_dict())
            assert line.startswith("user: ")
            assert "\n" not in line
            assert line == line.strip()
            for fragment in field_fragments(record):
                assert fragment in line, (fragment, line)
    assert samples


def test_prose_mentions_validity_only_when_present() -> None:
    with_window = SetRecord(id="e01", key="k", value="v", rev=1, expires=8, starts=3)
    without = SetRecord(id="e01", key="k", value="v", rev=1)
    for phrasing in _prose_phrasings()["set"]:
        full, bare = phrasing(with_window.to_dict()), phrasing(without.to_dict())
        assert "tick 8" in full
        assert "tick 3" in full
        assert "tick" not in bare


@given(rs=short_lists, seed=st.integers(0, 2**32))
def test_prose_is_deterministic_and_keeps_every_field(rs: list[Record], seed: int) -> None:
    text = render_records(rs, "prose", seed)
    assert text == render_records(rs, "prose", seed)
    lines = text.splitlines()
    assert len(lines) == len(rs)
    for line, record in zip(lines, rs, strict=True):
        for fragment in field_fragments(record):
            assert fragment in line, (fragment, line)


def test_prose_varies_across_seeds() -> None:
    log = EXAMPLE * 3
    texts_by_seed = [render_records(log, "prose", seed) for seed in range(6)]
    assert len(set(texts_by_seed)) == len(texts_by_seed)
    # Each op shows more than one phrasing somewhere across seeds.
    starts = {line.split(" ")[1] for text in texts_by_seed for line in text.splitlines()}
    assert len(starts) > len(RECORD_KINDS)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(lambda: parse_records("user: hello", "prose"), "prose",  # type: ignore[arg-type]
                     id="prose-does-not-parse-back"),
        pytest.param(lambda: render_records(EXAMPLE, "yaml"), "style",  # type: ignore[arg-type]
                     id="unknown-style"),
    ],
)  # fmt: skip
def test_a_style_that_cannot_do_it_is_rejected(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- parse errors


def _with_bad_third_line(style: str, bad: str) -> str:
    good = render_records(EXAMPLE[:3], style).split("\n")  # type: ignore[arg-type]
    return "\n".join([good[0], good[1], bad, good[2]])


@pytest.mark.parametrize(
    ("style", "bad", "expected"),
    [
        ("json", '{"id":"e09","op":"set","key":"k"', r"bad JSON"),
        ("json", "not json at all", r"bad JSON"),
        ("json", "[1, 2]", r"expected a JSON object"),
        ("json", '{"id":"e09","op":"frobnicate"}', r"unknown op 'frobnicate'"),
        ("json", '{"id":"e09","key":"k"}', r"missing field 'op'"),
        (
            "json",
            '{"id":"e09","op":"set","key":"k","value":"v"}',
            r"set record: field rev: .*missing",
        ),
        ("json", '{"id":"e09","op":"tick","now":-1}', r"tick record: field now: "),
        ("json", '{"id":"e09","op":"tick","now":1,"rev":2}', r"field rev: .*extra"),
        (
            "json",
            '{"id":"e9","op":"choose","key":"k","selector":"s","options":{"a":"b c"},"rev":1}',
            r"field options\.a: .*pattern",
        ),
        ("log", 'memory.set(id="e09", key="k", value="v"', r"expected ',' or '\)'"),
        ("log", "print('hello')", r"expected a call"),
        ("log", 'memory.frobnicate(id="e09")', r"unknown function memory\.frobnicate"),
        ("log", 'notes.set(id="e09")', r"unknown function notes\.set"),
        ("log", 'memory.set(id="e09", key="k", value="v")', r"set record: field rev: .*missing"),
        ("log", 'memory.set(id="e09", key="k", value=v, rev=1)', r"argument value: bad JSON"),
        ("log", 'memory.set(id="e09", key="k", value="v", rev=1, rev=2)', r"rev: given twice"),
        ("log", 'memory.tick(id="e09", op="set", now=1)', r"op is the function name"),
        ("log", 'memory.tick(id="e09", now=1) # done', r"unexpected text"),
        ("log", 'memory.tick(id="e 9", now=1)', r"tick record: field id: .*pattern"),
        ("log", 'memory.add(id="e09", key="k", delta=3, rev=1.5)', r"add record: field rev: "),
    ],
)
def test_parse_errors_name_line_and_problem(style: str, bad: str, expected: str) -> None:
    text = _with_bad_third_line(style, bad)
    with pytest.raises(RenderParseError, match=r"^line 3: ") as caught:
        parse_records(text, style)  # type: ignore[arg-type]
    assert caught.value.line == 3
    assert re.search(expected, caught.value.reason), caught.value.reason
    assert isinstance(caught.value, ValueError)


def test_line_numbers_count_blank_lines() -> None:
    text = "\n\n\n\n" + 'memory.tick(id="t", now=1)\nmemory.tick(id="u")'
    with pytest.raises(RenderParseError, match=r"^line 6: tick record: field now"):
        parse_records(text, "log")


def test_parse_error_pickles() -> None:
    error = RenderParseError(4, "bad JSON")
    again = pickle.loads(pickle.dumps(error))
    assert (again.line, again.reason, str(again)) == (4, "bad JSON", "line 4: bad JSON")


def test_prose_phrasing_follows_the_record_not_the_variant() -> None:
    """A record both variants share, and the shared future, read the same in A and B;
    a record's seed is a function of its line alone (a renamed record's is its new
    line's: a seed kept from the source would name the source record)."""
    from audit.engine import phrasing_seeds
    from audit.engine._streaming import plan_variant
    from histories import PRESETS, generate, rename

    config = PRESETS["cca-pilot"].model_copy(update={"render": "prose"})
    for pair in generate(config)[::4]:
        lines: dict[str, dict[str, str]] = {}
        for variant in ("A", "B"):
            prefix, futures = plan_variant(pair, variant)
            chunks = [*prefix, *(c for chunks in futures.values() for c in chunks)]
            found: dict[str, str] = {}
            for view, _, _ in chunks:
                for record, line in zip(view.records, view.text.split("\n"), strict=True):
                    found[record.canonical_line] = line
            lines[variant] = found
        shared = lines["A"].keys() & lines["B"].keys()
        assert len(shared) > 30  # the distractors and the futures
        assert all(lines["A"][k] == lines["B"][k] for k in shared)
        renamed = rename(pair, 0)
        for records, renamed_records in zip(
            pair.variants.A.chunks, renamed.variants.A.chunks, strict=True
        ):
            crc = [zlib.crc32(r.canonical_line.encode()) for r in renamed_records]
            assert phrasing_seeds(renamed_records) == tuple(crc)
            assert phrasing_seeds(records) != phrasing_seeds(renamed_records)
