"""What reproducibility costs: the embedded backend's two modes, side by side.

Run: ``python benchmarks/bench_local_modes.py [--reads 24] [--rounds 2] [--concurrency 8]``.

The reads are the audit's own: a deterministic run of the default pilot (``frontier`` at
1200 B, identity) gives distinct memories, and each becomes the reader request the LLM
stage would send (``audit.engine.reader_request``, JSON schema on).  For each round, in
alternating order, the embedded server is started in ``reproducible`` mode (one slot,
prompt cache off) and in ``throughput`` mode (``n_parallel`` = 4 slots, prompt cache on),
and every read is sent at ``--concurrency`` with no response cache; only the requests are
timed (the server's start is not).  Then the determinism probe (``audit backends check``'s
16 requests, once in order, once all at once shuffled) runs once per mode.

Printed: reads per second and completion tokens per second per mode (median of the
rounds), the throughput/reproducible ratio, and each mode's determinism.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from typer.testing import CliRunner

from audit.backends import BackendConfig, BackendsConfig, measure_determinism, open_backend
from audit.cli import app
from audit.engine import reader_request
from audit.rundir import RunStore
from compressors import ChatRequest
from histories import PRESETS, generate

Mode = Literal["reproducible", "throughput"]
MODES: tuple[Mode, ...] = ("reproducible", "throughput")


def audit_reads(count: int, workdir: Path) -> list[ChatRequest]:
    """``count`` distinct reader requests of the default pilot's frontier memories."""
    out = workdir / "run"
    result = CliRunner().invoke(
        app,
        ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
         "identity", "--budget", "1200", "--workers", "1", "--quiet", "--out", str(out)],
    )  # fmt: skip
    if result.exit_code != 0:
        sys.exit(f"the deterministic run failed: {result.output}")
    queries = {pair.pair_id: list(pair.query) for pair in generate(PRESETS["cca-pilot"])}
    store = RunStore(out)
    try:
        seen: set[str] = set()
        requests = []
        for row in store.rows():
            sha = row["memory_sha256"]
            if row["reader"] != "exact" or not sha or sha in seen:
                continue
            memory = store.memory(sha)
            if memory is None:
                continue
            seen.add(sha)
            requests.append(reader_request(memory, queries[row["pair_id"]], tag="bench"))
            if len(requests) == count:
                break
    finally:
        store.close()
    return requests


def config(mode: Mode, concurrency: int) -> BackendsConfig:
    return BackendsConfig(
        backends={"local": BackendConfig(kind="local", mode=mode, max_concurrency=concurrency)}
    )


async def one_round(
    mode: Mode, requests: list[ChatRequest], concurrency: int
) -> tuple[float, int, int]:
    """Seconds for every read, completion tokens, failed reads."""
    async with open_backend("local", config(mode, concurrency)) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(*(client.chat(r) for r in requests))
        seconds = time.perf_counter() - started
    tokens = sum(int(a.usage.get("completion_tokens", 0)) for a in answers)
    failed = sum(a.error is not None for a in answers)
    return seconds, tokens, failed


async def determinism(mode: Mode, concurrency: int) -> str:
    async with open_backend("local", config(mode, concurrency)) as client:
        return (await measure_determinism(client)).summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(f"# {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        requests = audit_reads(args.reads, Path(tmp))
    print(f"{len(requests)} distinct reads of the default pilot (frontier, 1200 B), "
          f"concurrency {args.concurrency}, no cache, {args.rounds} rounds")  # fmt: skip
    timings: dict[Mode, list[tuple[float, int, int]]] = {m: [] for m in MODES}
    for round_number in range(args.rounds):
        order = MODES if round_number % 2 == 0 else MODES[::-1]
        for mode in order:
            result = asyncio.run(one_round(mode, requests, args.concurrency))
            timings[mode].append(result)
            print(f"  round {round_number + 1} {mode:>12}: {result[0]:7.1f} s, "
                  f"{result[1]} completion tokens, {result[2]} failed", flush=True)  # fmt: skip
    rates = {}
    for mode in MODES:
        seconds = statistics.median(t[0] for t in timings[mode])
        tokens = statistics.median(t[1] for t in timings[mode])
        rates[mode] = len(requests) / seconds
        print(f"{mode:>12}: {rates[mode]:6.2f} reads/s, {tokens / seconds:7.1f} completion "
              f"tokens/s (median {seconds:.1f} s)")  # fmt: skip
    ratio = rates["throughput"] / rates["reproducible"]
    print(f"throughput / reproducible: {ratio:.2f}x reads per second")
    for mode in MODES:
        print(f"{mode:>12} determinism: {asyncio.run(determinism(mode, args.concurrency))}")


if __name__ == "__main__":
    main()
