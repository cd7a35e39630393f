"""Every transform the natural preset runs keeps a natural pair a pair: E_q verifies it,
and its source's own interpreter still agrees (zoneinfo, the written tau2 policies,
the MultiWOZ annotation)."""

from __future__ import annotations

import json
import re
import zipfile
from datetime import datetime
from functools import cache
from importlib import resources
from io import BytesIO
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.cli._run import PRESET_TRANSFORMS
from histories import (
    FAMILIES,
    GenerationConfig,
    LogIndex,
    Pair,
    TickRecord,
    TransformName,
    transform,
)
from histories._generate import build_pair
from histories._io import parse_pair_line
from histories._pair import check_pair
from histories._transforms import apply_mapping, pair_labels
from histories.natural import multiwoz, tau2, tau2_retail, tzdata
from histories.natural._preset import committed_lines
from tests.histories.test_natural_multiwoz import SPLIT

PACKS = ("multiwoz", "tau2", "tau2-retail", "tzdata")
KINDS = [
    cast(TransformName, spec.split(":")[0])
    for spec in PRESET_TRANSFORMS["natural"].split(",")
    if spec != "identity"
]


@cache
def lines(pack: str) -> tuple[str, list[str]]:
    return committed_lines(pack)  # type: ignore[arg-type]


@cache
def tz_pairs() -> list[Pair]:
    return tzdata.derive(0, 8).pairs


def source_pair(pack: str, index: int) -> Pair:
    if pack == "tzdata":
        pairs = tz_pairs()
        return pairs[index % len(pairs)]
    where, found = lines(pack)
    index %= len(found)
    return parse_pair_line(found[index], where, index + 1)


@cache
def split() -> dict[str, Any] | None:
    if not SPLIT.exists():
        return None  # the MultiWOZ check needs the shared data folder (CI has it)
    with zipfile.ZipFile(SPLIT) as archive:
        return json.loads(archive.read("test.json"))  # type: ignore[no-any-return]


def labels_back(pair: Pair) -> Pair:
    """The transformed pair under its source's labels (values, order, revisions kept)."""
    assert pair.transform is not None
    back = pair.transform.inverse_mapping()
    return apply_mapping(pair, {label: back.get(label, label) for label in pair_labels(pair)})


def values(pair: Pair, variant: str) -> dict[str, str]:
    return {r.key: r.value for r in pair.prefix(variant) if r.op == "set"}  # type: ignore[union-attr, arg-type]


def value_map(source: Pair, moved: Pair) -> dict[str, str]:
    """Old value -> new value, from the records the transform changed (entity)."""
    found: dict[str, str] = {}
    for variant in ("A", "B"):
        for branch in ("reveal", "override"):  # one history: its ids are unique
            before = {r.id: r for r in source.history(variant, branch)}  # type: ignore[arg-type]
            for record in moved.history(variant, branch):  # type: ignore[arg-type]
                old = before[record.id]
                if record.op == "set" and old.value != record.value:  # type: ignore[union-attr]
                    found[old.value] = record.value  # type: ignore[union-attr]
    return found


def _offset(name: str, ts: int) -> str:
    data = resources.files("tzdata").joinpath("zoneinfo", *name.split("/")).read_bytes()
    zone = ZoneInfo.from_file(BytesIO(data), key=name)
    return tzdata.format_offset(datetime.fromtimestamp(ts, zone).utcoffset())


