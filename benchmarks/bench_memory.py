"""Peak memory of a large deterministic audit (>= 100,000 reads) through ``audit.engine.execute``.

Run: ``python benchmarks/bench_memory.py [--transforms identity,rename:40,permute:40]
[--workers 1,2]``.

The cca-pilot pairs, every deterministic condition, budget 1200, the exact reader, into a
fresh temporary run directory: 104,976 reads with the default transforms.  Each
measurement runs in a fresh child process, so its peak RSS is its own:

- ``tracemalloc``: one worker (everything in one process), with ``tracemalloc`` on: the
  peak of Python allocations (slower: tracing costs time), and the process's peak RSS;
- ``rss, N workers``: without tracing: the peak RSS (``ru_maxrss``) of the main process
  (the writer: store, results, summary) and the largest of its child processes (workers; with one worker, any helper child).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def _maxrss_mib(who: int) -> float:
    kib = resource.getrusage(who).ru_maxrss  # KiB on Linux
    return kib / 1024 if sys.platform != "darwin" else kib / (1024 * 1024)


def measure(transforms: str, workers: int, trace: bool) -> dict[str, float | int]:
    from bench_audit import pilot_audit  # the same audit as the speed benchmark

    from audit.engine import execute

    if trace:
        tracemalloc.start()
    config, pairs = pilot_audit(transforms)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = execute(Path(tmp) / "run", config, pairs, workers=workers)
        seconds = time.perf_counter() - start
        store_bytes = sum(f.stat().st_size for f in (Path(tmp) / "run").iterdir())
    result: dict[str, float | int] = {
        "reads": int(summary["n_reads"]),
        "seconds": seconds,
        "rss_self_mib": _maxrss_mib(resource.RUSAGE_SELF),
        "rss_children_mib": _maxrss_mib(resource.RUSAGE_CHILDREN),
        "run_dir_mib": store_bytes / (1024 * 1024),
    }
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result["traced_peak_mib"] = peak / (1024 * 1024)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transforms", default="identity,rename:40,permute:40")
    parser.add_argument("--workers", default="1,2", help="Worker counts for the RSS runs.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        workers, trace = args.child.split(":")
        print(json.dumps(measure(args.transforms, int(workers), trace == "trace")))
        return

    load = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"audit: cca-pilot, every deterministic condition, transforms {args.transforms}")
    runs = [("tracemalloc, 1 worker", "1:trace")] + [
        (f"rss, {w} worker(s)", f"{w}:plain") for w in args.workers.split(",")
    ]
    for label, child in runs:
        done = subprocess.run(
            [sys.executable, __file__, "--transforms", args.transforms, "--child", child],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(done.stdout.strip().splitlines()[-1])
        line = (
            f"{label}: {r['reads']:,} reads in {r['seconds']:.1f} s; peak RSS main "
            f"{r['rss_self_mib']:.0f} MiB, largest child process {r['rss_children_mib']:.0f} MiB"
        )
        if "traced_peak_mib" in r:
            line += f"; tracemalloc peak {r['traced_peak_mib']:.1f} MiB"
        line += f"; run directory {r['run_dir_mib']:.1f} MiB"
        print(line)


if __name__ == "__main__":
    main()
