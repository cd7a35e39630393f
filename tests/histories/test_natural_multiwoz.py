"""The MultiWOZ pack: real dialogues, one slot edited in text and annotation."""

from __future__ import annotations

import gzip
import json
import os
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from histories import LogIndex, Pair
from histories._io import load_pairs
from histories.natural import manifest_bytes, multiwoz
from tests._cli import audit

SPLIT = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multiwoz21" / "test.json.zip"
)
PACK = resources.files("histories.natural").joinpath(multiwoz.PACK)


def need_split() -> Path:
    if not SPLIT.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{SPLIT} is missing: CI has the shared data folder beside the clone")
        pytest.skip(
            f"the MultiWOZ 2.1 test split is not at {SPLIT} (no shared data folder beside the repository)"
        )
    return SPLIT


@pytest.fixture(scope="module")
def split() -> dict[str, Any]:
    with zipfile.ZipFile(need_split()) as archive:
        return json.loads(archive.read("test.json"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> list[Pair]:
    path = tmp_path_factory.mktemp("pack") / "pairs.jsonl"
    path.write_bytes(gzip.decompress(PACK.joinpath("pairs.jsonl.gz").read_bytes()))
    return load_pairs(path)


def test_the_committed_pack_is_re_derived_from_the_split_byte_for_byte():
    dataset = multiwoz.derive(need_split())
    body, manifest = manifest_bytes(dataset, seed=0, chunk_size=8)
    assert gzip.decompress(PACK.joinpath("pairs.jsonl.gz").read_bytes()) == body
    assert PACK.joinpath("manifest.json").read_bytes() == manifest
    assert len(dataset.pairs) >= 300
    assert "MIT" in PACK.joinpath("NOTICE").read_text()


def test_every_pair_replays_the_dialogues_own_annotation(pack: list[Pair], split: dict[str, Any]):
    for pair in pack:
        provenance = pair.provenance
        assert provenance is not None
        assert provenance.A.turn is not None
        dialogue = split[provenance.A.item]
        metadata = dialogue["log"][2 * provenance.A.turn + 1]["metadata"]
        annotated = {
            (f"{d}.book.{s}" if part == "book" else f"{d}.{s}"): v
            for d, parts in metadata.items()
            for part in ("semi", "book")
            for s, v in parts[part].items()
            if s != "booked" and v.strip().lower() not in multiwoz.UNSET
        }
        assert LogIndex(pair.prefix("A")).resolve(sorted(annotated)) == annotated
        user_texts = {t["text"] for t in dialogue["log"][0::2]}
        assert {r.text for r in pair.prefix("A")} <= user_texts | {"(silence)"}


def test_b_differs_from_a_in_one_slot_and_its_turn_only(pack: list[Pair]):
    for pair in pack:
        a = {r.id: r for r in pair.prefix("A")}
        b = {r.id: r for r in pair.prefix("B")}
        assert a.keys() == b.keys()
        changed_values = [rid for rid in a if a[rid].value != b[rid].value]  # type: ignore[union-attr]
        assert len(changed_values) == 1
        edited = a[changed_values[0]]
        new_value = b[changed_values[0]].value  # type: ignore[union-attr]
        turn = edited.id.split(".")[0]
        assert all(a[rid].text == b[rid].text for rid in a if not rid.startswith(turn + "."))
        # B's words are A's with a span that spells the old value, and only it, replaced
        old_words = edited.value.split(" ")  # type: ignore[union-attr]
        a_words = (edited.text or "").split(" ")
        b_words = (b[changed_values[0]].text or "").split(" ")
        assert any(
            [w.lower() for w in a_words[i : i + len(old_words)]] == [w.lower() for w in old_words]
            and [*a_words[:i], *new_value.split(" "), *a_words[i + len(old_words) :]] == b_words
            for i in range(len(a_words))
        ), (pair.pair_id, edited.text, b[changed_values[0]].text)
        assert pair.gold is not None
        assert pair.gold.A.current == pair.gold.B.current


def test_generate_reads_a_json_file_and_counts_bad_dialogues(
    tmp_path: Path, split: dict[str, Any], pack: list[Pair]
):
    some = dict(list(sorted(split.items()))[:40])
    broken = json.loads(json.dumps(some[sorted(some)[0]]))
    del broken["log"][1]["metadata"]
    some["BROKEN.json"] = broken
    some["SHORT.json"] = {"goal": {}, "log": []}
    # a dialogue that gives a pair, with its spans pointed at other words than the
    # values they annotate
    assert "MUL0260" in {p.provenance.A.item for p in pack}  # type: ignore[union-attr]
    spans = json.loads(json.dumps(split["MUL0260"]))
    for turn in spans["log"][0::2]:
        turn["span_info"] = [[*info[:3], 0, 0] for info in turn.get("span_info", [])]
    some["SPANS.json"] = spans
    source = tmp_path / "dialogues.json"
    source.write_text(json.dumps(some))
    out = tmp_path / "out"
    done = audit("generate", "--source", "multiwoz", str(source), "--out", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["skipped"]["missing or inconsistent annotation"] == 1
    assert (
        manifest["skipped"]["inconsistent annotation: no decisive slot's span spells its value"]
        >= 1
    )
    assert manifest["skipped"]["no slot whose value a later turn could make decisive"] > 0
    assert sum(manifest["skipped"].values()) + manifest["n_pairs"] == 43
    assert "SPANS.json" not in {p.provenance.A.item for p in load_pairs(out / "pairs.jsonl")}  # type: ignore[union-attr]
    assert audit("pairs", "validate", str(out / "pairs.jsonl")).returncode == 0


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not json", "not MultiWOZ JSON"),
        (b"[1, 2]", "not MultiWOZ JSON"),
        (json.dumps({"D1": {"log": []}}).encode(), "no usable pair"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, content: bytes, says: str):
    source = tmp_path / "bad.json"
    source.write_bytes(content)
    done = audit("generate", "--source", "multiwoz", str(source), "--out", str(tmp_path / "o"))
    assert done.returncode in (1, 2)
    assert says in done.stderr
    assert str(source) in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()


def test_multiwoz_needs_a_file(tmp_path: Path):
    done = audit("generate", "--source", "multiwoz", "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert "give one" in done.stderr
