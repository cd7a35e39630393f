"""`audit generate`, `audit families`, `audit pairs validate`, and pair-file error paths."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audit.cli import app
from histories import FAMILIES, PRESETS, generate
from histories._io import PairFileError, load_pairs

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_generate_pilot_writes_pairs_and_manifest(tmp_path: Path):
    out = tmp_path / "pilot"
    result = run("generate", "--preset", "cca-pilot", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "84 verified pairs" in result.output  # 14 a family: a powered default
    lines = (out / "pairs.jsonl").read_text().splitlines()
    assert len(lines) == 84
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["seed"] == 0
    assert manifest["config"]["distractors"] == 32
    assert manifest["config"]["labels"] == "words"
    assert manifest["pairs_per_family"] == dict.fromkeys(
        ["rollback", "expiry", "choice_switch", "late_reference", "tombstone_replay",
         "mixed_alias_expiry"], 14)  # fmt: skip
    body = (out / "pairs.jsonl").read_bytes()
    assert manifest["pairs_sha256"] == hashlib.sha256(body).hexdigest()
    assert [p.to_json() for p in generate(PRESETS["cca-pilot"])] == lines


def test_same_command_and_seed_give_identical_bytes(tmp_path: Path):
    args = ["generate", "--families", "all", "--pairs-per-family", "3", "--seed", "11"]
    assert run(*args, "--out", str(tmp_path / "a")).exit_code == 0
    assert run(*args, "--out", str(tmp_path / "b"), "--workers", "2").exit_code == 0
    for name in ("pairs.jsonl", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = run("generate", "--families", "all", "--pairs-per-family", "3", "--seed", "12",
                "--out", str(tmp_path / "c"))  # fmt: skip
    assert other.exit_code == 0
    assert (tmp_path / "a" / "pairs.jsonl").read_bytes() != (
        tmp_path / "c" / "pairs.jsonl"
    ).read_bytes()


def test_existing_dataset_is_never_silently_replaced(tmp_path: Path):
    out = str(tmp_path / "d")
    assert run("generate", "--preset", "cca-pilot", "--out", out).exit_code == 0
    again = run("generate", "--preset", "cca-pilot", "--out", out)
    assert again.exit_code == 0
    assert "unchanged" in again.output
    before = (tmp_path / "d" / "pairs.jsonl").read_bytes()
    different = run("generate", "--preset", "cca-pilot", "--seed", "5", "--out", out)
    assert different.exit_code == 2
    assert "--force" in different.output
    assert (tmp_path / "d" / "pairs.jsonl").read_bytes() == before
    forced = run("generate", "--preset", "cca-pilot", "--seed", "5", "--out", out, "--force")
    assert forced.exit_code == 0
    assert (tmp_path / "d" / "pairs.jsonl").read_bytes() != before


def test_generate_options_reach_the_pairs(tmp_path: Path):
    out = tmp_path / "o"
    result = run("generate", "--families", "expiry,dormant_rule", "--pairs-per-family", "2",
                 "--distractors", "10", "--chunk-size", "3", "--render", "log",
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    pairs = load_pairs(out / "pairs.jsonl")
    assert [p.family for p in pairs] == ["expiry", "expiry", "dormant_rule", "dormant_rule"]
    assert all(p.render == "log" and p.chunk_size == 3 for p in pairs)
    assert all(max(len(c) for c in p.variants.A.chunks) <= 3 for p in pairs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--families", "rollback,nope", "--pairs-per-family", "1"], "unknown family 'nope'"),
        (["--preset", "nope"], "unknown preset 'nope'; known: cca-pilot"),
        (["--families", "rollback"], "--pairs-per-family is required"),
        ([], "give --preset NAME or --families LIST"),
        (["--preset", "cca-pilot", "--render", "html"], "--render"),
        (["--preset", "cca-pilot", "--labels", "pretty"], "--labels"),
        (["--preset", "cca-pilot", "--families", "all"], "not both"),
    ],
)
def test_generate_bad_input_is_named_and_writes_nothing(tmp_path: Path, args, message):
    out = tmp_path / "never"
    result = run("generate", *args, "--out", str(out))
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


def test_unknown_family_lists_the_known_ones(tmp_path: Path):
    result = run(
        "generate", "--families", "nope", "--pairs-per-family", "1", "--out", str(tmp_path)
    )
    for name in FAMILIES:
        assert name in result.output


def test_families_lists_all_twelve():
    result = run("families")
    assert result.exit_code == 0
    flat = " ".join(result.output.split())  # summaries wrap at the terminal's width
    for name, family in FAMILIES.items():
        assert name in result.output
        assert " ".join(family.summary.split()) in flat
    assert len(FAMILIES) >= 12


# ---- pair files: every error names file, line and field ---------------------------------


@pytest.fixture
def good_lines() -> list[str]:
    return [p.to_json() for p in generate(PRESETS["cca-pilot"])[:4]]


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def mutate(line: str, change) -> str:
    data = json.loads(line)
    change(data)
    return json.dumps(data)


def first_record(data):
    return data["variants"]["A"]["chunks"][0][0]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: first_record(d).update(op="frobnicate"), "variants.A.chunks.0.0", "frobnicate"),
        (lambda d: first_record(d).pop("id"), "variants.A.chunks.0.0", "Field required"),
        (lambda d: d.pop("query"), "query", "Field required"),
        (lambda d: d["variants"]["A"]["chunks"][0].append(
            dict(d["variants"]["A"]["chunks"][0][0])), "variants.A.chunks.0.8.id", "duplicate record id"),
        (lambda d: d["gold"]["B"].update(reveal=d["gold"]["A"]["reveal"]), "gold.B.reveal", "E_q gives"),
        (lambda d: d["futures"].update(reveal=d["futures"]["override"]), "property reveal-answers-differ",
         "reveal answers are equal"),
        (lambda d: d.update(extra_field=1), "extra_field", "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_invalid_pair_line_names_line_and_field(tmp_path, good_lines, change, field, message):
    lines = list(good_lines)
    lines[2] = mutate(lines[2], change)
    path = write(tmp_path, lines)
    with pytest.raises(PairFileError) as caught:
        load_pairs(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:3: ")
    assert field in text
    assert message in text
    result = run("pairs", "validate", str(path))
    assert result.exit_code == 1
    assert f"{path}:3:" in result.output


def test_hand_written_pair_without_gold_gets_it_computed(tmp_path, good_lines):
    line = mutate(good_lines[0], lambda d: d.pop("gold"))
    pair = load_pairs(write(tmp_path, [line]))[0]
    assert pair.gold is not None
    assert pair.gold.A.reveal != pair.gold.B.reveal


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json\n", ":1: not valid JSON"),
        ("[1, 2]\n", ":1: a pair line must be a JSON object"),
        ("\n\n", "no pairs in file"),
    ],
)
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(PairFileError, match=message):
        load_pairs(path)


def test_a_line_cut_short_is_said_by_its_file_line_and_character(tmp_path, good_lines):
    """json's own position counted the line's newline as a second line: a pair line cut
    short read "trunc.jsonl:3: not valid JSON (Expecting ':' delimiter: line 2 column 1
    (char 3130))", two line numbers for one line (a new user's finding)."""
    cut = good_lines[1][: len(good_lines[1]) // 2].rstrip()
    cut = cut[: cut.rindex('"') + 1]  # ends on a key: the parser then wants its ':'
    path = write(tmp_path, [good_lines[0], cut, good_lines[2]])
    with pytest.raises(PairFileError) as error:
        load_pairs(path)
    said = str(error.value)
    assert ":2: not valid JSON (" in said
    assert "at the end of the line: cut short?" in said
    assert "line 2" not in said
    broken = good_lines[0].replace('":', '"', 1)  # a key without its ':'
    with pytest.raises(PairFileError, match=r":1: not valid JSON \(Expecting ':' delimiter at "
                       r"character \d+ of the line\)"):  # fmt: skip
        load_pairs(write(tmp_path, [broken]))


def test_duplicate_pair_ids_and_unreadable_files(tmp_path, good_lines):
    path = write(tmp_path, [good_lines[0], good_lines[1], good_lines[0]])
    with pytest.raises(
        PairFileError, match=r":3: pair_id: duplicate pair id .* \(first on line 1\)"
    ):
        load_pairs(path)
    with pytest.raises(PairFileError, match="cannot read pair file"):
        load_pairs(tmp_path / "missing.jsonl")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PairFileError, match="not UTF-8"):
        load_pairs(binary)


def test_validate_accepts_a_generated_file(tmp_path):
    out = tmp_path / "v"
    assert (
        run("generate", "--families", "all", "--pairs-per-family", "2", "--out", str(out)).exit_code
        == 0
    )
    result = run("pairs", "validate", str(out / "pairs.jsonl"))
    assert result.exit_code == 0
    assert "24 pairs OK" in result.output


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_generated_files_follow_the_umask(tmp_path: Path, umask: int):
    """Pair files are an input others read: created like any file, not owner-only."""
    old = os.umask(umask)
    try:
        result = run("generate", "--preset", "cca-pilot", "--out", str(tmp_path / "p"))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    for name in ("pairs.jsonl", "manifest.json"):
        mode = stat.S_IMODE((tmp_path / "p" / name).stat().st_mode)
        assert mode == 0o666 & ~umask, (name, oct(mode))
