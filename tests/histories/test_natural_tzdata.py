"""The tzdata pack: real zone rules from PyPI tzdata, checked against zoneinfo."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from functools import cache
from importlib import resources
from io import BytesIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histories import LogIndex, Pair, TickRecord, transform
from histories._io import load_pairs
from histories.natural import tzdata
from tests._cli import audit
from tests._rows import result_csv


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tz") / "data"
    done = audit("generate", "--source", "tzdata", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


@cache
def zone(name: str) -> ZoneInfo:
    """The zone straight from the tzdata package's file (never the system's)."""
    data = resources.files("tzdata").joinpath("zoneinfo", *name.split("/")).read_bytes()
    return ZoneInfo.from_file(BytesIO(data), key=name)


def offset(name: str, ts: int) -> str:
    return tzdata.format_offset(datetime.fromtimestamp(ts, zone(name)).utcoffset())


def test_generate_gives_100_verified_pairs_byte_for_byte(dataset: Path, tmp_path: Path):
    again = audit("generate", "--source", "tzdata", "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    for name in ("pairs.jsonl", "manifest.json"):
        assert (dataset / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["n_pairs"] >= 100
    assert manifest["source_version"].startswith("tzdata ")
    assert manifest["skipped"]["zone with no future transition in the horizon"] > 0
    checked = audit("pairs", "validate", str(dataset / "pairs.jsonl"))
    assert checked.returncode == 0, checked.stderr
    assert f"{manifest['n_pairs']} pairs OK" in checked.stdout


def test_every_stated_answer_is_zoneinfos(dataset: Path):
    for pair in load_pairs(dataset / "pairs.jsonl"):
        assert pair.provenance is not None
        assert pair.gold is not None
        (reveal,) = pair.future("reveal")
        assert isinstance(reveal, TickRecord)
        for variant in ("A", "B"):
            name = pair.provenance.A.item if variant == "A" else pair.provenance.B.item
            gold = pair.gold.of(variant)
            assert gold.current == {"office.utc_offset": offset(name, tzdata.REFERENCE)}
            assert gold.reveal == {"office.utc_offset": offset(name, reveal.now)}


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_compiled_rules_are_zoneinfo_at_any_instant_of_the_horizon(
    dataset: Path, data: st.DataObject
):
    pairs = _pairs(dataset)
    pair = data.draw(st.sampled_from(pairs))
    ts = data.draw(st.integers(tzdata.REFERENCE, tzdata.REFERENCE + tzdata.HORIZON - 1))
    assert pair.provenance is not None
    for variant, ref in (("A", pair.provenance.A), ("B", pair.provenance.B)):
        records = [*pair.prefix(variant), TickRecord(id="check-tick", now=ts, text="clock")]
        answer = LogIndex(records).resolve(pair.query)
        assert answer == {"office.utc_offset": offset(ref.item, ts)}, (pair.pair_id, ts)


_LOADED: dict[Path, list[Pair]] = {}


def _pairs(dataset: Path) -> list[Pair]:
    if dataset not in _LOADED:
        _LOADED[dataset] = load_pairs(dataset / "pairs.jsonl")
    return _LOADED[dataset]


def test_revalue_does_not_apply_to_natural_pairs(dataset: Path):
    pair = _pairs(dataset)[0]
    assert transform(pair, "revalue", 3) == []
    assert len(transform(pair, "rename", 2)) == 2


def test_audit_run_reads_tzdata_pairs(dataset: Path, tmp_path: Path):
    few = tmp_path / "few.jsonl"
    lines = (dataset / "pairs.jsonl").read_text().splitlines()[:3]
    few.write_text("".join(line + "\n" for line in lines))
    run_dir = tmp_path / "run"
    done = audit(
        "run", "--pairs", str(few), "--conditions", "frontier,full",
        "--transforms", "identity,rename:2,permute:2,revalue:2", "--out", str(run_dir), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with result_csv(run_dir).open() as handle:
        rows = list(csv.DictReader(handle))
    transforms = {row["transform"] for row in rows}
    assert {"identity", "rename", "permute"} <= transforms
    assert "revalue" not in transforms
    full = [r for r in rows if r["condition"] == "full" and r["transform"] == "identity"]
    assert full
    assert all(r["correct"] in ("True", "true", "1") for r in full)


def test_bad_source_options_are_one_line_errors(tmp_path: Path):
    out = str(tmp_path / "x")
    for args, says in [
        (["--source", "tzdata", "extra.json"], "give no FILE"),
        (["--source", "tzdata", "--labels", "words"], "--labels applies to synthetic"),
        (["--source", "nope"], "unknown source 'nope'"),
        (["--preset", "cca-pilot", "some.json"], "give --source NAME"),
    ]:
        done = audit("generate", *args, "--out", out)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr
        assert "Traceback" not in done.stderr
