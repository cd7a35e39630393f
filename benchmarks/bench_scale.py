"""Ray on one machine against the local process pool, and the figures of the cost model.

Run: ``python benchmarks/bench_scale.py [--pairs-per-family 9] [--rounds 2]``.

Starts a real local Ray cluster (``ray start --head --block``, 127.0.0.1, 2 CPUs, a
private temporary directory; stopped by its process group at the end), then measures,
each audit in a fresh process (so no run inherits another's warm caches):

* Ray's per-task overhead: 2,000 no-op tasks submitted at once and collected, seconds
  per task (after 50 to start the workers);
* the pilot (cca-pilot, the 9 deterministic conditions, identity + rename:40 +
  permute:40, budget 1200: 24 pairs x 81 instances x 78 reads = 151,632 reads) with the
  local pool (2 workers) and with Ray, alternating, ``--rounds`` times each; the ratio
  of the medians, of wall time and of CPU time;
* a sweep of at least a million reads (``--pairs-per-family`` pairs of each of the 12
  families, generated with seed 7, under identity + rename:40 + permute:40 +
  relabel:40: 121 instances of each pair, 78 reads each; 9 per family = 1,019,304
  reads), once with each executor;
* CPU time as well as wall time, since a shared machine's load moves wall time: the
  driver's own, plus the local pool's worker processes (its children) or every process
  of the Ray cluster's session (workers, raylet, GCS: Ray's own cost included);
* that every run's results.parquet and summary.json are byte-identical,
  whichever executor ran it (the benchmark stops otherwise);
* the per-read cost (the local pool's worker CPU seconds per read), the driver's cost
  per job (its CPU seconds; it alone commits the store) and the store's commit rate
  (``RunStore.add_job`` of real pilot jobs, one transaction each).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from audit.engine import execute, plan_jobs, run_job
from audit.plan import RunPlan
from audit.rundir import RunStore
from compressors import build, deterministic_builtins
from histories import FAMILIES, PRESETS, GenerationConfig, Pair, generate

PILOT_TRANSFORMS = "identity,rename:40,permute:40"
SWEEP_TRANSFORMS = "identity,rename:40,permute:40,relabel:40"
RESULT_FILES = ("results.parquet", "summary.json")


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def audit_plan(kind: str, pairs_per_family: int) -> tuple[RunPlan, list[Pair]]:
    conditions = deterministic_builtins()
    if kind == "pilot":
        pairs, transforms = generate(PRESETS["cca-pilot"]), PILOT_TRANSFORMS
    else:
        config = GenerationConfig(
            families=list(FAMILIES), pairs_per_family=pairs_per_family, seed=7
        )
        pairs, transforms = generate(config), SWEEP_TRANSFORMS
    plan = RunPlan(
        pairs={"benchmark": kind},
        pairs_sha256="benchmark",
        conditions=conditions,
        compressor_versions={c: build(c).label for c in conditions},
        budgets=[1200],
        transforms=transforms.split(","),
    )
    return plan, pairs


def one(kind: str, executor: str, address: str | None, pairs_per_family: int) -> None:
    """One audit in this process; prints one JSON line."""
    plan, pairs = audit_plan(kind, pairs_per_family)
    with tempfile.TemporaryDirectory() as tmp:
        before = _cpu()
        start = time.perf_counter()
        summary = execute(
            Path(tmp) / "run", plan, pairs, workers=2, executor=executor,  # type: ignore[arg-type]
            ray_address=address,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        main_cpu, child_cpu = (a - b for a, b in zip(_cpu(), before, strict=True))
        costs = json.loads((Path(tmp) / "run" / "costs.json").read_text())
        files = {
            name: hashlib.sha256((Path(tmp) / "run" / name).read_bytes()).hexdigest()
            for name in RESULT_FILES
        }
    reads = int(summary["n_reads"])
    stage = costs["invocations"][-1]["deterministic"]
    print(json.dumps({
        "kind": kind, "executor": executor, "seconds": seconds, "reads": reads,
        "jobs": len(pairs), "jobs_seconds": stage["seconds"], "main_cpu": main_cpu,
        "child_cpu": child_cpu,
        "driver_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "files": files,
    }), flush=True)  # fmt: skip


def session_cpu(session: int) -> dict[tuple[int, int], float]:
    """CPU seconds used so far by each live process of a session (the Ray cluster's),
    keyed by (pid, start time)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[tuple[int, int], float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            found[int(entry.name), int(fields[19])] = cpu
        except (OSError, ProcessLookupError, ValueError, IndexError):
            continue
    return found


class SessionCPU:
    """The CPU time a session's processes use while it runs, sampled every 0.1 s: Ray
    starts workers for each driver and ends them with it (and its raylet does not
    inherit their time), so each process is counted up to its last sample."""

    def __init__(self, session: int) -> None:
        self.session = session
        self.before = session_cpu(session)
        self.last = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.last.update(session_cpu(self.session))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.last.update(session_cpu(self.session))
        return sum(cpu - self.before.get(key, 0.0) for key, cpu in self.last.items())


def run_one(
    kind: str, executor: str, address: str, pairs_per_family: int, session: int
) -> dict[str, Any]:
    cluster = SessionCPU(session)
    out = subprocess.run(
        [sys.executable, __file__, "--one", kind, executor, address, str(pairs_per_family)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{kind} with {executor} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["cluster_cpu"] = cluster.stop()
    workers = result["child_cpu"] if executor == "local" else result["cluster_cpu"]
    result["cpu"] = result["main_cpu"] + workers
    print(
        f"  {kind:<5} {executor:<5}: {result['seconds']:6.1f} s wall "
        f"(jobs {result['jobs_seconds']:.1f} s), {result['reads']:,} reads, "
        f"{result['reads'] / result['seconds']:,.0f} reads/s; CPU {result['cpu']:.1f} s = "
        f"{result['main_cpu']:.1f} s driver + {workers:.1f} s "
        f"{'pool workers' if executor == 'local' else 'Ray cluster'}; driver peak RSS "
        f"{result['driver_rss_mib']:,.0f} MiB; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return result


def compare(kind: str, runs: dict[str, list[dict[str, Any]]], how: str) -> None:
    """Ray against the local pool: the ratio of the median wall times, and of CPU times."""
    for measure, unit in (("seconds", "wall time"), ("cpu", "CPU time")):
        local = statistics.median(r[measure] for r in runs["local"])
        ray = statistics.median(r[measure] for r in runs["ray"])
        print(f"{kind}: ray / local {unit} = {ray:.1f} / {local:.1f} s = {ray / local:.2f}x "
              f"({how})", flush=True)  # fmt: skip


def identical(results: list[dict[str, Any]], kind: str) -> None:
    """Every run's result files byte for byte the same, or the benchmark fails."""
    digests = {json.dumps(r["files"], sort_keys=True) for r in results}
    if len(digests) != 1:
        raise SystemExit(f"{kind}: the executors' result files differ: {sorted(digests)}")
    print(f"{kind}: {', '.join(RESULT_FILES)} byte-identical across all {len(results)} runs")


def start_cluster(temp: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = temp / "start.log"
    ray = Path(sys.executable).with_name("ray")
    command = [
        str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", "0",
        "--num-cpus", "2", "--temp-dir", str(temp), "--include-dashboard", "false",
        "--disable-usage-stats",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"--address='[^':]+:(\d+)'", log.read_text(errors="replace"))
        if found:
            return process, f"127.0.0.1:{found.group(1)}"
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"ray start failed:\n{log.read_text(errors='replace')[-3000:]}")


def stop_cluster(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    time.sleep(3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def task_overhead(address: str, tasks: int = 2000) -> float:
    import ray

    ray.init(
        address=address,
        logging_level=logging.ERROR,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )  # the head listens on loopback only
    try:
        noop = ray.remote(num_cpus=1)(_noop)
        ray.get([noop.remote(i) for i in range(50)])
        started = time.perf_counter()
        ray.get([noop.remote(i) for i in range(tasks)])
        return (time.perf_counter() - started) / tasks
    finally:
        ray.shutdown()


def _noop(value: int) -> int:
    return value


def commit_rate(jobs: int = 200) -> tuple[float, float]:
    """(jobs committed per second, MB per job) for real pilot jobs, one transaction each."""
    plan, pairs = audit_plan("pilot", 0)
    planned = plan_jobs(plan, pairs)[:4]
    packed = [
        run_job(job.key, pair, job.cells, plan.transforms, 0).pack()
        for job, pair in zip(planned, pairs, strict=False)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp))
        started = time.perf_counter()
        for i in range(jobs):
            job = packed[i % len(packed)]
            store.add_job(dataclasses.replace(job, key=f"{job.key}-{i}"))
        seconds = time.perf_counter() - started
        store.close()
    size = statistics.mean(len(j.results) + len(j.memory_block) for j in packed) / 1e6
    return jobs / seconds, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs-per-family", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, executor, address, per_family = args.one
        one(kind, executor, address if executor == "ray" else None, int(per_family))
        return
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    temp = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    cluster, address = start_cluster(temp)
    try:
        overhead = task_overhead(address)
        print(f"ray: local cluster at {address}, 2 CPUs; no-op task {overhead * 1e3:.3f} ms each "
              "(2,000 submitted at once)", flush=True)  # fmt: skip
        session = cluster.pid  # `ray start` leads the session of every cluster process
        pilot: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
        print(f"pilot: cca-pilot, 9 deterministic conditions, {PILOT_TRANSFORMS}")
        for _ in range(args.rounds):
            for executor in ("local", "ray"):
                pilot[executor].append(run_one("pilot", executor, address, 0, session))
        compare("pilot", pilot, f"medians of {args.rounds}")
        identical(pilot["local"] + pilot["ray"], "pilot")
        if not args.skip_sweep:
            per = args.pairs_per_family
            print(f"sweep: {per} pairs x {len(FAMILIES)} families (seed 7), {SWEEP_TRANSFORMS}")
            sweep = {e: [run_one("sweep", e, address, per, session)] for e in ("local", "ray")}
            compare("sweep", sweep, "one run each")
            identical(sweep["local"] + sweep["ray"], "sweep")
            base, ray = sweep["local"][0], sweep["ray"][0]
            print(
                f"per read: {1e6 * base['child_cpu'] / base['reads']:.1f} us of pool worker CPU, "
                f"{1e6 * ray['cluster_cpu'] / ray['reads']:.1f} us of Ray cluster CPU; "
                f"{base['reads'] / base['jobs']:,.0f} reads per job; driver CPU per job "
                f"{1e3 * ray['main_cpu'] / ray['jobs']:.1f} ms with Ray, "
                f"{1e3 * base['main_cpu'] / base['jobs']:.1f} ms with the local pool (plan, "
                f"commit, CSV, finish); driver peak RSS {ray['driver_rss_mib']:,.0f} MiB with "
                f"Ray, {base['driver_rss_mib']:,.0f} MiB local",
                flush=True,
            )
    finally:
        stop_cluster(cluster)
        shutil.rmtree(temp, ignore_errors=True)
    rate, size = commit_rate()
    print(f"store: {rate:,.0f} pilot jobs committed per second (one transaction each, "
          f"{size:.2f} MB per job)")  # fmt: skip
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
