"""The pair generator: every emitted pair is verified, aligned, deterministic.

Covers ``histories.generate`` / ``build_pair`` / ``GenerationConfig`` / ``PRESETS``,
the family registry, and the failure path when a family yields an unverifiable pair.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from histories import (
    FAMILIES,
    PRESETS,
    ChooseRecord,
    CopyRecord,
    Family,
    GenerationConfig,
    GenerationError,
    Pair,
    PairPropertyError,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    UnknownFamilyError,
    WhenRecord,
    generate,
    referenced_keys,
    resolve,
    resolve_families,
)
from histories._generate import build_pair
from histories._pair import check_pair, compute_gold
from histories.families import PAPER_FAMILIES, Draft

REPO = Path(__file__).resolve().parents[2]

PAPER_SIX = (
    "rollback",
    "expiry",
    "choice_switch",
    "late_reference",
    "tombstone_replay",
    "mixed_alias_expiry",
)

_BINDING = SetRecord | CopyRecord | ChooseRecord | ReplayRecord | WhenRecord


def build_with_draft(name: str, index: int, config: GenerationConfig) -> tuple[Pair, Draft]:
    """``build_pair`` for a registered family, also returning the family's draft.

    The wrapper keeps the family's name, so the pair's random stream (seeded by
    seed / family name / index) and therefore the pair are unchanged.
    """
    family = FAMILIES[name]
    drafts: list[Draft] = []

    def capturing(rng, labels):  # type: ignore[no-untyped-def]
        draft = family.build(rng, labels)
        drafts.append(draft)
        return draft

    pair = build_pair(dataclasses.replace(family, build=capturing), index, config)
    # the first draft is the task's; task-like distractors are decoy drafts built after it
    assert len(drafts) == 1 or config.distractor_mix == "task-like", len(drafts)
    return pair, drafts[0]


def record_targets(record: Record) -> tuple[str, ...]:
    """Record ids a record points at."""
    return (record.target,) if isinstance(record, RevokeRecord | ReplayRecord) else ()


# ---------------------------------------------------------------- the big property

configs = st.builds(
    GenerationConfig,
    families=st.sampled_from(sorted(FAMILIES)).map(lambda name: [name]),
    pairs_per_family=st.just(1),
    seed=st.integers(min_value=0, max_value=2**32),
    distractors=st.integers(min_value=0, max_value=64),
    chunk_size=st.integers(min_value=1, max_value=16),
    future_distractors=st.sampled_from([0, 1, 4, 8]),
    labels=st.sampled_from(["random", "readable"]),
    distractor_mix=st.sampled_from(["mixed", "plain", "task-like"]),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(config=configs, index=st.integers(min_value=0, max_value=50))
def test_generated_pair_properties(config: GenerationConfig, index: int) -> None:
    (name,) = config.families
    pair, draft = build_with_draft(name, index, config)

    # identity of the pair
    assert pair.family == name
    assert pair.pair_id == f"{name}-{index:04d}"
    assert pair.query == list(draft.query)
    assert pair.task_keys == list(draft.task_keys)
    assert set(pair.query) <= set(pair.task_keys)
    assert pair.chunk_size == config.chunk_size
    assert pair.render == config.render
    assert pair == build_pair(FAMILIES[name], index, config), "wrapping changed the pair"

    # verified, gold stored and exact
    assert pair.gold is not None
    assert check_pair(pair) == pair.gold
    assert compute_gold(pair) == pair.gold
    for variant in ("A", "B"):
        for branch in ("current", "reveal", "override"):
            full = resolve(pair.history(variant, branch), pair.query)
            assert full == pair.gold.of(variant).of(branch), (variant, branch)

    # the pair property, plus: the override really changes the answer
    gold = pair.gold
    assert gold.A.current == gold.B.current
    assert gold.A.reveal != gold.B.reveal
    assert gold.A.override == gold.B.override
    assert gold.A.override != gold.A.current
    assert gold.B.override != gold.B.current
    assert set(gold.A.current) == set(pair.query)

    # the prefix: exactly `distractors` distractors plus the family's task records
    task_ids = {r.id for r in (*draft.variant_a, *draft.variant_b, *draft.reveal, *draft.override)}
    prefix_a, prefix_b = pair.prefix("A"), pair.prefix("B")
    assert len(prefix_a) == config.distractors + len(draft.variant_a)
    assert len(prefix_b) == config.distractors + len(draft.variant_b)
    distractors_a = [r for r in prefix_a if r.id not in task_ids]
    distractors_b = [r for r in prefix_b if r.id not in task_ids]
    assert len(distractors_a) == config.distractors
    assert distractors_a == distractors_b, "distractors must be shared by A and B"
    assert {r.id: r for r in prefix_a if r.id in task_ids} == {r.id: r for r in draft.variant_a}
    assert {r.id: r for r in prefix_b if r.id in task_ids} == {r.id: r for r in draft.variant_b}

    # futures: the real operation, then (if any) one distractor chunk
    for future_name, real in (("reveal", draft.reveal), ("override", draft.override)):
        chunks = pair.futures.of(future_name)
        assert chunks[0] == list(real)
        if config.future_distractors:
            assert len(chunks) == 2
            assert len(chunks[1]) == config.future_distractors
        else:
            assert len(chunks) == 1
    future_distractors = [r for f in ("reveal", "override") for r in pair.futures.of(f)[1:]]
    future_distractors = [r for chunk in future_distractors for r in chunk]

    # distractors never write a task key (nor point at a task record), and only
    # task-like ones read one (they share the task's label graph); they never move the
    # clock: only task-like distractors tick, before the task prefix's first tick
    task_keys = set(pair.task_keys)
    task_ticks = [r.now for r in (*draft.variant_a, *draft.variant_b) if isinstance(r, TickRecord)]
    for record in distractors_a + future_distractors:
        assert getattr(record, "key", None) not in task_keys, record
        if config.distractor_mix != "task-like":
            assert not set(referenced_keys(record)) & task_keys, record
        assert not set(record_targets(record)) & task_ids, record
        if isinstance(record, TickRecord):
            assert config.distractor_mix == "task-like", record
            assert record.now < min(task_ticks), record
        if config.distractor_mix == "plain":
            assert isinstance(record, SetRecord), record
            assert record.expires is None, record
            assert record.starts is None, record
    # and every key a task record mentions is a task key
    for record in (*draft.variant_a, *draft.variant_b, *draft.reveal, *draft.override):
        assert set(referenced_keys(record)) <= task_keys, record

    # distractors never tie revisions on a key (prefix and future distractors together)
    revs = Counter(
        (r.key, r.rev) for r in distractors_a + future_distractors if isinstance(r, _BINDING)
    )
    assert not [kr for kr, n in revs.items() if n > 1]

    # chunk alignment: A and B are cut from the same slot order
    chunks_a, chunks_b = pair.variants.A.chunks, pair.variants.B.chunks
    slots = {r.id for r in prefix_a} | {r.id for r in prefix_b}
    assert len(chunks_a) == len(chunks_b) == math.ceil(len(slots) / config.chunk_size)
    where_a = {r.id: i for i, chunk in enumerate(chunks_a) for r in chunk}
    where_b = {r.id: i for i, chunk in enumerate(chunks_b) for r in chunk}
    for rid in where_a.keys() & where_b.keys():
        assert where_a[rid] == where_b[rid], rid
    for chunk_a, chunk_b in zip(chunks_a, chunks_b, strict=True):
        assert len(chunk_a) <= config.chunk_size
        assert len(chunk_b) <= config.chunk_size
        ids_b = {r.id for r in chunk_b}
        ids_a = {r.id for r in chunk_a}
        assert [r.id for r in chunk_a if r.id in ids_b] == [r.id for r in chunk_b if r.id in ids_a]
    # all but the last slot chunk are full (counting slots, i.e. either variant's record)
    for i in range(len(chunks_a) - 1):
        assert len({r.id for r in chunks_a[i]} | {r.id for r in chunks_b[i]}) == config.chunk_size

    # the JSON line round-trips
    assert Pair.model_validate_json(pair.to_json()) == pair


# ---------------------------------------------------------------- every family, fixed seeds


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("labels", ["random", "readable"])
def test_every_family_generates_verified_pairs(name: str, labels: str) -> None:
    config = GenerationConfig(
        families=[name], pairs_per_family=8, seed=7, labels=labels, distractors=16
    )
    pairs = generate(config)
    assert [p.pair_id for p in pairs] == [f"{name}-{i:04d}" for i in range(8)]
    for pair in pairs:
        assert pair.gold == check_pair(pair)
        assert pair.gold.A.current == pair.gold.B.current
        assert pair.gold.A.reveal != pair.gold.B.reveal
        assert pair.gold.A.override == pair.gold.B.override != pair.gold.A.current


# ---------------------------------------------------------------- determinism

DETERMINISM_CONFIG = GenerationConfig(
    families=["all"], pairs_per_family=2, seed=1234, distractors=12, chunk_size=5
)

_SUBPROCESS_SCRIPT = """
import sys
from histories import GenerationConfig, generate
config = GenerationConfig.model_validate_json(sys.argv[1])
for pair in generate(config):
    print(pair.to_json())
