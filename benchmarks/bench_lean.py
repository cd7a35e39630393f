"""The default `audit run` and its `audit report` against a baseline commit, side by side.

Run: ``python benchmarks/bench_lean.py --baseline PYTHON [--runs 1] [-- RUN OPTIONS]``,
where PYTHON is the interpreter of a virtual environment in which the baseline commit
is importable (``git worktree add --detach ../base d1eefef`` and a venv for it).
Both trees run the same command in fresh processes, alternating (this tree first,
then the baseline, ``--runs`` times), on a scratch directory each; printed per tree:

* the run's CPU seconds (user + system, the worker processes included), its wall
  time and the main process's peak RSS (measured inside it, at exit);
* the run directory's bytes, per file;
* the CPU seconds and peak RSS of `audit report` on that run.

Ratios (this tree / baseline) come last; they are the reliable figures on a loaded
machine, absolute times are not.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

WRAPPER = (
    "import atexit, resource, sys\n"
    "def said():\n"
    "    own = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    print(f'MAIN {own.ru_maxrss} {own.ru_utime + own.ru_stime}', file=sys.stderr)\n"
    "atexit.register(said)\n"
    "sys.argv = ['audit', *sys.argv[1:]]\n"
    "from audit.cli import main\n"
    "main()\n"
)
"""Runs the audit command line, then reports the main process's own peak RSS (KiB)."""


@dataclass
class Measured:
    wall: float
    cpu: float
    """User + system CPU seconds of the command and every process it waited for."""
    main_rss_mb: float
    main_cpu: float


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The commands' environment: bytecode cached as an installed package has it (with
PYTHONDONTWRITEBYTECODE set, every process compiled each module it imported again,
some tenths of a CPU second a command)."""


def compiled(python: str) -> None:
    """Write the bytecode of the tree ``python`` imports ``audit`` from, so that no
    measured command compiles a module (both trees alike)."""
    where = subprocess.run(
        [python, "-c", "import audit, pathlib; print(pathlib.Path(audit.__file__).parents[1])"],
        capture_output=True, text=True, check=True, env=ENV,
    ).stdout.strip()  # fmt: skip
    packages = [
        str(Path(where) / name) for name in ("audit", "histories", "compressors", "reports")
    ]
    subprocess.run([python, "-m", "compileall", "-q", *packages], check=True, env=ENV)


def measure(python: str, args: list[str], cwd: Path) -> Measured:
    """One command in a fresh interpreter, its rusage from ``wait4``."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [python, "-c", WRAPPER, *args],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV,
    )  # fmt: skip
    assert process.stderr is not None
    errors = process.stderr.read().decode(errors="replace")
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 3):
        raise SystemExit(f"{python} {' '.join(args)} failed ({process.returncode}):\n{errors}")
    line = next(line for line in errors.splitlines() if line.startswith("MAIN "))
    _, rss, main_cpu = line.split()
    return Measured(wall, usage.ru_utime + usage.ru_stime, int(rss) / 1024, float(main_cpu))


def directory_bytes(run: Path) -> dict[str, int]:
    return {
        path.name: path.stat().st_size
        for path in sorted(run.iterdir())
        if path.is_file() and not path.name.startswith(".")
    }


def one_round(name: str, python: str, options: list[str], scratch: Path) -> dict[str, float]:
    run = scratch / name
    shutil.rmtree(run, ignore_errors=True)
    ran = measure(python, ["run", *options, "--out", str(run), "--quiet"], scratch)
    sizes = directory_bytes(run)
    reported = measure(
        python, ["report", str(run), "--out", str(scratch / f"{name}-report")], scratch
    )
    total = sum(sizes.values())
    print(
        f"{name:>9}: run {ran.cpu:6.1f} CPU s ({ran.wall:5.1f} s wall, main {ran.main_cpu:5.1f} "
        f"CPU s, main peak RSS {ran.main_rss_mb:5.0f} MB); run directory {total / 1e6:6.1f} MB; "
        f"report {reported.cpu:5.1f} CPU s (peak RSS {reported.main_rss_mb:4.0f} MB)",
        flush=True,
    )
    print("           " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items()))
    return {
        "run_cpu": ran.cpu,
        "run_wall": ran.wall,
        "main_rss": ran.main_rss_mb,
        "bytes": total,
        "report_cpu": reported.cpu,
        "report_rss": reported.main_rss_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", required=True, help="The baseline venv's python.")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("options", nargs="*", help="`audit run` options (default: none)")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"command: audit run {' '.join(args.options)}; load {os.getloadavg()[0]:.2f}")
    found: dict[str, list[dict[str, float]]] = {"this tree": [], "baseline": []}
    for python in (sys.executable, args.baseline):
        compiled(python)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for name, python in (("this tree", sys.executable), ("baseline", args.baseline)):
                found[name].append(
                    one_round(name.replace(" ", "-"), python, args.options, Path(tmp))
                )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    for key, what in (
        ("run_cpu", "run CPU"),
        ("run_wall", "run wall"),
        ("main_rss", "main-process peak RSS"),
        ("bytes", "run directory"),
        ("report_cpu", "report CPU"),
        ("report_rss", "report peak RSS"),
    ):
        ours = min(r[key] for r in found["this tree"])
        base = min(r[key] for r in found["baseline"])
        print(f"{what:>22}: {ours / base:.2f}x the baseline (best of {args.runs})")


if __name__ == "__main__":
    main()
