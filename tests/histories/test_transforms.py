"""Metamorphic transforms: renaming, permutation and decoys preserve meaning, checked by E_q."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histories import FAMILIES, PRESETS, GenerationConfig, generate, resolve
from histories._generate import build_pair
from histories._pair import check_pair
from histories._transforms import (
    TransformError,
    ValueMap,
    decoy,
    disguise,
    invert,
    pair_labels,
    permute,
    rechunk,
    rechunk_size,
    rechunked_updates,
    record_values,
    relabel,
    rename,
    rerev,
    rerev_record,
    rev_maps,
    revalue,
    revalue_record,
    task_labels,
    transform,
)
from tests.strategies import KEYS, logs

PILOT = generate(PRESETS["cca-pilot-paper"])
"""The paper's pilot, with its label shape (task labels sort first and are shorter)."""

pair_params = st.builds(
    lambda family, seed, labels: build_pair(
        FAMILIES[family],
        0,
        GenerationConfig(families=[family], pairs_per_family=1, seed=seed, labels=labels),
    ),
    st.sampled_from(sorted(FAMILIES)),
    st.integers(0, 10_000),
    st.sampled_from(["random", "readable", "words"]),
)


@settings(max_examples=60, deadline=None)
@given(pair=pair_params, index=st.integers(0, 50))
def test_rename_is_a_same_length_bijection_that_commutes_with_eq(pair, index):
    renamed = rename(pair, index)
    mapping = renamed.transform.mapping
    labels = pair_labels(pair)
    assert set(mapping) == set(labels)
    assert len(set(mapping.values())) == len(mapping)  # bijective
    assert all(len(new) == len(old) for old, new in mapping.items())
    for variant in ("A", "B"):
        for branch in ("current", "reveal", "override"):
            expected = {
                mapping[k]: v for k, v in resolve(pair.history(variant, branch), pair.query).items()
            }
            got = resolve(renamed.history(variant, branch), renamed.query)
            assert got == expected
            assert renamed.gold.of(variant).of(branch) == expected
    # no old label survives unless the random draw happened to reproduce it in place
    text = renamed.to_json()
    assert renamed.query[0] in text
    assert invert(renamed) == pair


@settings(max_examples=40, deadline=None)
@given(pair=pair_params, index=st.integers(0, 50))
def test_permutation_keeps_answers_and_records(pair, index):
    permuted = permute(pair, index)
    assert permuted.gold == pair.gold
    for variant in ("A", "B"):
        before = sorted(r.canonical_json() for r in pair.prefix(variant))
        after = sorted(r.canonical_json() for r in permuted.prefix(variant))
        assert before == after
        assert all(len(c) <= pair.chunk_size for c in permuted.variants.of(variant).chunks)
    assert permuted.futures == pair.futures
    check_pair(permuted)


def test_permutations_actually_reorder():
    pair = PILOT[0]
    orders = {tuple(r.id for r in permute(pair, i).prefix("A")) for i in range(10)}
    assert len(orders) == 10
    assert tuple(r.id for r in pair.prefix("A")) not in orders


@settings(max_examples=40, deadline=None)
@given(pair=pair_params, index=st.integers(0, 20))
def test_decoy_puts_every_distractor_label_before_every_task_label(pair, index):
    decoyed = decoy(pair, index)
    mapping = decoyed.transform.mapping
    task = task_labels(pair)
    task_new = [mapping[label] for label in task]
    distractor_new = [new for old, new in mapping.items() if old not in task]
    assert distractor_new, "generated pairs always have distractors"
    assert max(distractor_new) < min(task_new)
    check_pair(decoyed)


def test_pilot_labels_sort_task_first_and_rename_breaks_it():
    for pair in PILOT:
        task = task_labels(pair)
        task_keys = set(pair.task_keys)
        distractor_keys = {
            label for label in pair_labels(pair) if label not in task and label.startswith("noise_")
        }
        assert max(task_keys) < min(distractor_keys)
    # under renaming, the late-reference key no longer sorts before all distractors every time
    late = [p for p in PILOT if p.family == "late_reference"]
    ranks = []
    for pair in late:
        for index in range(40):
            renamed = rename(pair, index)
            other = next(k for k in renamed.task_keys if k not in renamed.query)
            keys = {r.key for r in renamed.prefix("A") if hasattr(r, "key")}
            ranks.append(sorted(keys).index(other) / len(keys))
    assert 0.3 < sum(ranks) / len(ranks) < 0.7  # uniform-ish position


