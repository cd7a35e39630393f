"""The IANA time-zone pack: real, government-decreed offset rules from PyPI ``tzdata``.

A pair is two zones with the same UTC offset at the reference instant and different
offsets later: variant A is the office's clock under one zone's rules, B under the
other's.  Each rule period becomes one ``set`` of ``office.utc_offset`` valid from
the period's first second (``starts``) to its last (``expires``), later periods at
higher revisions, so E_q's clock rules are the zone's rules.  The reveal future
advances the clock to the first instant at which the two zones disagree; the
override future is the office moving to UTC at that instant.  Other zones' rules
are the shared distractors.

The zone files are read from the ``tzdata`` package, never from the system, and
the standard library's ``zoneinfo`` is the independent check: every answer a pair
states is what ``zoneinfo`` gives for that zone at that instant, or the pair is
dropped and counted.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import metadata, resources
from io import BytesIO
from zoneinfo import ZoneInfo

from histories._pair import Futures, Pair, Provenance, SourceRef, Variant, Variants
from histories._records import Record, SetRecord, TickRecord
from histories.natural._pack import NaturalDataset, NaturalSourceError, sha256_hex, slot_chunks

SOURCE = "tzdata"
LICENCE = "IANA time zone database (via PyPI tzdata): public domain"
REFERENCE = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
"""The 'now' of every pair: fixed, so the same tzdata version gives the same bytes."""
HORIZON = 366 * 86400
"""Rules are compiled for one year after the reference instant."""
_STEP = 6 * 3600
"""Offsets are sampled this often, then each change is bisected to the second."""
QUERY_KEY = "office.utc_offset"
DISTRACTOR_ZONES = 8
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:\-]")


@dataclass(frozen=True)
class Period:
    """One stretch of constant offset: ``start`` (None: before the reference) to ``end``."""

    start: int | None
    end: int | None
    offset: str
    abbreviation: str
    dst: bool


@dataclass(frozen=True)
class Zone:
    name: str
    sha256: str
    rule: str
    """The POSIX TZ string of the zone file's footer: its rule as tzdata writes it."""
    info: ZoneInfo
    periods: tuple[Period, ...]

    def offset_at(self, ts: int) -> str:
        """What ``zoneinfo`` says (the independent check, not the compiled periods)."""
        return format_offset(datetime.fromtimestamp(ts, self.info).utcoffset())


def format_offset(delta: timedelta | None) -> str:
    seconds = int(delta.total_seconds()) if delta is not None else 0
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tzdata_version() -> str:
    try:
        return metadata.version("tzdata")
    except metadata.PackageNotFoundError:
        raise NaturalSourceError(
            "the tzdata pack needs the tzdata package (pip install tzdata)"
        ) from None


def _state(info: ZoneInfo, ts: int) -> tuple[str, str, bool]:
    moment = datetime.fromtimestamp(ts, info)
    dst = moment.dst()
    return format_offset(moment.utcoffset()), moment.tzname() or "", bool(dst)


def _periods(info: ZoneInfo) -> tuple[Period, ...]:
    """The zone's offset periods over the horizon, each change found to the second."""
    changes: list[int] = []
    last = _state(info, REFERENCE)
    ts = REFERENCE
    while ts < REFERENCE + HORIZON:
        nxt = min(ts + _STEP, REFERENCE + HORIZON)
        state = _state(info, nxt)
        if state != last:
            lo, hi = ts, nxt  # lo has the old state, hi the new one
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _state(info, mid) == last:
                    lo = mid
                else:
                    hi = mid
            changes.append(hi)
            last = state
        ts = nxt
    starts: list[int | None] = [None, *changes]
    ends: list[int | None] = [*changes, None]
    periods = []
    for start, end in zip(starts, ends, strict=True):
        offset, abbreviation, dst = _state(info, REFERENCE if start is None else start)
        periods.append(Period(start, end, offset, abbreviation, dst))
    return tuple(periods)


def load_zones() -> tuple[list[Zone], int]:
    """Every zone of the installed tzdata, one per distinct file (a link to another
    zone's data is the same rules under another name), and how many links were left out."""
    package = resources.files("tzdata")
    names = package.joinpath("zones").read_text(encoding="utf-8").split()
    zones: list[Zone] = []
    seen: set[str] = set()
    links = 0
    for name in sorted(names):
        data = package.joinpath("zoneinfo", *name.split("/")).read_bytes()
        digest = sha256_hex(data)
        if digest in seen:
            links += 1
            continue
        seen.add(digest)
        info = ZoneInfo.from_file(BytesIO(data), key=name)
        rule = data.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode("ascii", "replace")
        zones.append(Zone(name, digest, rule, info, _periods(info)))
    return zones, links


def _divergence(x: Zone, y: Zone) -> int | None:
    """The first instant after the reference at which the two zones' offsets differ."""
    times = sorted({p.start for p in (*x.periods, *y.periods) if p.start is not None})
    for ts in times:
        if _offset_in(x, ts) != _offset_in(y, ts):
            return ts
    return None


def _offset_in(zone: Zone, ts: int) -> str:
    for period in zone.periods:
        if (period.start is None or period.start <= ts) and (period.end is None or ts < period.end):
            return period.offset
    raise AssertionError("periods cover the horizon")


def _describe(period: Period) -> str:
    kind = "daylight saving time" if period.dst else "standard time"
    start = (
        f"in force on {_iso(REFERENCE)}" if period.start is None else f"from {_iso(period.start)}"
    )
    end = "" if period.end is None else f" until {_iso(period.end)}"
    if period.end is None and period.start is None:
        end = f", with no change before {_iso(REFERENCE + HORIZON)}"
    return f"UTC{period.offset} ({period.abbreviation}, {kind}) {start}{end}"


