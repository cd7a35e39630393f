"""The yardstick: the same reads as `audit run --conditions tail` in a plain Python loop.

Run: ``python benchmarks/bench_loop.py [--transforms identity,rename:40,permute:40]``.
The loop streams every instance of every cca-pilot source pair through ``tail`` at
1200 B (each variant's prefix, then each future from there; a memory over the budget
becomes empty) and reads every branch with the exact interpreter; nothing is stored
but each read's 0/1.  The pipeline then runs the same audit (one worker, into a
scratch run directory), and the two are checked equal read by read before their CPU
seconds per read are compared: what the pipeline costs above the reads themselves
(bookkeeping, equivariance checks, digests, storing, scoring).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from audit.engine import execute
from audit.plan import RunPlan
from compressors import ChunkView, build, load
from histories import BRANCHES, FUTURES, PRESETS, VARIANTS, LogIndex, generate, transform

BUDGET = 1200


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def plain_loop(plan: RunPlan, pairs: list) -> dict[tuple[str, str, str], int]:
    """(pair instance, variant, branch) -> correct, by the plainest loop there is."""
    compressor = build("tail")
    correct: dict[tuple[str, str, str], int] = {}
    for source in pairs:
        every = (transform(source, t.kind, t.count, plan.seed) for t in plan.transforms)
        for pair in (instance for instances in every for instance in instances):
            query = tuple(pair.query)
            for variant in VARIANTS:
                memory = ""
                for chunk in pair.variants.of(variant).chunks:
                    memory = compressor.update(memory, ChunkView(chunk, pair.render), query, BUDGET)
                    if len(memory.encode()) > BUDGET:
                        memory = ""
                memories = {"current": memory}
                for future in FUTURES:
                    streamed = memory
                    for chunk in pair.futures.of(future):
                        view = ChunkView(chunk, pair.render)
                        streamed = compressor.update(streamed, view, query, BUDGET)
                        if len(streamed.encode()) > BUDGET:
                            streamed = ""
                    memories[future] = streamed
                assert pair.gold is not None
                for branch in BRANCHES:
                    try:
                        answer = LogIndex(load(memories[branch])).resolve(query)
                    except Exception:
                        answer = None
                    gold = pair.gold.of(variant).of(branch)
                    correct[(pair.pair_id, variant, branch)] = int(answer == gold)
    return correct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transforms", default="identity,rename:40,permute:40")
    args = parser.parse_args()
    pairs = generate(PRESETS["cca-pilot"])
    plan = RunPlan(
        pairs={"preset": "cca-pilot"}, pairs_sha256="benchmark", conditions=["tail"],
        compressor_versions={"tail": build("tail").label}, budgets=[BUDGET],
        transforms=args.transforms.split(","),
    )  # fmt: skip
    before, start = _cpu(), time.perf_counter()
    loop = plain_loop(plan, pairs)
    loop_cpu, loop_wall = _cpu() - before, time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        before, start = _cpu(), time.perf_counter()
        execute(Path(tmp) / "run", plan, pairs, workers=1)
        run_cpu, run_wall = _cpu() - before, time.perf_counter() - start
        table = pq.read_table(Path(tmp) / "run" / "results.parquet",
                              columns=["pair_id", "variant", "branch", "correct"])  # fmt: skip
    found = {
        (p, v, b): c
        for p, v, b, c in zip(*(table[n].to_pylist() for n in table.column_names), strict=True)
    }
    assert found == loop, "the pipeline and the plain loop disagree"
    reads = len(loop)
    print(f"{reads} reads (tail, {args.transforms}), the same answers read by read")
    print(
        f"plain loop: {loop_cpu:.2f} CPU s ({loop_wall:.2f} s wall), {1e6 * loop_cpu / reads:.1f} us a read"
    )
    print(
        f"pipeline:   {run_cpu:.2f} CPU s ({run_wall:.2f} s wall), {1e6 * run_cpu / reads:.1f} us a read"
    )
    print(f"pipeline / plain loop: {run_cpu / loop_cpu:.2f}x CPU per read")


if __name__ == "__main__":
    main()
