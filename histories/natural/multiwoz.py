"""The MultiWOZ pack: real human-human task dialogues and their annotated belief state.

Each user turn becomes one ``set`` per slot its annotation changes (the belief state
of the next system turn against the one before), keyed ``domain.slot`` (semi
constraints) or ``domain.book.slot`` (booking slots), at the turn's revision, with
the turn's words as ``text``.  Replayed by E_q, the records give the annotated state
of the cut turn exactly: that is the pack's independent check, against the
dataset's own annotation.

Variant A is a real prefix; B is the same prefix with one earlier slot value that
the query does not ask about replaced by another value of that slot from the
ontology, in the text span and the annotation together, the new value appearing
nowhere else in the dialogue.  The reveal future is a scripted turn in the
dataset's style that makes the edited slot decisive (a taxi to arrive by the
reservation time: a ``copy`` of it); the override future sets the query slot
outright.  A dialogue that gives no pair is skipped and counted by reason.
"""

from __future__ import annotations

import json
import random
import zipfile
from collections import Counter
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from histories._interpreter import LogIndex
from histories._pair import Futures, Pair, Provenance, SourceRef, Variant, Variants
from histories._records import CopyRecord, Record, SetRecord
from histories.natural._pack import NaturalDataset, NaturalSourceError, sha256_hex, slot_chunks

SOURCE = "multiwoz"
PACK = "data/multiwoz21-test"
"""The committed pack, derived from the MultiWOZ 2.1 test split (inside this package)."""
LICENCE = (
    "derived from MultiWOZ 2.1 (Eric et al., 2019; Budzianowski et al., 2018), MIT licence: "
    "Copyright (c) 2019 budzianowski; see NOTICE in histories/natural/data/multiwoz21-test"
)
UNSET = frozenset({"", "not mentioned", "none"})
ENTITY_SLOTS = frozenset({"name", "area", "food", "pricerange", "departure", "destination",
                          "day"})  # fmt: skip
"""The slots whose values are entities the ``entity`` transform may replace (not ``type``:
its values, ``hotel`` or ``museum``, are words a turn uses for the domain itself; not
numbers and times, which the text spells in other forms: ``two``, ``5:15 pm``)."""
_SPAN_SLOTS = {
    "Day": "day", "People": "people", "Time": "time", "Stay": "stay", "Price": "pricerange",
    "Area": "area", "Name": "name", "Food": "food", "Type": "type", "Stars": "stars",
    "Dest": "destination", "Depart": "departure", "Arrive": "arriveBy", "Leave": "leaveAt",
}  # fmt: skip
"""span_info's slot names -> the belief state's."""


@dataclass(frozen=True)
class Link:
    """A scripted future turn that makes slot ``source`` decide slot ``target``."""

    target: str
    reveal: str
    override: str


LINKS: dict[str, Link] = {
    "restaurant.book.time": Link(
        "taxi.arriveBy", "I will also need a taxi that arrives by the time of my table booking.",
        "Actually, the taxi should arrive by {value}.",
    ),
    "restaurant.book.people": Link(
        "train.book.people", "Please book the train for the same number of people as the table.",
        "Actually, book the train for {value} people.",
    ),
    "hotel.book.people": Link(
        "train.book.people", "Please book the train for the same group as the hotel.",
        "Actually, book the train for {value} people.",
    ),
    "train.book.people": Link(
        "restaurant.book.people", "Can you book a table for everyone on the train, too?",
        "Actually, the table is for {value} people.",
    ),
    "restaurant.book.day": Link(
        "hotel.book.day", "I also need a hotel starting the same day as my table booking.",
        "Actually, I want the hotel from {value}.",
    ),
    "hotel.book.day": Link(
        "restaurant.book.day", "I'd like a table on the day I arrive at the hotel.",
        "Actually, make the table for {value}.",
    ),
    "train.day": Link(
        "hotel.book.day", "I need a hotel from the day I travel by train.",
        "Actually, I want the hotel from {value}.",
    ),
    "restaurant.area": Link(
        "attraction.area", "I also want to visit an attraction in the same area as the restaurant.",
        "Actually, the attraction should be in the {value}.",
    ),
    "hotel.area": Link(
        "restaurant.area", "I'd like a restaurant in the same area as my hotel.",
        "Actually, the restaurant should be in the {value}.",
    ),
    "attraction.area": Link(
        "restaurant.area", "Is there a restaurant in the same area as the attraction?",
        "Actually, the restaurant should be in the {value}.",
    ),
    "restaurant.pricerange": Link(
        "hotel.pricerange", "I need a hotel in the same price range as the restaurant.",
        "Actually, the hotel should be {value}.",
    ),
    "hotel.pricerange": Link(
        "restaurant.pricerange", "I want a restaurant in the same price range as the hotel.",
        "Actually, the restaurant should be {value}.",
    ),
}  # fmt: skip
"""Which edited slot a scripted turn makes decisive, and for which query slot."""


