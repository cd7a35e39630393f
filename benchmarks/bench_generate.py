"""Generator and interpreter speed: verified pairs per second, E_q resolutions per second.

Run: ``python benchmarks/bench_generate.py [--pairs-per-family N]``.
Prints the machine, then figures measured side by side in this one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from histories import GenerationConfig, LogIndex, generate, generate_lines


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def best_of(repeats: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs-per-family", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = GenerationConfig(
        families=["all"], pairs_per_family=args.pairs_per_family, seed=1, distractors=32
    )
    n = len(config.families) * config.pairs_per_family
    print(f"machine: {machine()}")
    print(f"pairs: {n} ({len(config.families)} families, 32 distractors, verified by E_q)")
    for workers in (1, 2):
        best, median = best_of(args.repeats, lambda w=workers: generate_lines(config, workers=w))
        print(
            f"generate, {workers} process(es): {n / best:,.0f} verified pairs/s best, "
            f"{n / median:,.0f} median"
        )
    pairs = generate(config)
    histories = [(p.history(v, b), p.query) for p in pairs for v in "AB" for b in
                 ("current", "reveal", "override")]  # fmt: skip
    best, median = best_of(args.repeats, lambda: [LogIndex(h).resolve(q) for h, q in histories])
    records = sum(len(h) for h, _ in histories) / len(histories)
    print(
        f"E_q: {len(histories) / best:,.0f} resolutions/s best, {len(histories) / median:,.0f} "
        f"median (index + resolve, {records:.0f} records per log)"
    )


if __name__ == "__main__":
    main()