"""


def test_same_config_gives_identical_json_lines() -> None:
    first = [p.to_json() for p in generate(DETERMINISM_CONFIG)]
    second = [p.to_json() for p in generate(DETERMINISM_CONFIG.model_copy())]
    assert first == second
    assert len(first) == 2 * len(FAMILIES)
    # family by family, in index order
    assert [p.family for p in generate(DETERMINISM_CONFIG)] == [
        name for name in FAMILIES for _ in range(2)
    ]


def test_same_config_gives_identical_lines_in_a_fresh_process() -> None:
    """No dependence on hash randomisation or process state."""
    expected = [p.to_json() for p in generate(DETERMINISM_CONFIG)]
    env = {**os.environ, "PYTHONHASHSEED": "987", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_SCRIPT, DETERMINISM_CONFIG.model_dump_json()],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert out.stdout.splitlines() == expected


def test_pair_does_not_depend_on_other_families_or_counts() -> None:
    small = GenerationConfig(families=["rollback"], pairs_per_family=1, seed=5)
    big = GenerationConfig(families=["expiry", "rollback"], pairs_per_family=3, seed=5)
    (only,) = generate(small)
    assert (
        only.to_json() == next(p for p in generate(big) if p.pair_id == "rollback-0000").to_json()
    )


@pytest.mark.parametrize("labels", ["random", "readable"])
def test_different_seeds_give_different_pairs(labels: str) -> None:
    base = dict(families=["all"], pairs_per_family=2, distractors=8, labels=labels)
    seed0 = generate(GenerationConfig(seed=0, **base))
    seed1 = generate(GenerationConfig(seed=1, **base))
    assert len(seed0) == len(seed1)
    for a, b in zip(seed0, seed1, strict=True):
        assert a.pair_id == b.pair_id
        assert a.to_json() != b.to_json(), a.pair_id
    # and different indices within one seed differ too
    for i in range(0, len(seed0), 2):
        assert seed0[i].model_copy(update={"pair_id": "x"}) != seed0[i + 1].model_copy(
            update={"pair_id": "x"}
        )


# ---------------------------------------------------------------- the cca-pilot preset


def test_cca_pilot_paper_preset() -> None:
    config = PRESETS["cca-pilot-paper"]
    assert config.preset == "cca-pilot"  # the configuration earlier versions called cca-pilot
    assert config.families == list(PAPER_SIX)
    assert config.pairs_per_family == 4
    assert config.distractors == 32
    assert config.labels == "readable"
    assert config.distractor_mix == "plain"

    pairs = generate(config)
    assert len(pairs) == 24
    assert Counter(p.family for p in pairs) == dict.fromkeys(PAPER_SIX, 4)
    assert len({p.pair_id for p in pairs}) == 24
    leading = 0  # pairs whose task records all sit in front of the distractors

    for index, pair in enumerate(pairs):
        rebuilt, draft = build_with_draft(pair.family, index % 4, config)
        assert rebuilt == pair
        assert pair.gold == check_pair(pair)
        task_ids = {
            r.id for r in (*draft.variant_a, *draft.variant_b, *draft.reveal, *draft.override)
        }
        for variant, task in (("A", draft.variant_a), ("B", draft.variant_b)):
            assert len(pair.prefix(variant)) == 32 + len(task)
            distractors = [r for r in pair.prefix(variant) if r.id not in task_ids]
            assert len(distractors) == 32
            assert all(isinstance(r, SetRecord) for r in distractors), "plain distractors"
            positions = [i for i, r in enumerate(pair.prefix(variant)) if r.id in task_ids]
            leading += positions == list(range(len(task)))

        task_keys = set(pair.task_keys)
        all_keys = {k for r in pair.all_records() for k in referenced_keys(r)}
        distractor_keys = all_keys - task_keys
        assert task_keys
        assert distractor_keys
        assert max(task_keys) < min(distractor_keys), pair.pair_id
        assert all(k.startswith("key_") for k in task_keys)
        assert all(k.startswith("noise_") for k in distractor_keys)

        distractor_ids = {r.id for r in pair.all_records()} - task_ids
        assert max(task_ids) < min(distractor_ids), pair.pair_id
    # the distractors are shuffled in among the task records, not appended
    assert leading <= 2, f"{leading} of 48 prefixes start with all their task records"


def test_cca_pilot_paper_regenerates_what_earlier_versions_called_cca_pilot() -> None:
    # the sha256 of the cca-pilot dataset written by earlier versions (run directories
    # record it): their drill-downs must still rebuild the same pairs
    body = "".join(p.to_json() + "\n" for p in generate(PRESETS["cca-pilot-paper"]))
    assert hashlib.sha256(body.encode()).hexdigest() == (
        "694f8af83d65ff6464e4e5ac5429fe62cb5a3cb3cbe7d1e2b96d5cbfeca2c8a1"
    )


def test_cca_pilot_labels_do_not_tell_task_from_distractor() -> None:
    config = PRESETS["cca-pilot"]
    assert config.labels == "words"
    assert config.distractor_mix == "task-like"
    shape = {"labels", "preset", "distractor_mix", "pairs_per_family"}
    assert config.model_dump(exclude=shape) == PRESETS["cca-pilot-paper"].model_dump(exclude=shape)
    task_lengths: list[int] = []
    distractor_lengths: list[int] = []
    first = 0  # pairs whose task keys all sort before their distractor keys
    for index, pair in enumerate(generate(config)):
        _, draft = build_with_draft(pair.family, index % config.pairs_per_family, config)
        task_ids = {
            r.id for r in (*draft.variant_a, *draft.variant_b, *draft.reveal, *draft.override)
        }
        task_keys = set(pair.task_keys)
        all_keys = {k for r in pair.all_records() for k in referenced_keys(r)}
        distractor_keys = all_keys - task_keys
        ids = {r.id for r in pair.all_records()}
        # one shape for every label: no prefix or form tells a task label
        assert all(re.fullmatch(r"[a-z]+_[a-z]+_[0-9]", k) for k in all_keys), pair.pair_id
        assert all(re.fullmatch(r"r[0-9]{5}", i) for i in ids), pair.pair_id
        task_lengths += [len(k) for k in task_keys]
        distractor_lengths += [len(k) for k in distractor_keys]
        first += max(task_keys) < min(distractor_keys)
        assert {len(i) for i in task_ids} == {len(i) for i in ids - task_ids} == {6}
        assert pair.gold == check_pair(pair)
    # lengths from one distribution: the means differ by less than a character
    mean = statistics.fmean
    assert abs(mean(task_lengths) - mean(distractor_lengths)) < 1.0
    assert first <= 6, f"{first} of 84 pairs sort every task key first"


def _record_facts(config: GenerationConfig) -> dict[str, dict[str, float]]:
    """Per side (task, distractor): the share of each record kind (an expiring set or
    copy apart), of values not of the common ``word-123`` shape, and the mean revision,
    over the prefixes of a preset's pairs."""
    shape = re.compile(r"[a-z]+-[0-9]{3}")
    kinds: dict[str, Counter[str]] = {"task": Counter(), "distractor": Counter()}
    revisions: dict[str, list[int]] = {"task": [], "distractor": []}
    for index, pair in enumerate(generate(config)):
        _, draft = build_with_draft(pair.family, index % config.pairs_per_family, config)
        task_ids = {r.id for r in (*draft.variant_a, *draft.variant_b)}
        for record in {r.id: r for v in ("A", "B") for r in pair.prefix(v)}.values():
            side = "task" if record.id in task_ids else "distractor"
            timed = getattr(record, "expires", None) is not None
            kinds[side][record.op + ("+expires" if timed else "")] += 1
            value = getattr(record, "value", None)
            kinds[side]["odd value"] += value is not None and not shape.fullmatch(value)
            if getattr(record, "rev", None) is not None:
                revisions[side].append(record.rev)  # type: ignore[union-attr]
    out: dict[str, dict[str, float]] = {}
    for side, counts in kinds.items():
        total = sum(v for k, v in counts.items() if k != "odd value")
        out[side] = {kind: count / total for kind, count in counts.items()}
        out[side]["mean rev"] = statistics.fmean(revisions[side])
        out[side]["max rev"] = max(revisions[side])
    return out


