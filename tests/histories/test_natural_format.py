"""Natural records (text as written + annotation) and pair provenance in the pair format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from histories import SetRecord, render_records
from histories._io import load_pairs

_SHA = "0" * 64


def natural_pair(**changes: Any) -> dict[str, Any]:
    """A hand-written natural pair: two zones, the same offset now, another later."""

    def rule(rid: str, value: str, rev: int, text: str, **bounds: int) -> dict[str, Any]:
        return {"id": rid, "op": "set", "key": "office.utc_offset", "value": value,
                "rev": rev, **bounds, "text": text}  # fmt: skip

    pair: dict[str, Any] = {
        "pair_id": "tz-hand-0",
        "family": "tzdata",
        "query": ["office.utc_offset"],
        "variants": {
            "A": {
                "chunks": [
                    [
                        rule(
                            "o-0",
                            "+01:00",
                            1,
                            "office clock: zone Europe/Paris: UTC+01:00",
                            expires=99,
                        ),
                        rule(
                            "o-1",
                            "+02:00",
                            2,
                            "office clock: zone Europe/Paris: UTC+02:00",
                            starts=100,
                        ),
                        {"id": "c-0", "op": "tick", "now": 10, "text": "clock: t=10"},
                    ]
                ]
            },
            "B": {
                "chunks": [
                    [
                        rule("o-0", "+01:00", 1, "office clock: zone Africa/Lagos: UTC+01:00"),
                        {"id": "c-0", "op": "tick", "now": 10, "text": "clock: t=10"},
                    ]
                ]
            },
        },
        "futures": {
            "reveal": [[{"id": "c-1", "op": "tick", "now": 100, "text": "clock: t=100"}]],
            "override": [[rule("o-9", "+00:00", 9, "office clock: moved to UTC")]],
        },
        "provenance": {
            "source": "tzdata",
            "version": "tzdata 2026.6",
            "licence": "public domain",
            "A": {"file": "tzdata/zoneinfo/Europe/Paris", "sha256": _SHA, "item": "Europe/Paris"},
            "B": {"file": "tzdata/zoneinfo/Africa/Lagos", "sha256": _SHA, "item": "Africa/Lagos"},
            "edit": "the office's zone is Africa/Lagos instead of Europe/Paris",
        },
    }
    pair.update(changes)
    return pair


def validate(tmp_path: Path, *pairs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return subprocess.run(
        [sys.executable, "-m", "audit", "pairs", "validate", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_natural_pair_validates_and_keeps_its_text_and_provenance(tmp_path: Path):
    done = validate(tmp_path, natural_pair())
    assert done.returncode == 0, done.stderr
    assert "1 pairs OK (tzdata 1)" in done.stdout
    (pair,) = load_pairs(tmp_path / "pairs.jsonl")
    assert pair.provenance is not None
    assert pair.provenance.B.item == "Africa/Lagos"
    first = pair.prefix("A")[0]
    assert first.text == "office clock: zone Europe/Paris: UTC+01:00"
    # text is the last field of the canonical form, and the json rendering round-trips it
    assert first.canonical_json().endswith('"text":"office clock: zone Europe/Paris: UTC+01:00"}')
    assert json.loads(render_records([first], "json"))["text"] == first.text
    assert pair.gold is not None
    assert pair.gold.A.reveal != pair.gold.B.reveal


def test_a_natural_pair_with_a_record_without_text_is_refused_naming_it(tmp_path: Path):
    pair = natural_pair()
    del pair["futures"]["reveal"][0][0]["text"]
    done = validate(tmp_path, pair)
    assert done.returncode == 1
    assert "pairs.jsonl:1: futures.reveal.0.0.text: a natural pair (tzdata) needs the text" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_bad_provenance_is_named_by_field(tmp_path: Path):
    pair = natural_pair()
    pair["provenance"]["A"]["sha256"] = "not-a-digest"
    done = validate(tmp_path, pair)
    assert done.returncode == 1
    assert "pairs.jsonl:1: provenance.A.sha256:" in done.stderr


def test_records_without_text_keep_their_canonical_bytes():
    record = SetRecord(id="e01", key="k", value="v", rev=1)
    assert record.canonical_json() == '{"id":"e01","op":"set","key":"k","value":"v","rev":1}'


def test_prose_shows_a_natural_record_as_its_own_words():
    record = SetRecord(id="o-1", key="k", value="+02:00", rev=2, text="zone Paris:\nUTC+02:00")
    assert render_records([record], "prose") == "(o-1) zone Paris: UTC+02:00"