def _key(domain: str, part: str, slot: str) -> str:
    return f"{domain}.book.{slot}" if part == "book" else f"{domain}.{slot}"


def _state(metadata: Any) -> dict[str, str]:
    """The belief state as ``key -> value`` (unset slots left out)."""
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not an object")
    state: dict[str, str] = {}
    for domain, parts in metadata.items():
        for part in ("semi", "book"):
            for slot, value in parts[part].items():
                if slot == "booked":
                    continue
                if not isinstance(value, str):
                    raise ValueError(f"{domain}.{part}.{slot} is not a string")
                if value.strip().lower() not in UNSET:
                    state[_key(domain, part, slot)] = value
    return state


@dataclass
class Turn:
    index: int
    text: str
    changes: dict[str, str]
    spans: dict[str, tuple[int, int]]
    """Changed key -> the (first, last) word of its value in ``text``."""


def _turns(dialogue: Any) -> tuple[list[Turn], dict[str, str]]:
    """The user turns up to the last whose annotation E_q can replay (a slot that only
    gains or changes values), and the annotated state after it."""
    log = dialogue["log"]
    turns: list[Turn] = []
    before: dict[str, str] = {}
    for index in range(0, len(log) - 1, 2):
        user, system = log[index], log[index + 1]
        after = _state(system["metadata"])
        if any(key not in after for key in before):
            break  # a slot was cleared: later turns are not a replay of sets
        changes = {k: v for k, v in after.items() if before.get(k) != v}
        spans: dict[str, tuple[int, int]] = {}
        for act, slot, _value, first, last in user.get("span_info", []):
            domain = act.split("-")[0].lower()
            name = _SPAN_SLOTS.get(slot)
            for key in (f"{domain}.{name}", f"{domain}.book.{name}"):
                if key in changes:
                    spans.setdefault(key, (int(first), int(last)))
        turns.append(Turn(index // 2, str(user["text"]), changes, spans))
        before = after
    return turns, before


def _records(turns: list[Turn], edit: tuple[str, str, int] | None = None) -> list[Record]:
    """One set per changed slot per turn; ``edit`` (key, new value, turn) replaces that
    slot's value in the annotation and in the turn's words (every record of the turn)."""
    records: list[Record] = []
    for turn in turns:
        text = turn.text
        if edit is not None and edit[2] == turn.index:
            first, last = turn.spans[edit[0]]
            words = text.split(" ")
            text = " ".join([*words[:first], edit[1], *words[last + 1 :]])
        for key, value in sorted(turn.changes.items()):
            new = (
                edit[1] if edit is not None and edit[0] == key and edit[2] == turn.index else value
            )
            records.append(
                SetRecord(
                    id=f"t{turn.index}.{key}",
                    key=key,
                    value=new,
                    rev=turn.index + 1,
                    text=text or "(silence)",
                )
            )
    return records


def read_dialogues(path: Path) -> tuple[dict[str, Any], bytes, str]:
    """A MultiWOZ 2.x file (JSON, or a zip holding one JSON), its bytes and its name."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise NaturalSourceError(f"{path}: cannot read ({error.strerror})") from None
    name = path.name
    if zipfile.is_zipfile(BytesIO(data)):
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = [m for m in archive.namelist() if m.endswith(".json")]
            if len(members) != 1:
                raise NaturalSourceError(f"{path}: a zip must hold exactly one .json file")
            name = members[0]
            text = archive.read(name)
    else:
        text = data
    try:
        dialogues = json.loads(text)
    except ValueError as error:
        raise NaturalSourceError(f"{path}: not MultiWOZ JSON ({str(error)[:100]})") from None
    if not isinstance(dialogues, dict):
        raise NaturalSourceError(f"{path}: not MultiWOZ JSON (an object of dialogues)")
    return dialogues, data, name


def file_ontology(dialogues: dict[str, Any]) -> dict[str, list[str]]:
    """Every value the file's own annotation gives each slot, sorted: the ontology a
    replacement value is drawn from (so no second file is needed)."""
    found: dict[str, set[str]] = {}
    for dialogue in dialogues.values():
        try:
            for turn in dialogue["log"][1::2]:
                for key, value in _state(turn["metadata"]).items():
                    found.setdefault(key, set()).add(value)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue  # counted when the dialogue itself is read
    return {key: sorted(values) for key, values in sorted(found.items())}


def _ontology_values(ontology: dict[str, list[str]], key: str) -> list[str]:
    return [v for v in ontology.get(key, []) if "|" not in v and v != "dontcare"]


def _pair_for(
    dialogue_id: str,
    dialogue: Any,
    ontology: dict[str, list[str]],
    rng: random.Random,
    index: int,
    file_name: str,
    sha: str,
    chunk_size: int,
) -> tuple[Pair, dict[str, str]] | str:
    """One pair from one dialogue and the annotated state it must replay, or why
    there is none."""
    try:
        turns, state = _turns(dialogue)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return "missing or inconsistent annotation"
    a = _records(turns)
    times_set = Counter(key for turn in turns for key in turn.changes)
    set_once = {key for key in state if times_set[key] == 1}
    words = " ".join(t.text for t in turns).lower()
    options: list[tuple[str, str, int, Link]] = []
    unspelled = 0
    for key in sorted(set_once & LINKS.keys()):
        link = LINKS[key]
        turn = next(t for t in turns if key in t.changes)
        if key not in turn.spans or link.target == key:
            continue
        others = " ".join(t.text for t in turns if t is not turn).lower()
        if list(state.values()).count(state[key]) > 1 or state[key].lower() in others:
            continue  # another slot or turn may refer to the old value: the edit must not
        fresh = [
            v for v in _ontology_values(ontology, key)
            if v.lower() not in words and v not in state.values()
        ]  # fmt: skip
        if not fresh:
            continue
        first, last = turn.spans[key]
        if " ".join(turn.text.split(" ")[first : last + 1]).lower() != state[key].lower():
            unspelled += 1  # the span is not the value ("3" for a day, "any" for dontcare):
            continue  # editing it would leave the old value in the words
        options.append((key, rng.choice(fresh), turn.index, link))
    if not options and unspelled:
        return "inconsistent annotation: no decisive slot's span spells its value"
    if not options:
        return "no slot whose value a later turn could make decisive"
    key, new, turn_index, link = options[rng.randrange(len(options))]
    b = _records(turns, (key, new, turn_index))
    targets = [v for v in _ontology_values(ontology, link.target) if v.lower() not in words]
    if not targets:
        return "no value for the override turn"
    value = rng.choice(targets)
    cut = turns[-1].index
    reveal = CopyRecord(id="future.link", key=link.target, src=key, rev=10_000, text=link.reveal)
    override = SetRecord(id="future.set", key=link.target, value=value, rev=10_000,
                         text=link.override.format(value=value))  # fmt: skip
    chunks_a, chunks_b = slot_chunks(a, b, [], rng, chunk_size)
    ref = SourceRef(file=file_name, sha256=sha, item=dialogue_id, turn=cut)
    return Pair(
        pair_id=f"multiwoz-{index:04d}",
        family=SOURCE,
        query=[link.target],
        variants=Variants(A=Variant(chunks=chunks_a), B=Variant(chunks=chunks_b)),
        futures=Futures(reveal=[[reveal]], override=[[override]]),
        task_keys=[link.target, key],
        chunk_size=chunk_size,
        provenance=Provenance(
            source=SOURCE,
            version=f"MultiWOZ 2.x ({file_name})",
            licence=LICENCE,
            A=ref,
            B=ref,
            edit=f"{key} {state[key]!r} replaced by {new!r} in user turn {turn_index} "
            "(text span and annotation)",
        ),
    ), state


def derive(path: Path, seed: int = 0, chunk_size: int = 8) -> NaturalDataset:
    """Every pair of a MultiWOZ 2.x file, at most one per dialogue, each checked
    against the dialogue's own annotation at the cut turn."""
    dialogues, data, file_name = read_dialogues(path)
    ontology = file_ontology(dialogues)
    sha = sha256_hex(data)
    dataset = NaturalDataset(
        source=SOURCE, licence=LICENCE, source_version=f"MultiWOZ 2.x ({file_name})",
        source_file=file_name, source_sha256=sha,
    )  # fmt: skip
    index = 0
    for dialogue_id in sorted(dialogues):
        rng = random.Random(f"{SOURCE}/{seed}/{dialogue_id}")
        found = _pair_for(
            dialogue_id, dialogues[dialogue_id], ontology, rng, index, file_name, sha, chunk_size
        )
        if isinstance(found, str):
            dataset.skipped[found] += 1
            continue
        pair, state = found
        before = len(dataset.pairs)
        dataset.add(pair)
        if len(dataset.pairs) == before:
            continue
        kept = dataset.pairs[-1]
        replay = LogIndex(kept.prefix("A")).resolve(sorted(state))
        if replay != state:
            dataset.pairs.pop()
            dataset.skipped["replay disagrees with the annotation"] += 1
            continue
        index += 1
    return dataset