def test_transform_counts_ids_and_provenance():
    pair = PILOT[5]
    out = transform(pair, "rename", 3)
    assert [p.pair_id for p in out] == [f"{pair.pair_id}~rename0{i}" for i in range(3)]
    assert all(p.source_pair_id == pair.pair_id and p.source_id == pair.pair_id for p in out)
    assert transform(pair, "identity") == [pair]
    assert rename(pair, 1) == rename(pair, 1)
    assert rename(pair, 1) != rename(pair, 2)


@pytest.mark.parametrize(
    ("kind", "count", "message"),
    [("rename", 0, "K must be positive"), ("shuffle", 1, "unknown transform")],
)
def test_transform_bad_input(kind, count, message):
    with pytest.raises(ValueError, match=message):
        transform(PILOT[0], kind, count)


def test_transformed_pairs_are_not_transformed_again():
    with pytest.raises(ValueError, match="already transformed"):
        rename(rename(PILOT[0], 0), 0)


def test_a_broken_transform_is_caught_by_reverification(monkeypatch):
    import histories._transforms as transforms

    real = transforms.apply_mapping

    def sloppy(pair, mapping):  # forget to rename the gold answers' keys consistently
        renamed = real(pair, mapping)
        return renamed.model_copy(update={"gold": pair.gold})

    monkeypatch.setattr(transforms, "apply_mapping", sloppy)
    with pytest.raises(TransformError, match="gold"):
        rename(PILOT[0], 0)


def test_a_changed_copy_of_a_record_never_keeps_its_cached_line():
    # packers read canonical_line / canonical_size cached in the record; a copy that
    # changes a field (renaming, model_copy) must derive its own
    import copy
    import pickle

    from histories._records import SetRecord, replace_fields

    record = SetRecord(id="a", key="k", value="v", rev=1)
    assert record.canonical_line == record.canonical_json()
    assert record.canonical_size == len(record.canonical_json().encode())
    for changed in (
        record.model_copy(update={"value": "w"}),
        replace_fields(record, {"value": "w"}),
    ):
        assert changed.canonical_line == changed.canonical_json()
        assert '"value":"w"' in changed.canonical_line
    for same in (copy.copy(record), copy.deepcopy(record), pickle.loads(pickle.dumps(record))):
        assert "canonical_line" not in same.__dict__  # derived again, not carried
        assert same == record
        assert same.canonical_line == record.canonical_line
    assert record == SetRecord(id="a", key="k", value="v", rev=1)  # the cache is not a field


@settings(max_examples=60, deadline=None)
@given(pair=pair_params, index=st.integers(0, 50))
def test_relabel_is_a_bijection_onto_new_lengths_that_commutes_with_eq(pair, index):
    relabelled = relabel(pair, index)
    mapping = relabelled.transform.mapping
    assert relabelled.transform.kind == "relabel"
    assert set(mapping) == set(pair_labels(pair))
    assert len(set(mapping.values())) == len(mapping)  # bijective
    for variant in ("A", "B"):
        for branch in ("current", "reveal", "override"):
            expected = {
                mapping[k]: v for k, v in resolve(pair.history(variant, branch), pair.query).items()
            }
            assert resolve(relabelled.history(variant, branch), relabelled.query) == expected
            assert relabelled.gold.of(variant).of(branch) == expected
    assert invert(relabelled) == pair
    assert relabel(pair, index) == relabelled  # deterministic by seed


def test_relabel_draws_every_label_from_one_distribution():
    # on the paper's pilot task ids (e01) are shorter than distractor ids (n001); after
    # relabelling, lengths are redrawn and no longer say which records are the task's
    same_length = 0
    task_shorter = 0
    for pair in PILOT:
        task = task_labels(pair)
        for index in range(5):
            mapping = relabel(pair, index).transform.mapping
            same_length += sum(len(new) == len(old) for old, new in mapping.items())
            ids = [r.id for r in pair.all_records()]
            task_ids = [mapping[i] for i in ids if i in task]
            other_ids = [mapping[i] for i in ids if i not in task]
            mean_task = sum(map(len, task_ids)) / len(task_ids)
            mean_other = sum(map(len, other_ids)) / len(other_ids)
            task_shorter += mean_task < mean_other
    labels = sum(len(pair_labels(p)) for p in PILOT) * 5
    assert same_length < labels * 0.25  # lengths change (rename keeps every one)
    assert 0.25 < task_shorter / (len(PILOT) * 5) < 0.75  # no side is systematically shorter