def test_cca_pilot_distractors_look_like_task_records() -> None:
    # the paper's pilot draws distractors as plain sets of word-123 values whose
    # revisions climb on busy keys: every other kind, every other value shape and every
    # small revision is the task's (a heuristic that keeps those beat the frontier
    # packers). The default pilot's distractors are drawn like the task's records.
    paper = _record_facts(PRESETS["cca-pilot-paper"])
    assert set(paper["distractor"]) - {"mean rev", "max rev"} == {"set", "odd value"}
    assert paper["distractor"]["odd value"] == 0
    assert paper["distractor"]["mean rev"] > 2 * paper["task"]["mean rev"]
    assert paper["distractor"]["max rev"] >= 3 * paper["task"]["max rev"]
    facts = _record_facts(PRESETS["cca-pilot"])
    task, distractor = facts["task"], facts["distractor"]
    control = ("choose", "copy", "copy+expires", "revoke", "set+expires", "tick")
    assert sum(distractor.get(k, 0) for k in control) > 0.25  # no kind is the task's alone
    for kind in ("choose", "copy", "revoke", "set+expires", "tick"):
        assert distractor.get(kind, 0) > 0, kind
    assert abs(task["set"] - distractor["set"]) < 0.12
    assert abs(task["odd value"] - distractor["odd value"]) < 0.05
    assert abs(task["mean rev"] - distractor["mean rev"]) < 0.6
    assert distractor["max rev"] <= 2 * task["max rev"]


