"""The deterministic audit end to end: wall time and reads per second.

Run: ``python benchmarks/bench_audit.py [--transforms identity,rename:40,permute:40]``
(cca-pilot), or ``--preset natural`` for the natural packs' sample.
Every deterministic condition (strict, archive and probe), exact reader, budget 1200,
into a fresh temporary run directory; one and two worker processes side by side.
Also printed: the CPU seconds of the worker processes and of the main process (the
main process stores results and scores them), and the load average, since a busy
machine makes every wall time longer.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from audit.engine import execute
from audit.plan import RunPlan
from audit.rundir import preset_source
from compressors import build, deterministic_builtins
from histories import Pair


def _cpu() -> tuple[float, float]:
    """(main process, finished child processes) CPU seconds, user plus system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pilot_audit(transforms: str, preset: str = "cca-pilot") -> tuple[RunPlan, list[Pair]]:
    """The benchmarked audit: a preset's pairs, every deterministic condition, budget 1200."""
    conditions = deterministic_builtins()
    source, pairs, digest = preset_source(preset)
    config = RunPlan(
        pairs=source,
        pairs_sha256=digest,
        conditions=conditions,
        compressor_versions={c: build(c).label for c in conditions},
        budgets=[1200],
        transforms=transforms.split(","),
    )
    return config, pairs


def measure(workers: int, transforms: str, preset: str) -> tuple[float, int]:
    """One audit in this process: prints a line, returns (wall seconds, reads)."""
    config, pairs = pilot_audit(transforms, preset)
    with tempfile.TemporaryDirectory() as tmp:
        before = _cpu()
        start = time.perf_counter()
        summary = execute(Path(tmp) / "run", config, pairs, workers=workers)
        seconds = time.perf_counter() - start
        main_cpu, child_cpu = (after - first for after, first in zip(_cpu(), before, strict=True))
    reads = int(summary["n_reads"])
    print(
        f"{workers} worker(s): {seconds:.1f} s wall, {reads} reads, {reads / seconds:,.0f} reads/s;"
        f" CPU {child_cpu:.1f} s in worker processes, {main_cpu:.1f} s in the main process",
        flush=True,
    )
    return seconds, reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transforms", default="identity,rename:40,permute:40")
    parser.add_argument("--preset", default="cca-pilot", help="cca-pilot or natural")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    if args.one:
        measure(counts[0], args.transforms, args.preset)
        return
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"audit: {args.preset}, {len(deterministic_builtins())} deterministic conditions, "
        f"transforms {args.transforms}"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    timings = {}
    for workers in counts:
        # each measurement in a fresh process: workers are forked from the main process,
        # and one that already ran an audit would hand them its warm caches and heap
        out = subprocess.run(
            [sys.executable, __file__, "--one", "--workers", str(workers),
             "--transforms", args.transforms, "--preset", args.preset],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        print(out, end="")
        timings[workers] = float(out.split(" s wall")[0].rsplit(" ", 1)[-1])
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if len(timings) > 1:
        low, high = min(timings), max(timings)
        print(f"speed-up {high} vs {low} workers: {timings[low] / timings[high]:.2f}x")


if __name__ == "__main__":
    main()