def test_relabel_uses_several_shapes():
    mapping = relabel(PILOT[0], 0).transform.mapping
    shapes = {("_" in label, "-" in label, label[1:].isdigit()) for label in mapping.values()}
    assert len(shapes) >= 3


# ------------------------------------------- rerev and revalue: revisions and values


@settings(max_examples=200, deadline=None)
@given(log=logs(max_size=10), seed=st.integers(0, 10_000))
def test_rerev_keeps_every_answer_of_any_log(log, seed):
    # E_q compares revisions only among one key's records: a per-key monotone remap
    # must leave every answer (ties, add arithmetic, replays, cycles) as it was
    maps = rev_maps(log, random.Random(seed))
    remapped = [rerev_record(r, maps) for r in log]
    for _key, table in maps.items():
        old = sorted(table)
        assert [table[r] for r in old] == sorted(table.values())  # strictly increasing
        assert len(set(table.values())) == len(old)
    assert resolve(remapped, KEYS) == resolve(log, KEYS)


@settings(max_examples=200, deadline=None)
@given(log=logs(max_size=10), seed=st.integers(0, 10_000))
def test_revalue_maps_every_answer_of_any_log_through_its_map(log, seed):
    # the tiny alphabet holds integers ("0", "7", "-2") that add records sum onto and
    # option labels / conditions equal to values: the map must keep all of it
    values = ValueMap((v for r in log for v in record_values(r)), random.Random(seed))
    revalued = [revalue_record(r, values) for r in log]
    assert resolve(revalued, KEYS) == values.answer(resolve(log, KEYS))
    drawn = list(values.table.values())
    assert len(set(drawn)) == len(drawn)  # a bijection


@settings(max_examples=60, deadline=None)
@given(pair=pair_params, index=st.integers(0, 50))
def test_rerev_and_revalue_are_verified_pairs_with_gold_mapped(pair, index):
    remapped = rerev(pair, index)
    assert remapped.transform.kind == "rerev"
    assert remapped.transform.mapping == {}
    assert remapped.gold == pair.gold == check_pair(remapped)
    assert [r.id for r in remapped.all_records()] == [r.id for r in pair.all_records()]
    revalued = revalue(pair, index)
    assert check_pair(revalued) == revalued.gold
    old_values = {v for r in pair.all_records() for v in record_values(r)}
    new_values = {v for r in revalued.all_records() for v in record_values(r)}
    assert len(new_values) == len(old_values)
    for variant in ("A", "B"):  # the same answers, read through one map
        for branch in ("current", "reveal", "override"):
            old = pair.gold.of(variant).of(branch)
            new = revalued.gold.of(variant).of(branch)
            assert [v is None for v in old.values()] == [v is None for v in new.values()]
    assert rerev(pair, index) == remapped
    assert revalue(pair, index) == revalued


@settings(max_examples=60, deadline=None)
@given(pair=pair_params, index=st.integers(0, 50))
def test_disguise_rewrites_every_part_of_a_record_and_keeps_every_answer(pair, index):
    disguised = disguise(pair, index)
    assert disguised.transform.kind == "disguise"
    assert check_pair(disguised) == disguised.gold
    # labels through the stored bijection, gold answers read through it and the values
    mapping = disguised.transform.mapping
    assert set(mapping) == set(pair_labels(pair))
    assert len(set(mapping.values())) == len(mapping)
    assert invert(disguised).query == pair.query
    values = {v for r in pair.all_records() for v in record_values(r)}
    for variant in ("A", "B"):
        for branch in ("current", "reveal", "override"):
            old = pair.gold.of(variant).of(branch)
            new = disguised.gold.of(variant).of(branch)
            assert [mapping[k] for k in old] == list(new)
            assert [v is None for v in old.values()] == [v is None for v in new.values()]

    # no record keeps both its labels and its (revision, values): the two parts a table
    # of the public data is keyed on (the tables of tests/compressors/test_protocol_leaks.py)
    def parts(record):
        return (record.op, record.id), (record.op, getattr(record, "rev", None),
                                        *record_values(record))  # fmt: skip

    before = [parts(r) for r in pair.all_records()]
    labels_kept = {p[0] for p in before} & {parts(r)[0] for r in disguised.all_records()}
    assert not labels_kept
    new_values = {v for r in disguised.all_records() for v in record_values(r)}
    assert len(new_values) == len(values)
    assert disguise(pair, index) == disguised