def test_cca_pilot_distractors_share_the_task_label_graph() -> None:
    # before: distractors never named a task label, so the query key's component in the
    # label graph was exactly the task; then distractor reads went half to task keys, so
    # task keys were named by other records far more often than distractor keys (89 %
    # against 21 %; a key named twice or more was the task's in 51 % of cases, 10 % of
    # keys were the task's) and task-like expiries spanned other ticks than the task's.
    # Decoy drafts are built by the families themselves and borrow each other's keys
    from compressors.builtin.probes import _label_components, node

    config = PRESETS["cca-pilot"]
    named: dict[str, Counter[int]] = {"task": Counter(), "distractor": Counter()}
    expiries: dict[str, list[int]] = {"task": [], "distractor": []}
    naming = records = joined_pairs = 0
    for index, pair in enumerate(generate(config)):
        _, draft = build_with_draft(pair.family, index % config.pairs_per_family, config)
        task_ids = {r.id for r in (*draft.variant_a, *draft.variant_b)}
        task_keys = set(pair.task_keys)
        for variant in ("A", "B"):
            prefix = pair.prefix(variant)
            reads = Counter(k for r in prefix for k in set(referenced_keys(r)[1:]))
            for key in {k for r in prefix for k in referenced_keys(r)}:
                named["task" if key in task_keys else "distractor"][min(reads[key], 2)] += 1
            for record in prefix:
                side = "task" if record.id in task_ids else "distractor"
                if getattr(record, "expires", None) is not None:
                    expiries[side].append(record.expires)  # type: ignore[union-attr]
        prefix = pair.prefix("A")
        roots = _label_components(list(map(node, prefix)))
        query_roots = {
            root for root, r in zip(roots, prefix, strict=True)
            if getattr(r, "key", None) in pair.query
        }  # fmt: skip
        joined = False
        for root, record in zip(roots, prefix, strict=True):
            if record.id not in task_ids:
                records += 1
                naming += bool(set(referenced_keys(record)) & task_keys)
                joined |= root in query_roots
                assert getattr(record, "key", None) not in task_keys, record
        joined_pairs += joined
        assert pair.gold == check_pair(pair)

    def share(side: str, at_least: int) -> float:
        counts = named[side]
        return sum(c for d, c in counts.items() if d >= at_least) / sum(counts.values())

    # how often a key is named tells task from distractor at chance or nearly
    task_keys_n = sum(named["task"].values())
    base = task_keys_n / (task_keys_n + sum(named["distractor"].values()))
    twice = {side: sum(c for d, c in named[side].items() if d >= 2) for side in named}
    assert twice["task"] / (twice["task"] + twice["distractor"]) < 2 * base, (twice, base)
    assert abs(share("task", 1) - share("distractor", 1)) < 0.15, named
    # expiries from the task's own recipes: as common, over the same ticks
    mean = statistics.fmean
    assert abs(mean(expiries["task"]) - mean(expiries["distractor"])) < 2.0, expiries
    assert max(expiries["distractor"]) <= max(expiries["task"]) + 6, expiries
    # distractors name task labels, and the query key's component holds them
    assert naming > 0, (naming, records)
    assert joined_pairs >= 84 // 5, joined_pairs


