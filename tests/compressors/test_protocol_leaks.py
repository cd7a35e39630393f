"""Nothing a compressor receives names a source pair, a record, a variant or the
generator's state beyond what the rendered history says.  Real runs through the
command line and the audit's own streaming plans; the oracles are plugins written
the way an adversary would write them, from the public generator."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.engine import run_job
from audit.engine._llm_stage import plan_units
from audit.plan import LLMStagePlan, parse_transforms
from compressors import parse_spec
from histories import PRESETS, Pair, generate, transform

runner = CliRunner()

ORACLES = '''
from compressors import Compressor, Stream, pack_positions
from histories import PRESETS, generate
from histories._transforms import record_labels, record_values
from audit.engine._streaming import plan_variant

# built once, at import, from the public seeded generator: the default audit's data
# without distractors has exactly the task's records (the draft is drawn first)
CONFIG = PRESETS["cca-pilot"]
TASK_IDS = {
    r.id
    for pair in generate(CONFIG.model_copy(update={"distractors": 0, "future_distractors": 0}))
    for r in pair.all_records()
}
SEEDS, IDS = {}, {}
for pair in generate(CONFIG):
    for variant in ("A", "B"):
        prefix, futures = plan_variant(pair, variant)
        for view, _, _ in [*prefix, *(c for chunks in futures.values() for c in chunks)]:
            for record, seed in zip(view.records, view.seed):
                SEEDS[seed] = IDS[record.id] = record.id in TASK_IDS


class _Table(Compressor):
    """Newest first, the records its table calls the task's before the ones it cannot
    place, never one it calls a distractor: with no hit, a newest-first packer."""

    def task(self, chunk):
        raise NotImplementedError

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        status = [None] * (len(stream) - len(chunk.records)) + self.task(chunk)
        newest = range(len(stream) - 1, -1, -1)
        order = [p for p in newest if status[p] is True] + [p for p in newest if status[p] is None]
        return stream.dump(pack_positions(order, stream.sizes, budget))


class SeedOracle(_Table):
    """Looks up every record's phrasing seed (ChunkView.seed)."""

    name = "seed_oracle"

    def task(self, chunk):
        return [SEEDS.get(seed) for seed in chunk.seed]


class IdOracle(_Table):
    """Looks up every record's id: a memory of the public data, no protocol field."""

    name = "id_oracle"

    def task(self, chunk):
        return [IDS.get(r.id) for r in chunk.records]


def _parts(record):
    """Two tables an adversary keys on: what each single transform leaves alone."""
    labels = (record.op, *record_labels(record))
    content = (record.op, getattr(record, "rev", None), *record_values(record))
    return labels, content


BY_PART = ({}, {})
for pair in generate(CONFIG):
    for record in pair.all_records():
        for table, part in zip(BY_PART, _parts(record)):
            seen = table.setdefault(part, record.id in TASK_IDS)
            if seen != (record.id in TASK_IDS):
                table[part] = None  # ambiguous: no verdict from this part


class ContentOracle(_Table):
    """Looks up each record's labels, or failing that its revision and values, in
    tables of the public data: each default transform rewrites one of the two."""

    name = "content_oracle"

    def task(self, chunk):
        found = []
        for record in chunk.records:
            labels, content = _parts(record)
            hit = BY_PART[0].get(labels)
            found.append(hit if hit is not None else BY_PART[1].get(content))
        return found