def test_disguise_keeps_a_natural_pairs_values():
    # its text states its values as written (as revalue, which does not apply there)
    from histories.natural import derive

    natural = derive("tzdata", None).pairs[0]
    disguised = disguise(natural, 0)
    assert check_pair(disguised) == disguised.gold
    assert sorted(v for r in disguised.all_records() for v in record_values(r)) == sorted(
        v for r in natural.all_records() for v in record_values(r)
    )
    assert sorted(r.text for r in disguised.all_records()) == sorted(
        r.text for r in natural.all_records()
    )


def _revs(pair, task):
    return (
        [r.rev for r in pair.all_records() if getattr(r, "rev", None) is not None and r.id in task],
        [r.rev for r in pair.all_records() if getattr(r, "rev", None) is not None
         and r.id not in task],
    )  # fmt: skip


def test_rerev_removes_the_revision_tell_of_the_pilot():
    # the paper's pilot: task revisions are 1 to 5, a distractor key's climb to 16, so
    # "smallest revision first" finds the task; after rerev a task revision is smaller
    # than a distractor's about as often as not
    def task_smaller(pairs):
        wins = total = 0
        for source, pair in pairs:
            task = task_labels(source)
            mine, theirs = _revs(pair, task)
            wins += sum(a < b for a in mine for b in theirs) + 0.5 * sum(
                a == b for a in mine for b in theirs
            )
            total += len(mine) * len(theirs)
        return wins / total

    assert task_smaller((p, p) for p in PILOT) > 0.7
    after = task_smaller((p, rerev(p, i)) for p in PILOT for i in range(3))
    assert 0.35 < after < 0.65


def test_revalue_removes_the_value_shape_tell_of_the_pilot():
    # distractor values are all word-123 in the pilot; task values are not always
    shape = re.compile(r"[a-z]+-\d{3}")

    def plain_share(pairs):
        shares = {True: [0, 0], False: [0, 0]}
        for source, pair in pairs:
            task = task_labels(source)
            for record in pair.all_records():
                for value in record_values(record):
                    counts = shares[record.id in task]
                    counts[0] += bool(shape.fullmatch(value))
                    counts[1] += 1
        return {side: k / n for side, (k, n) in shares.items()}

    before = plain_share((p, p) for p in PILOT)
    assert before[False] == 1.0
    assert before[True] < 0.95
    after = plain_share((p, revalue(p, i)) for p in PILOT for i in range(3))
    assert abs(after[True] - after[False]) < 0.12  # one distribution for both
    assert 0.1 < after[False] < 0.5


def test_revalue_keeps_integers_integers_and_long_values_their_length():
    counter = build_pair(
        FAMILIES["counter_reversal"], 0, GenerationConfig(families=["counter_reversal"],
                                                          pairs_per_family=1)
    )  # fmt: skip
    revalued = revalue(counter, 0)
    for variant in ("A", "B"):
        for branch in ("current", "reveal", "override"):
            old = counter.gold.of(variant).of(branch)
            new = revalued.gold.of(variant).of(branch)
            assert {k: int(v) for k, v in new.items()} != {k: int(v) for k, v in old.items()}
            offset = {int(new[k]) - int(old[k]) for k in old}
            assert len(offset) == 1  # one offset for every integer, sums included
    exact = build_pair(
        FAMILIES["exact_identifier"], 0, GenerationConfig(families=["exact_identifier"],
                                                          pairs_per_family=1)
    )  # fmt: skip
    revalued = revalue(exact, 0)
    a, b = (revalued.gold.of(v).reveal[revalued.query[0]] for v in ("A", "B"))
    old_a = exact.gold.A.reveal[exact.query[0]]
    assert len(a) == len(b) == len(old_a)
    assert a != old_a
    assert sum(x != y for x, y in zip(a, b, strict=True)) == 1  # still one character apart


def test_a_broken_revalue_is_caught_by_reverification(monkeypatch):
    import histories._transforms as transforms

    monkeypatch.setattr(transforms, "_map_gold", lambda gold, change: gold)  # gold not mapped
    with pytest.raises(TransformError, match="gold"):
        revalue(PILOT[0], 0)