# ---------------------------------------------------------------- the registry


def test_at_least_twelve_families_registered() -> None:
    assert len(FAMILIES) >= 12
    for name, family in FAMILIES.items():
        assert isinstance(family, Family)
        assert family.name == name
        assert family.summary


def test_paper_families_are_the_papers_six_and_come_first() -> None:
    assert PAPER_FAMILIES == PAPER_SIX
    assert tuple(FAMILIES)[: len(PAPER_SIX)] == PAPER_SIX
    assert all(FAMILIES[n].paper for n in PAPER_SIX)
    assert not any(f.paper for n, f in FAMILIES.items() if n not in PAPER_SIX)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_module_docstring_has_worked_example(name: str) -> None:
    family = FAMILIES[name]
    module = sys.modules[family.build.__module__]
    assert module.__doc__, f"{module.__name__} has no docstring"
    assert "Worked example" in module.__doc__
    assert module.__doc__.startswith(f"{name}:")
    assert family.doc == module.__doc__


def test_family_selection() -> None:
    assert resolve_families("all") == list(FAMILIES)
    assert resolve_families("paper") == list(PAPER_SIX)
    assert resolve_families("expiry, rollback,expiry") == ["expiry", "rollback"]
    with pytest.raises(UnknownFamilyError, match="unknown family 'nope'"):
        resolve_families("rollback,nope")
    with pytest.raises(UnknownFamilyError):
        resolve_families("")
    with pytest.raises(ValidationError, match="unknown family"):
        GenerationConfig(families=["nope"], pairs_per_family=1)


