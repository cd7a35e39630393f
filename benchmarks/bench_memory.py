"""Memory, disk and time of deterministic audits as their reads grow (``audit.engine.execute``).

Run: ``python benchmarks/bench_memory.py [--sweep 4,14,36] [--scale 1,10,100]
[--transforms ...] [--workers 2]``.

Every measurement runs in a fresh child process (its own peak RSS), into a fresh
temporary run directory, with the local process pool:

- ``--sweep``: real audits, the default `audit run`'s (every deterministic condition,
  the default transforms, budget 1200, the exact reader) over the cca-pilot preset with
  N pairs per family for each N given (14 is the default audit: 84 pairs, 392,616
  reads): reads, wall and CPU time (the main process and its pool), the main process's
  peak RSS, the largest child's (a pool worker or the scoring child) and the run
  directory's size, then per million reads.
- ``--scale``: the main process at K times the default audit's reads for each K given,
  without K times its CPU: the default audit's 84 jobs are computed once (their results
  cached in a file), then K x 84 jobs, each a distinct copy of a pair (its own ``Pair``
  object, as K x 84 pairs read from a file would be) under a key of its own, go through
  the same ``execute`` (plan, pool, commit of every job to the store, the rewrite of
  results.parquet, the scoring child, the manifest); only the worker function is
  replaced, by one that returns the cached result of the job's pair with its key
  rewritten (in every row too).  So the driver's work and memory are the real ones for
  K x 392,616 reads, and the workers' cost is not paid.  The summary is not scored (its
  child process reads the scored columns of every row, about 0.8 KB a read: the sweep
  measures it); the main process's figures are the point here.
- neither: the original measurement (``--transforms``, cca-pilot): one worker with
  ``tracemalloc``, then the peak RSS with each of ``--workers``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pickle
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
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


def default_audit(per_family: int) -> tuple[Any, list[Any]]:
    """The default `audit run`'s plan over the cca-pilot preset with ``per_family``
    pairs per family."""
    from audit.plan import RunPlan
    from compressors import build, deterministic_builtins
    from histories import PRESETS, generate

    config = PRESETS["cca-pilot"].model_copy(update={"pairs_per_family": per_family})
    pairs = generate(config)
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


# --scale: the driver at K times the reads, the workers' results cached


def cache_jobs(path: Path, workers: int) -> None:
    """Compute the default audit's jobs once (the pool) and pickle their results."""
    from audit.engine._executor import _execute, plan_jobs

    plan, pairs = default_audit(DEFAULT_PER_FAMILY)
    jobs = plan_jobs(plan, pairs)
    with ProcessPoolExecutor(workers) as pool:
        packed = list(
            pool.map(_execute, jobs, [plan.transforms] * len(jobs), [plan.seed] * len(jobs))
        )
    results = dict(zip((job.key for job in jobs), packed, strict=True))
    path.write_bytes(pickle.dumps(results))


_CACHE: dict[str, Any] = {}
_ORIGINAL: dict[str, str] = {}
"""A replicated job's key -> the key of the job it copies (set before the pool forks)."""


def _cached_execute(job: Any, transforms: Any, seed: int) -> Any:
    """The worker function of ``--scale``: the cached result of the job's pair, with the
    job's own key (in the rows' ``job_key`` too)."""
    import pyarrow as pa

    from audit.rundir._store import table_bytes, table_from_bytes

    if not _CACHE:  # loaded in the worker, never in the main process
        _CACHE.update(pickle.loads(Path(os.environ["BENCH_MEMORY_CACHE"]).read_bytes()))
    packed = _CACHE[_ORIGINAL[job.key]]
    table = table_from_bytes(packed.results)
    index = table.schema.get_field_index("job_key")
    keys = pa.array([job.key] * table.num_rows, type=table.schema.field(index).type)
    table = table.set_column(index, table.schema.field(index), keys)
    return dataclasses.replace(packed, key=job.key, results=table_bytes(table))


def _count_only(out: Path, plan: Any) -> dict[str, Any]:
    """The summary of ``--scale``: the count of reads only (not scored)."""
    import pyarrow.parquet as pq

    from audit.rundir import RESULTS_PARQUET

    return {"n_reads": pq.ParquetFile(out / RESULTS_PARQUET).metadata.num_rows}


def scale_point(factor: int, workers: int) -> dict[str, Any]:
    """The driver's figures at ``factor`` times the default audit's reads."""
    import audit.engine._executor as executor
    from histories import Pair

    plan, pairs = default_audit(DEFAULT_PER_FAMILY)
    texts = [pair.to_json() for pair in pairs]
    del pairs
    copies = [Pair.model_validate_json(text) for _ in range(factor) for text in texts]
    real_plan_jobs = executor.plan_jobs

    def replicated_jobs(plan: Any, pairs: Sequence[Any]) -> list[Any]:
        jobs = []
        for i, job in enumerate(real_plan_jobs(plan, pairs)):
            key = hashlib.sha256(f"{job.key} copy {i}".encode()).hexdigest()[:32]
            _ORIGINAL[key] = job.key
            jobs.append(dataclasses.replace(job, key=key))
        return jobs

    executor.plan_jobs = replicated_jobs  # type: ignore[assignment]
    executor._execute = _cached_execute  # type: ignore[assignment]
    executor._score = _count_only  # type: ignore[assignment]
    return timed_execute(plan, copies, workers)


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
    parser.add_argument(
        "--workers", default="1,2", help="Worker counts (the first for --sweep/--scale)."
    )
    parser.add_argument("--sweep", help="Pairs per family of each real audit (comma list).")
    parser.add_argument("--scale", help="Multiples of the default audit's reads (comma list).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    if args.child:
        mode, value = args.child.split(":")
        if mode == "sweep":
            print(json.dumps(sweep_point(int(value), workers[-1])))
        elif mode == "scale":
            print(json.dumps(scale_point(int(value), workers[-1])))
        elif mode == "cache":
            cache_jobs(Path(value), workers[-1])
            print("{}")
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
    if args.scale:
        print(f"scale: the default audit's jobs, K copies of each pair, cached worker "
              f"results, {workers[-1]} workers", flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "jobs.pickle"
            env = {**os.environ, "BENCH_MEMORY_CACHE": str(cache)}
            _child([*pool, "--child", f"cache:{cache}"], env)
            base = None
            for factor in args.scale.split(","):
                r = _child([*pool, "--child", f"scale:{factor}"], env)
                base = base or r["rss_self_mib"]
                print(_line(f"  K={factor:>3}", r)
                      + f"; main RSS {r['rss_self_mib'] / base:.2f}x K=first", flush=True)  # fmt: skip
    if args.sweep or args.scale:
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
