"""Benchmark: `audit report` on a synthetic run of about 100,000 result rows.

Builds a run directory the way `audit run` lays it out (config.json naming a pair
file, results.parquet, store.sqlite with the memories), with 600 real source pairs
(12 families x 50), 7 conditions, 2 budgets, identity + 1 renaming, 2 variants x 3
branches = 100,800 rows, then times `audit report` end to end (a fresh process,
imports included) and prints the seconds (wall and CPU), the size of report.html (its
200 drilled pairs are on pages of their own), of the whole report folder, and the
machine.

    python benchmarks/bench_report.py [--keep DIR]

The goal (the issue's): under 30 s.  Not a timed test: run it by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from audit.rundir import RunStore, pack_job
from histories import FAMILIES, GenerationConfig, generate

CONDITIONS = {  # condition -> (P(pass) at identity, P(pass) renamed, P(collision))
    "tail": (0.15, 0.15, 0.7),
    "type_pin": (0.2, 0.2, 0.6),
    "frontier": (0.97, 0.6, 0.0),
    "frontier_latest": (0.4, 0.3, 0.3),
    "frontier_alpha": (0.8, 0.8, 0.1),
    "full": (1.0, 1.0, 0.0),
    "bm25": (0.5, 0.45, 0.4),
}
BUDGETS = (600, 1200)
BRANCHES = ("current", "reveal", "override")


def build_run(root: Path) -> int:
    pairs = generate(GenerationConfig(families=list(FAMILIES), pairs_per_family=50, seed=1))
    pairs_file = root / "pairs.jsonl"
    body = "".join(p.to_json() + "\n" for p in pairs).encode()
    pairs_file.write_bytes(body)
    config = {
        "config": {
            "pairs": {"file": str(pairs_file)},
            "pairs_sha256": hashlib.sha256(body).hexdigest(),
            "conditions": list(CONDITIONS),
            "compressor_versions": {c: f"{c}@1" for c in CONDITIONS},
            "budgets": list(BUDGETS),
            "transforms": ["identity", "rename:1"],
            "seed": 0,
            "reader": "exact",
            "repeats": 1,
        },
        "environment": {"machine": f"{platform.machine()}, {os.cpu_count()} cores"},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (root / "config.json").write_text(json.dumps(config, indent=2))
    rng = random.Random(7)
    rows = []
    memories: dict[str, dict[str, str]] = {}
    for pair in pairs:
        assert pair.gold is not None
        records = {v: [r.canonical_json() for r in pair.prefix(v)] for v in ("A", "B")}
        for condition, (p_id, p_renamed, p_collision) in CONDITIONS.items():
            for budget in BUDGETS:
                for transform in ("identity", "rename"):
                    instance = pair.pair_id if transform == "identity" else f"{pair.pair_id}~r0"
                    p = p_id if transform == "identity" else p_renamed
                    collided = int(rng.random() < p_collision)
                    for variant in ("A", "B"):
                        for branch in BRANCHES:
                            keep = records["A" if collided else variant]
                            text = "\n".join(rng.sample(keep, min(len(keep), budget // 60)))
                            sha = hashlib.sha256(text.encode()).hexdigest()
                            memories.setdefault(pair.pair_id, {}).setdefault(sha, text)
                            ok = branch == "override" or rng.random() < p
                            gold = json.dumps(pair.gold.of(variant).of(branch))
                            rows.append(
                                {
                                    "job_key": pair.pair_id,
                                    "pair_id": instance,
                                    "source_pair_id": pair.pair_id,
                                    "family": pair.family,
                                    "variant": variant,
                                    "branch": branch,
                                    "repeat": 0,
                                    "condition": condition,
                                    "compressor": f"{condition}@1",
                                    "kind": "strict",
                                    "budget": budget,
                                    "reader": "exact",
                                    "transform": transform,
                                    "transform_index": 0,
                                    "outcome": "pass" if ok else "wrong_log",
                                    "correct": int(ok),
                                    "adequate": int(ok),
                                    "memory_bytes": len(text.encode()),
                                    "memory_sha256": sha,
                                    "collision": collided,
                                    "overflow": 0,
                                    "equivariant": None
                                    if transform == "identity"
                                    else int(rng.random() < p),
                                    "answer": gold if ok else json.dumps({"x": None}),
                                    "gold": gold,
                                    "error": None,
                                }
                            )
    pd.DataFrame(rows).to_parquet(root / "results.parquet", index=False)
    store = RunStore(root)  # the memories, as a real run stores them
    by_job: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_job.setdefault(str(row["job_key"]), []).append(row)
    for key, job_rows in by_job.items():
        store.add_job(pack_job(key, job_rows, memories.get(key, {})))
    store.close()
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build the run here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch) / "run"
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        n_rows = build_run(root)
        print(f"built a synthetic run of {n_rows:,} rows in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-c", "from audit.cli import main; main()", "report", str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if done.returncode != 0:
            print(done.stdout, done.stderr, file=sys.stderr)
            raise SystemExit(done.returncode)
        sizes = sorted(p.stat().st_size for p in (root / "report").glob("*.html"))
        folder = sum(p.stat().st_size for p in (root / "report").iterdir() if p.is_file())
        main = (root / "report" / "report.html").stat().st_size
        print(done.stdout.strip())
        print(
            f"audit report, {n_rows:,} rows: {seconds:.1f} s, {cpu:.1f} CPU s (goal: < 30 s); "
            f"{len(sizes)} HTML pages, largest {sizes[-1] / 1e6:.1f} MB; report.html "
            f"{main / 1e6:.2f} MB (goal: < 1.5 MB); the report folder {folder / 1e6:.1f} MB"
        )
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.processor() or platform.platform()}, Python {platform.python_version()}"
        )


if __name__ == "__main__":
    main()