# ---------------------------------------------------------------- failure path


def _broken_draft(kind: str) -> Draft:
    def s(rid: str, key: str, value: str, rev: int) -> SetRecord:
        return SetRecord(id=rid, key=key, value=value, rev=rev)

    k, o = "fake_k", "fake_o"
    if kind == "same-current-answer":
        a, b = [s("f1", k, "x", 1)], [s("f1", k, "y", 1)]
        reveal, override = [s("f2", k, "z", 2)], [s("f3", k, "w", 2)]
    elif kind == "reveal-answers-differ":
        a = b = [s("f1", k, "x", 1)]
        reveal, override = [s("f2", k, "z", 2)], [s("f3", k, "w", 2)]
    elif kind == "override-answers-equal":
        a, b = [s("f1", k, "x", 1), s("f2", o, "1", 1)], [s("f1", k, "x", 1), s("f2", o, "2", 1)]
        copy = CopyRecord(id="f3", key=k, src=o, rev=2)
        reveal, override = [copy], [copy]
    else:  # duplicate ids within a history
        a, b = [s("f1", k, "x", 1), s("f2", o, "1", 1)], [s("f1", k, "x", 1), s("f2", o, "2", 1)]
        reveal, override = [CopyRecord(id="f3", key=k, src=o, rev=2)], [s("f1", k, "w", 9)]
    return Draft(
        query=(k,),
        variant_a=tuple(a),
        variant_b=tuple(b),
        reveal=tuple(reveal),
        override=tuple(override),
        task_keys=(k, o),
    )


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("same-current-answer", "property same-current-answer"),
        ("reveal-answers-differ", "property reveal-answers-differ"),
        ("override-answers-equal", "property override-answers-equal"),
        ("duplicate-ids", "futures.override.0.0.id"),
    ],
)
def test_family_producing_unverifiable_pair_fails_loudly(kind: str, field: str) -> None:
    fake = Family(
        name="fake_broken_family",
        summary="violates the pair property on purpose",
        paper=False,
        build=lambda rng, labels: _broken_draft(kind),
    )
    config = GenerationConfig(families=["rollback"], pairs_per_family=1, distractors=6, seed=3)
    with pytest.raises(GenerationError) as info:
        build_pair(fake, 2, config)
    message = str(info.value)
    assert "fake_broken_family" in message
    assert field in message
    cause = info.value.__cause__
    assert isinstance(cause, PairPropertyError)
    assert cause.field == field
    assert cause.pair_id == "fake_broken_family-0002"


def test_valid_fake_family_is_accepted() -> None:
    """Control for the failure path: a correct hand-made family goes through."""

    def build(rng, labels):  # type: ignore[no-untyped-def]
        k, o = labels.task_key("k"), labels.task_key("o")
        ids = [labels.task_id() for _ in range(4)]
        a = [
            SetRecord(id=ids[0], key=k, value="x", rev=1),
            SetRecord(id=ids[1], key=o, value="1", rev=1),
        ]
        b = [a[0], SetRecord(id=ids[1], key=o, value="2", rev=1)]
        return Draft(
            query=(k,),
            variant_a=tuple(a),
            variant_b=tuple(b),
            reveal=(CopyRecord(id=ids[2], key=k, src=o, rev=2),),
            override=(SetRecord(id=ids[3], key=k, value="y", rev=2),),
            task_keys=(k, o),
        )

    fake = Family(name="fake_good_family", summary="ok", paper=False, build=build)
    config = GenerationConfig(families=["rollback"], pairs_per_family=1, distractors=10)
    pair = build_pair(fake, 0, config)
    assert pair.gold is not None
    assert pair.gold.A.reveal == {pair.query[0]: "1"}
    assert pair.gold.B.reveal == {pair.query[0]: "2"}
