"""The deterministic cca-pilot audit end to end: wall time and reads per second.

Run: ``python benchmarks/bench_audit.py [--transforms identity,rename:40,permute:40]``.
Every deterministic condition (strict and archive), exact reader, budget 1200,
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
import tempfile
import time
from pathlib import Path

from audit._run import RunConfig, execute
from compressors import build, deterministic_builtins
from histories import PRESETS, generate


def _cpu() -> tuple[float, float]:
    """(main process, finished child processes) CPU seconds, user plus system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transforms", default="identity,rename:40,permute:40")
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    pairs = generate(PRESETS["cca-pilot"])
    conditions = deterministic_builtins()
    config = RunConfig(
        pairs={"preset": "cca-pilot"},
        pairs_sha256="benchmark",
        conditions=conditions,
        compressor_versions={c: build(c).label for c in conditions},
        budgets=[1200],
        transforms=args.transforms.split(","),
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"audit: cca-pilot, {len(conditions)} conditions, transforms {args.transforms}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    timings = {}
    for workers in (int(w) for w in args.workers.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            before = _cpu()
            start = time.perf_counter()
            summary = execute(Path(tmp) / "run", config, pairs, workers=workers)
            seconds = time.perf_counter() - start
            main_cpu, child_cpu = (
                after - first for after, first in zip(_cpu(), before, strict=True)
            )
        timings[workers] = seconds
        reads = summary["n_reads"]
        print(
            f"{workers} worker(s): {seconds:.1f} s wall, {reads} reads, {reads / seconds:,.0f} reads/s;"
            f" CPU {child_cpu:.1f} s in worker processes, {main_cpu:.1f} s in the main process"
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if len(timings) > 1:
        low, high = min(timings), max(timings)
        print(f"speed-up {high} vs {low} workers: {timings[low] / timings[high]:.2f}x")


if __name__ == "__main__":
    main()