def check_source(pack: str, source: Pair, moved: Pair) -> None:
    """The source's own interpreter on the transformed pair (labels read back)."""
    back = labels_back(moved)
    assert back.gold is not None
    assert source.provenance is not None
    if pack == "tzdata":
        (tick,) = [r for r in back.future("reveal") if isinstance(r, TickRecord)]
        for variant, ref in (("A", source.provenance.A), ("B", source.provenance.B)):
            gold = back.gold.of(variant)  # type: ignore[arg-type]
            assert gold.current == {tzdata.QUERY_KEY: _offset(ref.item, tzdata.REFERENCE)}
            assert gold.reveal == {tzdata.QUERY_KEY: _offset(ref.item, tick.now)}
    elif pack.startswith("tau2"):
        observed_as_said(back)
    if pack == "tau2":
        health = any(r.id == "f.insurance" for r in back.future("reveal"))
        for variant in ("A", "B"):
            seen = values(back, variant)
            record = {f: seen[f"res.{f}"] for f in ("cabin", "insurance", "created_at")}
            want = tau2.YES if tau2.eligible(record, "health" if health else "plan") else tau2.NO
            gold = back.gold.of(variant)  # type: ignore[arg-type]
            assert gold.reveal["cancel.refund"] == want
            assert gold.current["res.destination"] == seen["res.destination"]
            # an airport renamed is renamed in the flights too
            flights = json.loads(seen["res.flights"])
            assert seen["res.destination"] in {f["destination"] for f in flights}
    elif pack == "tau2-retail":
        kind = back.query[0].split(".")[0]
        for variant in ("A", "B"):
            seen = values(back, variant)
            granted = tau2_retail.allowed({"status": seen["order.status"]})
            gold = back.gold.of(variant)  # type: ignore[arg-type]
            assert gold.reveal[back.query[0]] == tau2_retail.outcome(kind, granted)
            assert gold.current["order.user_id"] == seen["user.user_id"]
    elif pack == "multiwoz":
        change = value_map(source, back)
        dialogues = split()
        if dialogues is not None:  # the dialogue's own annotation at the cut turn
            turn = source.provenance.A.turn
            assert turn is not None
            metadata = dialogues[source.provenance.A.item]["log"][2 * turn + 1]["metadata"]
            state = multiwoz._state(metadata)
            replay = LogIndex(back.prefix("A")).resolve(sorted(state))
            assert replay == {key: change.get(value, value) for key, value in state.items()}
        said = " ".join(r.text or "" for r in source.all_records())
        texts = " ".join(r.text or "" for r in back.all_records())
        for old, new in change.items():  # what the words said, they say renamed
            if word(old).search(said):
                assert word(new).search(texts), (old, new)
                assert not word(old).search(texts), (old, new)


def observed_as_said(pair: Pair) -> None:
    """Each tau2 observation record's value is what its words show (``"field": value``)."""
    for variant in ("A", "B"):
        for record in pair.prefix(variant):  # type: ignore[arg-type]
            assert record.text is not None
            assert record.op == "set"
            ((_, raw),) = json.loads("{" + record.text.split(" -> ", 1)[1] + "}").items()
            shown = raw if isinstance(raw, str) else json.dumps(raw, separators=(",", ":"))
            assert shown == record.value, record  # type: ignore[union-attr]


def word(value: str) -> re.Pattern[str]:
    flags = re.IGNORECASE if value == value.lower() else 0
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", flags)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pack", PACKS)
@settings(max_examples=8, deadline=None)
@given(index=st.integers(0, 10_000), seed=st.integers(0, 2**16))
def test_every_transformed_natural_pair_still_verifies(
    pack: str, kind: TransformName, index: int, seed: int
):
    source = source_pair(pack, index)
    for moved in transform(source, kind, 1, seed=seed):
        assert moved.gold is not None
        assert check_pair(moved) == moved.gold  # E_q: one answer now, two after the reveal
        check_source(pack, source, moved)


def test_entity_applies_where_the_source_names_entities():
    for pack in ("multiwoz", "tau2"):
        found = [len(transform(source_pair(pack, i), "entity", 2)) for i in range(20)]
        assert sum(found) > 0
    for pack in ("tau2-retail", "tzdata"):
        assert all(transform(source_pair(pack, i), "entity", 2) == [] for i in range(5))
    config = GenerationConfig(families=["rollback"], pairs_per_family=1)
    synthetic = build_pair(FAMILIES["rollback"], 0, config)
    assert transform(synthetic, "entity", 2) == []


def test_entity_changes_values_not_labels_or_order():
    source = source_pair("multiwoz", 28)
    (moved,) = transform(source, "entity", 1)
    assert [r.id for r in moved.prefix("A")] == [r.id for r in source.prefix("A")]
    assert moved.query == source.query
    change = value_map(source, moved)
    assert change  # something was renamed, and never onto a value the pair already had
    assert not set(change.values()) & {v for _, v in values(source, "A").items()}
    with pytest.raises(ValueError, match="already transformed"):
        transform(moved, "entity", 1)
