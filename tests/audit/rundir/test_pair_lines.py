"""A run's pairs are held as their JSON lines: what the caller holds does not grow by a
``Pair`` object per pair, and the jobs are the same as from ``Pair`` objects."""

from __future__ import annotations

import tracemalloc

from audit.engine._executor import plan_jobs
from audit.engine._llm_stage import sample_pairs
from audit.plan import RunPlan
from audit.rundir import pairs_sha256, preset_source
from audit.rundir._pairs import PairLines
from histories import PRESETS, Pair, generate

BOUND = 15_000
"""Bytes a pair may cost its holder: its JSON line is about 7 KB; a ``Pair`` object,
as ``generate`` returns it, about 44 KB of Python allocations."""


def _held(per_family: int) -> tuple[PairLines, int, int]:
    """The preset's pairs, the bytes they keep and the peak while they were made."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _source, pairs, _digest = preset_source("cca-pilot", pairs_per_family=per_family)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return pairs, kept - before, peak - before


def test_pairs_are_held_as_lines_and_their_peak_does_not_grow_by_a_pair_object() -> None:
    small, _kept_small, peak_small = _held(2)
    large, kept_large, peak_large = _held(8)
    added = len(large) - len(small)
    assert isinstance(large, PairLines)
    assert added == 36
    assert kept_large / len(large) < BOUND
    assert (peak_large - peak_small) / added < BOUND


def test_lines_give_the_same_pairs_jobs_and_digest_as_pair_objects() -> None:
    config = PRESETS["cca-pilot"].model_copy(update={"pairs_per_family": 2})
    objects = generate(config)
    _source, lines, digest = preset_source("cca-pilot", pairs_per_family=2)
    assert [pair.to_json() for pair in objects] == [pair.to_json() for pair in lines]
    assert digest == pairs_sha256(objects)
    plan = RunPlan(
        pairs={"test": "cca-pilot, 2 per family"},
        pairs_sha256=digest,
        conditions=["full"],
        compressor_versions={"full": "full"},
        budgets=[1200],
        transforms=["identity"],
    )
    jobs = plan_jobs(plan, lines)
    assert jobs == plan_jobs(plan, objects)
    # the job carries the held line itself: the caller never parsed a pair to plan it
    assert all(job.pair_json is line for job, line in zip(jobs, lines.lines, strict=True))
    assert [p.to_json() for p in sample_pairs(lines, 7)] == [
        p.to_json() for p in sample_pairs(objects, 7)
    ]
    assert isinstance(lines[3], Pair)
    assert lines[1:3].lines == lines.lines[1:3]