'''


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One default-shaped run of the oracles beside the baselines: its summary."""
    where = tmp_path_factory.mktemp("oracles")
    (where / "leak_oracles.py").write_text(textwrap.dedent(ORACLES))
    sys.path.insert(0, str(where))
    try:
        out = where / "run"
        conditions = ",".join(
            f"leak_oracles:{name}" for name in ("SeedOracle", "IdOracle", "ContentOracle")
        )
        result = runner.invoke(app, [
            "run", "--conditions", f"{conditions},baselines", "--transforms", ORACLE_TRANSFORMS,
            "--workers", "1", "--quiet", "--out", str(out),
        ])  # fmt: skip
    finally:
        sys.path.remove(str(where))
        sys.modules.pop("leak_oracles", None)
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())


ORACLE_TRANSFORMS = "identity,rename:2,permute:2,relabel:2,rerev:2,revalue:2,disguise:2"
KINDS = [kind.partition(":")[0] for kind in ORACLE_TRANSFORMS.split(",")]


def joint(summary: dict, condition: str, transform: str) -> int:
    return next(
        e["source pairs"]["joint_J"]["k"]
        for e in summary["scores"]
        if e["condition"] == condition and e["transform"] == transform and e["family"] == "all"
    )


def probe_floor(summary: dict, transform: str) -> int:
    probes = {e["condition"] for e in summary["scores"] if e["condition"].startswith("probe_")}
    assert len(probes) >= 5
    return max(joint(summary, probe, transform) for probe in probes)


def test_a_seed_table_built_from_the_public_generator_falls_to_the_floor(oracle_run: dict):
    # before: the seed was the record's identity in the source pair, the same under
    # every transform, and the table scored 24/24 joint J under every one of them
    seed, ids = "seed_oracle", "id_oracle"
    for kind in KINDS:
        # the seed tells no more than the record's own id: where the records are the
        # public data's (identity, permute) both tables know them
        assert joint(oracle_run, seed, kind) <= joint(oracle_run, ids, kind), kind
        if kind not in ("identity", "permute"):  # new content: the table is blind
            assert joint(oracle_run, seed, kind) <= probe_floor(oracle_run, kind), kind


def test_a_table_of_record_parts_is_caught_by_the_disguise(oracle_run: dict):
    # before: keyed on (op, labels) and on (op, revision, values), the table scored
    # 84/84 joint J under every default transform (each rewrites one part), was named
    # the best condition and was not flagged
    table = "content_oracle"
    for kind in KINDS:
        if kind != "disguise":  # the attack is real: one table survives each one
            assert joint(oracle_run, table, kind) > probe_floor(oracle_run, kind), kind
    assert joint(oracle_run, table, "disguise") <= probe_floor(oracle_run, "disguise")
    flagged = {f["condition"]: f for f in oracle_run["probe_matches"]}
    assert table in flagged
    failed = [t["transform"] for t in flagged[table]["tests"] if not t["beats"]]
    assert "disguise" in failed


def test_every_llm_unit_streams_the_records_its_json_line_gives():
    # before: a unit streamed the generator's own objects, whose set fields told a
    # distractor (made by trusted(), expires set to None) from a task record (a
    # validated constructor), and which were made task records first
    pairs = generate(PRESETS["cca-pilot"])
    made = {id(r) for pair in pairs for r in pair.all_records()}
    stage = LLMStagePlan(writer="w", writer_model="m", conditions=[parse_spec("prose_high")],
                         sample=24, repeats=1, transforms=["identity", "relabel:1"])  # fmt: skip
    units = plan_units(stage, pairs, [1200], 0)
    assert len(units) == 48
    for unit in units:
        for record in unit.pair.all_records():
            assert record.model_fields_set == set(json.loads(record.canonical_line))
            assert id(record) not in made


SPY = """
from compressors import Compressor, Stream

SEEN = []


class Spy(Compressor):
    '''Keeps everything; notes the objects of every chunk it is shown.'''

    name = "spy"

    def update(self, memory, chunk, query_keys, budget):
        SEEN.append((chunk.lines, tuple(map(id, chunk.records))))
        return Stream.of(memory, chunk).dump()
"""


def test_variant_b_shows_record_objects_of_its_own(plugin):
    # before: a record B shared with A was A's object, so B's other records, made
    # apart, had the highest id() in their chunk in 9 of 20 chunks (chance: about 3)
    leak_spy = importlib.import_module(plugin("leak_spy", SPY))  # written above, not a dependency

    pairs = generate(PRESETS["cca-pilot"])[:6]
    for pair in pairs:  # as the deterministic stage receives it: parsed from its line
        run_job("k", Pair.model_validate_json(pair.to_json()), [(parse_spec("leak_spy:Spy"), 100_000)],
                parse_transforms("rename:1,relabel:1"), 0)  # fmt: skip
    future = {
        line
        for pair in pairs
        for kind in ("rename", "relabel")
        for instance in transform(pair, kind, 1, 0)
        for chunk in (*instance.futures.reveal, *instance.futures.override)
        for line in (r.canonical_line for r in chunk)
    }
    calls: dict[tuple[str, ...], list[tuple[int, ...]]] = {}
    for lines, ids in leak_spy.SEEN:
        if not set(lines) & future:  # a prefix chunk
            calls.setdefault(lines, []).append(ids)
    # a chunk both variants hold, streamed on two memories: once with A's objects,
    # once with B's (each variant streams its prefix once)
    twice = [ids for ids in calls.values() if len(ids) > 1]
    assert len(twice) > 10
    assert all(len(set(ids)) == len(ids) for ids in twice)
