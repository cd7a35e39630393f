"""SIGKILL a run at seeded random points, resume it, and get exactly the uninterrupted results.

The run is a real `audit run` process group (the CLI and its worker processes),
killed with SIGKILL, the way a machine or an OOM killer ends it: no cleanup runs.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._cli import finished_jobs
from tests._rows import result_csv

ARGS = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail,full",
        "--transforms", "identity,rename:4,permute:2", "--quiet", "--workers", "2"]  # fmt: skip
"""24 source pairs: the paper's pilot, whose size is fixed (the default has 84)."""


def audit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "audit", *args], capture_output=True, text=True, timeout=timeout
    )


def sorted_rows(run_dir: Path) -> list[tuple[str, ...]]:
    with result_csv(run_dir).open(newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    return [tuple(header), *sorted(tuple(r) for r in body)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("kill") / "whole"
    started = time.perf_counter()
    result = audit(*ARGS, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out, time.perf_counter() - started


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_then_resume_equals_uninterrupted(uninterrupted, tmp_path: Path, seed: int):
    whole, seconds = uninterrupted
    out = tmp_path / "killed"
    target = random.Random(seed).randint(1, 20)  # kill after this many jobs committed
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *ARGS, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10 * seconds + 30
    while finished_jobs(out) < target and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the kill: nothing was tested"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert finished_jobs(out) < 24
    resumed = audit(*ARGS, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted_rows(out) == sorted_rows(whole)
    # written in plan order from the store, so byte-identical, not just the same rows
    assert (out / "results.parquet").read_bytes() == (whole / "results.parquet").read_bytes()
    db = sqlite3.connect(out / "store.sqlite")
    (rows,) = db.execute("SELECT SUM(n_rows) FROM jobs").fetchone()
    assert rows == len(sorted_rows(out)) - 1  # no duplicated rows
    (jobs, distinct) = db.execute("SELECT COUNT(*), COUNT(DISTINCT job_key) FROM jobs").fetchone()
    assert jobs == distinct == 24


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_stops_the_run_and_records_no_false_row(
    uninterrupted, tmp_path: Path, workers: str
):
    """SIGTERM to the audit alone (as a scheduler sends it): exit 143, state stopped, and
    no job records the signal as a compressor that raised; resume gives the whole run."""
    whole, seconds = uninterrupted
    out = tmp_path / "terminated"
    args = [a if a != "2" else workers for a in ARGS]
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *args, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10 * seconds + 30
    while finished_jobs(out) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the signal: nothing was tested"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "stopped", manifest
    db = sqlite3.connect(out / "store.sqlite")
    try:
        logs = " ".join(text for (text,) in db.execute("SELECT text FROM job_logs"))
    finally:
        db.close()
    assert "SystemExit" not in logs
    assert "compressor raised" not in logs
    # what the stopped stage did is in costs.json (it was not, a stopped stage had no entry)
    db = sqlite3.connect(out / "store.sqlite")
    try:
        (stored,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
    finally:
        db.close()
    (stopped,) = json.loads((out / "costs.json").read_text())["invocations"]
    assert stopped["outcome"] == "terminated (exit 143)"
    assert 0 < stopped["deterministic"]["jobs"] <= stored
    assert set(stopped["deterministic"]["conditions"]) == {"frontier", "tail", "full"}
    resumed = audit(*args, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "results.parquet").read_bytes() == (whole / "results.parquet").read_bytes()


SLOW = """
import time
from compressors import Compressor, dump, load, pack


class Slow(Compressor):
    name = "slow_tail"
    summary = "tail, slowly: jobs stay in flight while results wait in the pipe"

    def update(self, memory, chunk, query_keys, budget):
        time.sleep(0.01)
        return dump(pack([*load(memory), *chunk.records][::-1], budget)[::-1])
"""


def test_sigterm_to_the_process_group_ends_the_run(tmp_path: Path):
    """An adversary's ``timeout`` (SIGTERM to the whole group, as a cancelled CI job or
    ``docker stop`` sends it) left the audit hanging for ever: each worker raised the
    parent's signal and blocked writing it to a pipe nobody read. Now it exits 143,
    stopped, and resume finishes the run."""
    (tmp_path / "slow_memory.py").write_text(SLOW)
    args = ["run", "--preset", "cca-pilot", "--transforms", "identity,rename:5", "--seed", "1",
            "--conditions", "slow_memory:Slow,baselines", "--workers", "2", "--quiet",
            "--out", "r"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *args], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    time.sleep(8)  # the first jobs in flight (the adversary's timing)
    assert process.poll() is None, "the run ended before the signal: nothing was tested"
    os.killpg(process.pid, signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("a SIGTERM to the process group left the audit running")
    assert process.returncode == 143, stderr
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["state"] == "stopped"
    resumed = subprocess.run(
        [sys.executable, "-m", "audit", "resume", "r", "--quiet"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["state"] == "complete"


def test_sigterm_in_the_llm_stage_prints_no_stray_traceback(tmp_path: Path):
    """Issue 27 (also): SIGTERM while LLM units were in flight printed a traceback ("cannot
    store a finished job ... closed database"): the store was closed, then the event loop
    ran again to close the clients and the units still pending finished into it.  They
    are cancelled first now: exit 143, `stopped`, one quiet stderr."""
    import threading

    from aiohttp import web

    from tests.audit.engine.test_batch import answer

    bodies: list[object] = []
    loop = __import__("asyncio").new_event_loop()
    ready = threading.Event()
    port: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        await __import__("asyncio").sleep(0.05)
        return web.json_response(answer(body))

    async def serve() -> None:
        application = web.Application()
        application.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(application, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        ready.set()
        await __import__("asyncio").Event().wait()

    threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True).start()
    assert ready.wait(10)
    config = tmp_path / "audit.toml"
    config.write_text(
        f'cache_path = "{tmp_path / "cache.sqlite"}"\n[backends.llm]\n'
        f'base_url = "http://127.0.0.1:{port[0]}/v1"\nmodel = "m"\nmax_retries = 0\n'
    )
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", "run", "--preset", "cca-pilot", "--conditions",
         "frontier", "--transforms", "identity", "--writer", "llm", "--reader", "llm",
         "--llm-conditions", "prose_off,frontier", "--llm-sample", "6", "--repeats", "1",
         "--llm-transforms", "identity", "--workers", "1", "--quiet", "--no-determinism",
         "--config", str(config), "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(bodies) < 20 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the signal: nothing was tested"
    time.sleep(0.2)  # requests in flight, answers due while the run shuts down
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr, stderr
    assert "closed database" not in stderr, stderr
    assert json.loads((out / "manifest.json").read_text())["state"] == "stopped"