def test_revalue_leaves_integers_alone_when_one_is_not_canonical():
    from histories import AddRecord, SetRecord

    log = [
        SetRecord(id="r1", key="a", value="07", rev=1),
        AddRecord(id="r2", key="a", delta=3, rev=2),
        SetRecord(id="r3", key="b", value="7", rev=1),
    ]
    values = ValueMap((v for r in log for v in record_values(r)), random.Random(0))
    assert values.offset == 0  # "07" + c and "7" + c would read alike
    revalued = [revalue_record(r, values) for r in log]
    assert resolve(revalued, ["a", "b"]) == resolve(log, ["a", "b"]) == {"a": "10", "b": "7"}


@settings(max_examples=40, deadline=None)
@given(pair=pair_params, index=st.integers(0, 4))
def test_rechunk_cuts_every_prefix_chunk_and_changes_nothing_else(pair, index):
    """rechunk streams the same records in the same order in smaller chunks: every
    old chunk boundary stays a boundary (in A and B), no new chunk is larger than the
    halved size, futures and gold are untouched, and E_q still gives the gold."""
    out = rechunk(pair, index)
    size = rechunk_size(pair.chunk_size, index)
    assert size == max(1, pair.chunk_size >> (index + 1))
    for variant in ("A", "B"):
        old, new = pair.variants.of(variant).chunks, out.variants.of(variant).chunks
        assert [r for c in new for r in c] == [r for c in old for r in c]
        assert all(0 < len(c) <= size for c in new)
        ends, total = set(), 0
        for c in new:
            total += len(c)
            ends.add(total)
        total = 0
        for c in old:
            total += len(c)
            assert total in ends  # an old boundary is still one
        assert len(new) == sum(-(-len(c) // size) for c in old)
    assert rechunked_updates(pair, index) == len(out.variants.A.chunks)
    assert out.futures == pair.futures
    assert out.gold == pair.gold
    assert out.transform is not None
    assert out.transform.kind == "rechunk"
    check_pair(out)


def test_rechunk_halves_the_pilots_chunks_per_instance():
    pair = PILOT[0]
    out = transform(pair, "rechunk", 3)
    assert [p.pair_id for p in out] == [f"{pair.pair_id}~rechunk0{i}" for i in range(3)]
    assert [max(map(len, p.variants.A.chunks)) for p in out] == [4, 2, 1]
    assert [len(p.variants.A.chunks) for p in out] == [rechunked_updates(pair, i) for i in range(3)]
    assert (
        len(pair.variants.A.chunks) < len(out[0].variants.A.chunks) < len(out[2].variants.A.chunks)
    )


def test_a_transform_is_one_function_and_one_registration(tmp_path):
    """docs/architecture.md's row for a new transform: a function and one
    ``register_transform``; the plan accepts it, the run streams it, and the flags it
    declares decide its checks (an order-only transform gets the order check, and a
    shortcut test its gap and its place in the floor)."""
    import json

    from typer.testing import CliRunner

    from audit.cli import app
    from histories import TRANSFORMS, Transform, Variant, register_transform
    from histories._pair import TransformInfo, Variants

    def mirror(pair, index, seed):
        """The prefix streamed back to front (both variants: one slot order)."""
        variants = Variants(**{
            name: Variant(chunks=[list(reversed(c)) for c in reversed(v.chunks)])
            for name, v in (("A", pair.variants.A), ("B", pair.variants.B))
        })  # fmt: skip
        mirrored = pair.model_copy(update={
            "variants": variants, "pair_id": f"{pair.pair_id}~mirror{index:02d}",
            "source_pair_id": pair.pair_id, "transform": TransformInfo(kind="mirror", index=index),
        })  # fmt: skip
        check_pair(mirrored)
        return mirrored

    register_transform(Transform("mirror", mirror, order_only=True, reorders=True))
    try:
        out = tmp_path / "run"
        result = CliRunner().invoke(app, [
            "run", "--conditions", "frontier,tail,probe_newest", "--transforms",
            "identity,mirror:1", "--workers", "1", "--quiet", "--out", str(out),
        ])  # fmt: skip
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        mirrored = {e["condition"] for e in summary["scores"] if e["transform"] == "mirror"}
        assert mirrored == {"frontier", "tail", "probe_newest"}
        gaps = {(g["condition"], g["transform"]) for g in summary["shortcut_gaps"]}
        assert ("frontier", "mirror") in gaps
        assert summary["probe_matches"], "tail is no better than probe_newest"
        for finding in summary["probe_matches"]:  # the floor is tested under it too
            assert {t["transform"] for t in finding["tests"]} == {"identity", "mirror"}
    finally:
        del TRANSFORMS["mirror"]