def _rule_records(zone: Zone, key: str, prefix: str, lead: str) -> list[Record]:
    return [
        SetRecord(
            id=f"{prefix}-{index}",
            key=key,
            value=period.offset,
            rev=index + 1,
            starts=period.start,
            expires=None if period.end is None else period.end - 1,
            text=f'{lead}zone {zone.name} (TZ rule "{zone.rule}"): {_describe(period)}',
        )
        for index, period in enumerate(zone.periods)
    ]


def _ref(zone: Zone) -> SourceRef:
    return SourceRef(file=f"tzdata/zoneinfo/{zone.name}", sha256=zone.sha256, item=zone.name)


def build_pair(
    index: int,
    x: Zone,
    y: Zone,
    at: int,
    others: list[Zone],
    rng: random.Random,
    chunk_size: int,
    version: str,
) -> Pair:
    """Zones ``x`` (A) and ``y`` (B), agreeing now and disagreeing from ``at``."""
    lead = "office clock: "
    a = _rule_records(x, QUERY_KEY, "office", lead)
    b = _rule_records(y, QUERY_KEY, "office", lead)
    clock = TickRecord(id="clock-0", now=REFERENCE, text=f"clock: {_iso(REFERENCE)}")
    shared: list[Record] = [clock]
    for number, other in enumerate(others):
        key = "zone." + _KEY_CHARS.sub("_", other.name.replace("/", "."))
        shared += _rule_records(other, key, f"z{number}", "")
    chunks_a, chunks_b = slot_chunks(a, b, shared, rng, chunk_size)
    tick = TickRecord(id="clock-1", now=at, text=f"clock: {_iso(at)}")
    move = SetRecord(
        id="office-moved",
        key=QUERY_KEY,
        value="+00:00",
        rev=1000,
        starts=at,
        text=f"office clock: the office moves to zone Etc/UTC: UTC+00:00 from {_iso(at)}",
    )
    return Pair(
        pair_id=f"tzdata-{index:04d}",
        family=SOURCE,
        query=[QUERY_KEY],
        variants=Variants(A=Variant(chunks=chunks_a), B=Variant(chunks=chunks_b)),
        futures=Futures(reveal=[[tick]], override=[[tick, move]]),
        task_keys=[QUERY_KEY],
        chunk_size=chunk_size,
        provenance=Provenance(
            source=SOURCE,
            version=f"tzdata {version}",
            licence=LICENCE,
            A=_ref(x),
            B=_ref(y),
            edit=f"the office's zone is {y.name} instead of {x.name} (same offset now, "
            f"{x.offset_at(at)} vs {y.offset_at(at)} from {_iso(at)})",
        ),
    )


def agrees_with_zoneinfo(pair: Pair, x: Zone, y: Zone, at: int) -> bool:
    """The independent check: every gold answer is what ``zoneinfo`` gives."""
    gold = pair.gold
    if gold is None:
        return False
    return (
        gold.A.current[QUERY_KEY] == x.offset_at(REFERENCE)
        and gold.B.current[QUERY_KEY] == y.offset_at(REFERENCE)
        and gold.A.reveal[QUERY_KEY] == x.offset_at(at)
        and gold.B.reveal[QUERY_KEY] == y.offset_at(at)
        and gold.A.override[QUERY_KEY] == gold.B.override[QUERY_KEY] == "+00:00"
    )


def derive(seed: int = 0, chunk_size: int = 8) -> NaturalDataset:
    """Every tzdata pair: each zone with a change in the horizon, paired with one zone
    (drawn by ``seed``) that has its offset now and another one later."""
    version = tzdata_version()
    zones, links = load_zones()
    listing = "".join(f"{zone.name} {zone.sha256}\n" for zone in zones)
    dataset = NaturalDataset(
        source=SOURCE,
        licence=LICENCE,
        source_version=f"tzdata {version}",
        source_file="tzdata/zoneinfo (every zone, one per distinct file)",
        source_sha256=sha256_hex(listing.encode("ascii")),
    )
    if links:
        dataset.skipped["zone name linking to another zone's data"] = links
    rng = random.Random(f"{SOURCE}/{seed}")
    used: set[frozenset[str]] = set()
    index = 0
    for x in zones:
        if len(x.periods) == 1:
            dataset.skipped["zone with no future transition in the horizon"] += 1
            continue
        now = x.periods[0].offset
        candidates = [
            (y, at)
            for y in zones
            if y is not x
            and y.periods[0].offset == now
            and frozenset((x.name, y.name)) not in used
            and (at := _divergence(x, y)) is not None
        ]
        if not candidates:
            dataset.skipped["no zone with the same offset now and another one later"] += 1
            continue
        y, at = candidates[rng.randrange(len(candidates))]
        used.add(frozenset((x.name, y.name)))
        pool = [z for z in zones if z is not x and z is not y]
        others = rng.sample(pool, min(DISTRACTOR_ZONES, len(pool)))
        pair_rng = random.Random(f"{SOURCE}/{seed}/{index}")
        pair = build_pair(index, x, y, at, others, pair_rng, chunk_size, version)
        before = len(dataset.pairs)
        dataset.add(pair)
        if len(dataset.pairs) > before:
            if not agrees_with_zoneinfo(dataset.pairs[-1], x, y, at):
                dataset.pairs.pop()
                dataset.skipped["disagrees with zoneinfo"] += 1
                continue
            index += 1
    return dataset
