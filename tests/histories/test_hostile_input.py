"""Hostile pair files: nothing but clear validation errors, bounded in time and memory."""

from __future__ import annotations

import contextlib
import json
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histories import PRESETS, generate
from histories._io import MAX_LINE_BYTES, PairFileError, load_pairs, parse_pair_line

GOOD = generate(PRESETS["cca-pilot"])[0].to_json()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=2000))
def test_random_bytes_give_only_pair_file_errors(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "pairs.jsonl"
    path.write_bytes(data)
    try:
        load_pairs(path)
    except PairFileError as error:
        assert str(path) in str(error)  # noqa: PT017 (raising is optional here)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_random_json_gives_only_pair_file_errors(value):
    with pytest.raises(PairFileError):
        parse_pair_line(json.dumps(value), "pairs.jsonl", 7)


def _mutations(draw_path, value):
    data = json.loads(GOOD)
    node = data
    for step in draw_path[:-1]:
        if isinstance(node, dict) and node:
            node = node[sorted(node)[step % len(node)]]
        elif isinstance(node, list) and node:
            node = node[step % len(node)]
    if isinstance(node, dict) and node:
        node[sorted(node)[draw_path[-1] % len(node)]] = value
    elif isinstance(node, list) and node:
        node[draw_path[-1] % len(node)] = value
    return data


@settings(max_examples=400, deadline=None)
@given(path=st.lists(st.integers(0, 50), min_size=1, max_size=7), value=json_values)
def test_mutated_real_pairs_validate_or_fail_clearly(path, value):
    line = json.dumps(_mutations(path, value))
    try:
        pair = parse_pair_line(line, "pairs.jsonl", 3)
    except PairFileError as error:
        assert str(error).startswith("pairs.jsonl:3: ")  # noqa: PT017
    else:
        assert pair.gold is not None  # accepted only if it still verifies


def test_deeply_nested_json_is_refused_quickly():
    deep = "[" * 200_000 + "]" * 200_000
    started = time.perf_counter()
    with pytest.raises(PairFileError, match=r"not valid JSON|must be a JSON object"):
        parse_pair_line(deep, "pairs.jsonl", 1)
    assert time.perf_counter() - started < 5


def test_oversized_lines_are_refused_before_parsing(tmp_path: Path):
    path = tmp_path / "huge.jsonl"
    path.write_text('{"pair_id": "' + "x" * (MAX_LINE_BYTES + 10) + '"}\n')
    tracemalloc.start()
    with pytest.raises(PairFileError, match="longer than"):
        load_pairs(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * MAX_LINE_BYTES


def test_a_huge_but_valid_pair_is_bounded(tmp_path: Path):
    data = json.loads(GOOD)
    chunk = data["variants"]["A"]["chunks"][0]
    many = [dict(chunk[0], id=f"x{i}", key=f"noise_big{i}") for i in range(20_000)]
    data["variants"]["A"]["chunks"].append(many)
    started = time.perf_counter()
    with contextlib.suppress(PairFileError):
        parse_pair_line(json.dumps(data), "pairs.jsonl", 1)
    assert time.perf_counter() - started < 30


def test_plugins_are_never_imported_from_a_pair_file(tmp_path: Path, monkeypatch):
    # a pair file can name a family, but a family is a label: no code is loaded from it
    import sys

    data = json.loads(GOOD)
    data["family"] = "os.system"
    pair = parse_pair_line(json.dumps(data), "pairs.jsonl", 1)
    assert pair.family == "os.system"
    data["family"] = "evil:Module"
    parse_pair_line(json.dumps(data), "pairs.jsonl", 1)
    assert "evil" not in sys.modules


def test_a_file_without_line_breaks_is_refused_after_the_limit():
    """/dev/zero has no line break: the limit holds while reading, not after."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    tracemalloc.start()
    with pytest.raises(PairFileError, match=r"/dev/zero:1: line longer than"):
        load_pairs("/dev/zero")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 3 * MAX_LINE_BYTES


def test_the_validate_command_on_dev_zero_ends_in_one_line():
    import subprocess
    import sys

    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    result = subprocess.run(
        [sys.executable, "-m", "audit", "pairs", "validate", "/dev/zero"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1  # the check failed
    assert result.stderr.strip() == f"error: /dev/zero:1: line longer than {MAX_LINE_BYTES} bytes"


def test_invalid_utf8_names_its_line(tmp_path: Path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + b'{"pair_id": "caf\xe9"}\n')
    with pytest.raises(PairFileError, match=r"pairs.jsonl:2: not UTF-8 text \(byte 17"):
        load_pairs(path)


def test_a_key_given_twice_is_refused():
    """Two ``gold`` objects: json keeps the last, another parser the first; refuse."""
    data = json.loads(GOOD)
    twice = json.dumps(data)[:-1] + ', "gold": ' + json.dumps(data["gold"]) + "}"
    assert json.loads(twice) == data  # the standard parser would accept it silently
    with pytest.raises(PairFileError, match=r"pairs.jsonl:4: duplicate key 'gold'"):
        parse_pair_line(twice, "pairs.jsonl", 4)
    nested = json.dumps(data).replace('"variants": {', '"variants": {"A": null, ', 1)
    with pytest.raises(PairFileError, match="duplicate key 'A'"):
        parse_pair_line(nested, "pairs.jsonl", 4)


def test_a_number_past_the_digit_limit_names_its_line(tmp_path: Path):
    """Python refuses to parse an integer of more than 4300 digits (a ValueError, not a
    JSON error): the pair file is refused with its line, by every command that reads it."""
    import subprocess
    import sys

    path = tmp_path / "pairs.jsonl"
    path.write_text(GOOD + "\n" + '{"pair_id": ' + "7" * 5000 + "}\n")
    with pytest.raises(PairFileError, match=r"pairs.jsonl:2: "):
        load_pairs(path)
    for args, code in (
        (["pairs", "validate", str(path)], 1),  # validate: the check failed
        (["run", "--pairs", str(path), "--conditions", "frontier", "--quiet",
          "--out", str(tmp_path / "run")], 2),  # run: bad input
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "audit", *args], capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == code, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: {path}:2: "), result.stderr
