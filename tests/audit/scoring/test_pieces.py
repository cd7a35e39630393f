"""Scores counted a job at a time equal the whole frame's, and what the
count holds does not grow with the reads."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from audit.engine import execute
from audit.plan import RunPlan
from audit.rundir import RESULTS_PARQUET, STORED_SCHEMA, label_readers
from audit.rundir._results import job_runs
from audit.scoring import SCORED_COLUMNS, score_pieces, score_results
from compressors import build, deterministic_builtins
from histories import Pair

COLUMNS = [c for c in SCORED_COLUMNS if c in STORED_SCHEMA.names]


@pytest.fixture(scope="module")
def run(pilot: tuple[Pair, ...], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: every deterministic condition, two pairs of each family."""
    conditions = deterministic_builtins()
    plan = RunPlan(
        pairs={"test": "cca-pilot, every 7th pair"},
        pairs_sha256="test",
        conditions=conditions,
        compressor_versions={c: build(c).label for c in conditions},
        budgets=[600, 1200],
        transforms=["identity", "rename:2", "permute:1", "rerev:1", "revalue:1", "disguise:1"],
        seed=7,
    )
    out = tmp_path_factory.mktemp("pieces") / "run"
    execute(out, plan, pilot[::7])
    return out


def _pieces(run: Path, times: int = 1) -> Iterator[pd.DataFrame]:
    """The run's reads a job at a time (a row group holds whole jobs)."""
    with pq.ParquetFile(run / RESULTS_PARQUET) as handle:
        for _ in range(times):
            for group in range(handle.num_row_groups):
                table = handle.read_row_group(group, columns=COLUMNS)
                keys = handle.read_row_group(group, columns=["job_key"])["job_key"]
                for _key, start, rows in job_runs(keys):
                    yield label_readers(table.slice(start, rows).to_pandas())


def test_scores_counted_job_by_job_equal_the_whole_frames(run: Path) -> None:
    frame = label_readers(pq.read_table(run / RESULTS_PARQUET, columns=COLUMNS).to_pandas())
    conditions = ["full", "recency"]
    whole = score_results(frame, conditions)
    pieces, reads, pairs = score_pieces(_pieces(run), conditions)
    assert len(list(_pieces(run))) == 12  # the jobs
    assert (reads, pairs) == (len(frame), frame["source_pair_id"].nunique())
    pd.testing.assert_frame_equal(pieces.cells, whole.cells)
    pd.testing.assert_frame_equal(pieces.pair_bytes, whole.pair_bytes)
    assert list(pieces.pairs) == list(whole.pairs)
    for name in whole.pairs:
        pd.testing.assert_frame_equal(pieces.pairs[name], whole.pairs[name])
    assert pieces.systems == whole.systems
    assert pieces.families == whole.families
    assert pieces.kinds == whole.kinds
    assert pieces.metrics == whole.metrics
    # the same reads cut otherwise (two halves of the file) count the same
    halves = [frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]]
    pd.testing.assert_frame_equal(score_pieces(halves, conditions)[0].cells, whole.cells)


def test_what_the_count_holds_does_not_grow_with_the_reads(run: Path) -> None:
    """The same jobs read four times over: four times the reads, the same cells and
    pairs; the whole frame of them would hold four times the memory."""

    def peak(times: int) -> int:
        tracemalloc.start()
        try:
            score_pieces(_pieces(run, times))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(4) < 1.2 * peak(1)
