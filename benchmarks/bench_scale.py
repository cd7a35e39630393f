"""Ray on one machine against the local process pool, and the figures of the cost model.

Run: ``python benchmarks/bench_scale.py [--rounds 2] [--skip-sweep]
[--pilot-transforms ...] [--pairs-per-family 9]``.

Starts a real local Ray cluster (``ray start --head --block``, 2 CPUs, a private
temporary directory, on 127.0.0.1 only and with a token of its own: ``LOOPBACK_ENV``;
stopped by its process group at the end), then measures, each audit in a fresh process
(so no run inherits another's warm caches):

* Ray's per-task overhead: 2,000 no-op tasks submitted at once and collected, seconds
  per task (after 50 to start the workers);
* the pilot (cca-pilot, every deterministic condition, the default `audit run`'s
  transforms, budget 1200: the default audit, 392,616 reads; ``--pilot-transforms``
  for others) three ways: the local pool (2 workers), Ray on that cluster
  (``--ray-address``), and a private Ray the run starts and stops itself (no address);
  ``--rounds`` times each, alternating; the ratios of the medians to the pool's, of
  wall time and of CPU time;
* a sweep of at least a million reads (``--pairs-per-family`` pairs of each of the 12
  families, generated with seed 7, under identity + rename:40 + permute:40 +
  relabel:40: 121 instances of each pair; 9 per family = about a million reads), once
  with the pool and once with the cluster;
* CPU time as well as wall time, since a shared machine's load moves wall time: the
  driver's own, plus the local pool's worker processes (its children), or every process
  of the Ray cluster's session (workers, raylet, GCS: Ray's own cost included), or of
  the run's own session for a private Ray;
* that every run's results.parquet and summary.json are byte-identical,
  whichever executor ran it (the benchmark stops otherwise);
* the store's commit rate (``RunStore.add_job`` of real pilot jobs, one transaction
  each).
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
import resource
import secrets
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

PILOT_TRANSFORMS = "identity,rename:5,permute:5,relabel:5,rerev:10,revalue:10,disguise:5"
"""The default `audit run`'s transforms: with every deterministic condition at 1200 B,
the pilot is the default audit (392,616 reads)."""
SWEEP_TRANSFORMS = "identity,rename:40,permute:40,relabel:40"
RESULT_FILES = ("results.parquet", "summary.json")


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def audit_plan(
    kind: str, pairs_per_family: int, pilot_transforms: str = PILOT_TRANSFORMS
) -> tuple[RunPlan, list[Pair]]:
    conditions = deterministic_builtins()
    if kind == "pilot":
        pairs, transforms = generate(PRESETS["cca-pilot"]), pilot_transforms
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


def one(
    kind: str, executor: str, address: str | None, pairs_per_family: int, transforms: str
) -> None:
    """One audit in this process; prints one JSON line."""
    plan, pairs = audit_plan(kind, pairs_per_family, transforms)
    with tempfile.TemporaryDirectory() as tmp:
        before = _cpu()
        start = time.perf_counter()
        summary = execute(
            Path(tmp) / "run", plan, pairs, workers=2,
            executor="local" if executor == "local" else "ray", ray_address=address,
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

    def __init__(self, session: int, exclude: int | None = None) -> None:
        self.session = session
        self.exclude = exclude
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
        return sum(
            cpu - self.before.get(key, 0.0)
            for key, cpu in self.last.items()
            if key[0] != self.exclude
        )


def run_one(
    kind: str,
    executor: str,
    address: str,
    pairs_per_family: int,
    session: int,
    transforms: str = PILOT_TRANSFORMS,
) -> dict[str, Any]:
    """One audit in a fresh process (a session of its own); ``executor``: local, ray (the
    cluster at ``address``, whose ``session`` is sampled) or private (a Ray the run
    starts and stops itself: its processes are in the run's session)."""
    cluster = SessionCPU(session) if executor == "ray" else None
    command = [sys.executable, __file__, "--one", kind, executor, address,
               str(pairs_per_family), transforms]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as process:  # fmt: skip
        own = SessionCPU(process.pid, exclude=process.pid)
        stdout, stderr = process.communicate()
    own_cpu = own.stop()
    if process.returncode != 0:
        raise SystemExit(f"{kind} with {executor} failed:\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["cluster_cpu"] = cluster.stop() if cluster is not None else own_cpu
    workers = result["child_cpu"] if executor == "local" else result["cluster_cpu"]
    result["cpu"] = result["main_cpu"] + workers
    who = {"local": "pool workers", "ray": "Ray cluster", "private": "its own Ray"}[executor]
    print(
        f"  {kind:<5} {executor:<7}: {result['seconds']:6.1f} s wall "
        f"(jobs {result['jobs_seconds']:.1f} s), {result['reads']:,} reads, "
        f"{result['reads'] / result['seconds']:,.0f} reads/s; CPU {result['cpu']:.1f} s = "
        f"{result['main_cpu']:.1f} s driver + {workers:.1f} s {who}; driver peak RSS "
        f"{result['driver_rss_mib']:,.0f} MiB; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return result


def compare(kind: str, runs: dict[str, list[dict[str, Any]]], how: str) -> None:
    """Ray against the local pool: the ratio of the median wall times, and of CPU times."""
    for executor in (e for e in runs if e != "local"):
        for measure, unit in (("seconds", "wall time"), ("cpu", "CPU time")):
            local = statistics.median(r[measure] for r in runs["local"])
            ray = statistics.median(r[measure] for r in runs[executor])
            print(f"{kind}: {executor} / local {unit} = {ray:.1f} / {local:.1f} s = "
                  f"{ray / local:.2f}x ({how})", flush=True)  # fmt: skip


def identical(results: list[dict[str, Any]], kind: str) -> None:
    """Every run's result files byte for byte the same, or the benchmark fails."""
    digests = {json.dumps(r["files"], sort_keys=True) for r in results}
    if len(digests) != 1:
        raise SystemExit(f"{kind}: the executors' result files differ: {sorted(digests)}")
    print(f"{kind}: {', '.join(RESULT_FILES)} byte-identical across all {len(results)} runs")


LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # the node's address is 127.0.0.1
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",  # a token of this benchmark's own, not ~/.ray/auth_token
}
"""The environment of the cluster and of every driver: Ray 2.60 takes the machine's
outward address for a node, even given ``--node-ip-address 127.0.0.1`` (it rewrites a
loopback address into the outward one), so on a machine with no network beyond loopback
the head did not start or no driver found it."""


def loopback_environment() -> None:
    """Set ``LOOPBACK_ENV`` (and a fresh token) in this process, before Ray is imported:
    the cluster and the drivers, its children, inherit it."""
    os.environ.update(LOOPBACK_ENV)
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


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
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 120
    written = temp / "ray_current_cluster"  # the head's GCS address, once it is up
    while time.monotonic() < deadline:
        address = written.read_text().strip() if written.exists() else ""
        if address and "Ray runtime started" in log.read_text(errors="replace"):
            if not address.startswith("127.0.0.1:"):
                raise SystemExit(f"the head took {address}, not loopback")
            return process, address
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

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
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
    parser.add_argument(
        "--pilot-transforms", default=PILOT_TRANSFORMS, help="The pilot's transforms."
    )
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, executor, address, per_family, transforms = args.one
        one(kind, executor, address if executor == "ray" else None, int(per_family), transforms)
        return
    loopback_environment()
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
        executors = ("local", "ray", "private")
        pilot: dict[str, list[dict[str, Any]]] = {e: [] for e in executors}
        transforms = args.pilot_transforms
        print(f"pilot: cca-pilot, every deterministic condition, {transforms}")
        for _ in range(args.rounds):
            for executor in executors:
                pilot[executor].append(run_one("pilot", executor, address, 0, session, transforms))
        compare("pilot", pilot, f"medians of {args.rounds}")
        identical([run for runs in pilot.values() for run in runs], "pilot")
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
