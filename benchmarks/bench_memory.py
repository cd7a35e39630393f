"""Memory, disk and time of deterministic audits as their reads grow (``audit.engine.execute``).

Run: ``python benchmarks/bench_memory.py [--sweep 4,14,36] [--transforms ...]
[--workers 2]``.

Every measurement runs in a fresh child process (its own peak RSS), into a fresh
temporary run directory, with the local process pool:

- ``--sweep``: real audits, the default `audit run`'s (every deterministic condition,
  the default transforms, budget 1200, the exact reader) over the cca-pilot preset with
  N pairs per family for each N given (14 is the default audit: 84 pairs, 392,616
  reads): reads, wall and CPU time (the main process and its pool), the main process's
  peak RSS, the largest child's (a pool worker or the scoring child) and the run
  directory's size, then per million reads.
- The main process at 10x and 100x the default's reads was measured by a replay of
  cached job results through ``execute`` (docs/scaling.md); that mode replaced private
  functions of the executor, which a benchmark may not reach, and lives only in the
  history (commit 94b118c).
- neither: the original measurement (``--transforms``, cca-pilot): one worker with
  ``tracemalloc``, then the peak RSS with each of ``--workers``.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_TRANSFORMS = "identity,rename:5,permute:5,relabel:5,rerev:10,revalue:10,disguise:5"
"""The default `audit run`'s transforms."""
DEFAULT_PER_FAMILY = 14
"""The cca-pilot preset's pairs per family (6 families: 84 pairs, the default audit)."""


def _maxrss_mib(who: int) -> float:
    kib = resource.getrusage(who).ru_maxrss  # KiB on Linux
    return kib / 1024 if sys.platform != "darwin" else kib / (1024 * 1024)


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


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
        store_bytes = _dir_bytes(Path(tmp) / "run")
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


def default_audit(per_family: int) -> tuple[Any, Sequence[Any]]:
    """The default `audit run`'s plan over the cca-pilot preset with ``per_family``
    pairs per family, the pairs held as `audit run` holds them."""
    from audit.plan import RunPlan
    from audit.rundir import preset_source
    from compressors import build, deterministic_builtins

    _source, pairs, _digest = preset_source("cca-pilot", pairs_per_family=per_family)
    conditions = deterministic_builtins()
    plan = RunPlan(
        pairs={"benchmark": f"cca-pilot, {per_family} per family"},
        pairs_sha256="benchmark",
        conditions=conditions,
        compressor_versions={c: build(c).label for c in conditions},
        budgets=[1200],
        transforms=DEFAULT_TRANSFORMS.split(","),
    )
    return plan, pairs


def timed_execute(plan: Any, pairs: Sequence[Any], workers: int) -> dict[str, Any]:
    """Run ``execute`` into a fresh directory; the figures of the run."""
    from audit.engine import execute

    rss_before = _maxrss_mib(resource.RUSAGE_SELF)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        before = _cpu()
        start = time.perf_counter()
        summary = execute(out, plan, pairs, workers=workers)
        seconds = time.perf_counter() - start
        main_cpu, child_cpu = (a - b for a, b in zip(_cpu(), before, strict=True))
        files = {f.name: f.stat().st_size for f in out.iterdir() if f.is_file()}
    return {
        "reads": int(summary["n_reads"]),
        "jobs": len(pairs),
        "seconds": seconds,
        "main_cpu": main_cpu,
        "child_cpu": child_cpu,
        "rss_before_mib": rss_before,
        "rss_self_mib": _maxrss_mib(resource.RUSAGE_SELF),
        "rss_children_mib": _maxrss_mib(resource.RUSAGE_CHILDREN),
        "run_dir_bytes": sum(files.values()),
        "files": files,
    }


def sweep_point(per_family: int, workers: int) -> dict[str, Any]:
    plan, pairs = default_audit(per_family)
    return timed_execute(plan, pairs, workers)


def _child(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *command],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _line(label: str, r: dict[str, Any]) -> str:
    cpu = r["main_cpu"] + r["child_cpu"]
    million = r["reads"] / 1e6
    return (
        f"{label}: {r['reads']:>11,} reads, {r['jobs']:>5,} jobs; {r['seconds']:7.1f} s wall, "
        f"CPU {cpu:7.1f} s ({r['main_cpu']:.1f} main); main peak RSS {r['rss_self_mib']:5.0f} "
        f"MiB ({r['rss_before_mib']:.0f} before execute), largest child "
        f"{r['rss_children_mib']:5.0f} MiB; run directory {r['run_dir_bytes'] / 1e6:7.1f} MB; "
        f"per million reads: {r['run_dir_bytes'] / 1e6 / million:5.1f} MB, "
        f"{cpu / million:6.1f} CPU s, {r['seconds'] / million:6.1f} s wall"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transforms", default="identity,rename:40,permute:40")
    parser.add_argument("--workers", default="1,2", help="Worker counts (the last for --sweep).")
    parser.add_argument("--sweep", help="Pairs per family of each real audit (comma list).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    if args.child:
        mode, value = args.child.split(":")
        if mode == "sweep":
            print(json.dumps(sweep_point(int(value), workers[-1])))
        else:
            w, trace = mode, value
            print(json.dumps(measure(args.transforms, int(w), trace == "trace")))
        return

    load = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    pool = ["--workers", str(workers[-1])]
    if args.sweep:
        print(f"sweep: the default audit over cca-pilot with N pairs per family, "
              f"{workers[-1]} workers", flush=True)  # fmt: skip
        for per_family in args.sweep.split(","):
            r = _child([*pool, "--child", f"sweep:{per_family}"])
            print(_line(f"  N={per_family:>3}", r), flush=True)
    if args.sweep:
        load = os.getloadavg()
        print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        return

    print(f"audit: cca-pilot, every deterministic condition, transforms {args.transforms}")
    runs = [("tracemalloc, 1 worker", "1:trace")] + [
        (f"rss, {w} worker(s)", f"{w}:plain") for w in workers
    ]
    for label, child in runs:
        r = _child(["--transforms", args.transforms, "--child", child])
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
