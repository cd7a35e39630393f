"""``audit run --executor ray`` on a real local Ray cluster (no mock).

The module fixture starts a Ray head node the way a user would, ``ray start --head
--block`` with 2 CPUs and a private temporary directory, in a session of its own, on
loopback only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: as on a machine with no
network beyond loopback) and with a token of its own (``RAY_AUTH_TOKEN``, which Ray
then requires); the test connects with ``--ray-address 127.0.0.1:PORT``, the drivers
given the token but not the loopback switch nor ``RAY_AUTH_MODE``: the executor must
find both itself.  Teardown ends that session's process group (never ``ray stop``,
which stops every Ray cluster of the user on the machine).  Then: the pilot through Ray
gives byte-identical result files to the local process pool; a driver killed with
SIGKILL mid-run resumes (with Ray, or with the local pool: the executor is not part of
the plan); a worker killed mid-job is replaced and its job run again, nothing
duplicated; a private Ray (no address) stays on 127.0.0.1, leaves no token in the
user's home, and gives the same result files.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._cli import finished_jobs
from tests._system import in_ci

LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
CLUSTER_ENV: dict[str, str] = {}
"""What the drivers are given to join the fixture's cluster: its token."""


def _env(**extra: str) -> dict[str, str]:
    """A driver's environment: this one, less Ray's loopback switch and authentication
    mode (the executor must set them), plus ``CLUSTER_ENV`` and ``extra``."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **CLUSTER_ENV, **extra}
    for name in (LOOPBACK_SWITCH, "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(name, None)
    return env


ARGS = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail,full",
        "--transforms", "identity,rename:4,permute:2", "--quiet"]  # fmt: skip
SLOW_ARGS = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail,bm25,full",
             "--transforms", "identity,rename:24", "--quiet"]  # fmt: skip
"""Jobs long enough (about a second each) to kill a worker in the middle of one.  Both on
the paper's pilot, whose 24 pairs are fixed (the default has 84)."""
FILES = ("results.parquet", "summary.json")
START_TIMEOUT_S = 90


def _ray_bin() -> Path:
    return Path(sys.executable).with_name("ray")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[tuple[str, int]]:
    """(address, session id) of a fresh 2-CPU Ray head node on 127.0.0.1."""
    if importlib.util.find_spec("ray") is None or not _ray_bin().exists():
        message = "ray is not installed; `pip install -e '.[dev]'` installs it"
        if in_ci():
            pytest.fail(f"CI=true: {message}")
        pytest.skip(message)
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    log = temp / "start.log"
    CLUSTER_ENV["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    env = {**_env(), LOOPBACK_SWITCH: "0"}
    command = [
        str(_ray_bin()), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        "--port", "0", "--num-cpus", "2", "--temp-dir", str(temp),
        "--include-dashboard", "false", "--disable-usage-stats",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        port = None
        written = temp / "ray_current_cluster"  # the GCS address, once the head is up
        while port is None:
            text = log.read_text(errors="replace")
            address = written.read_text().strip() if written.exists() else ""
            if address and "Ray runtime started" in text:
                assert address.startswith("127.0.0.1:"), address  # loopback only
                port = int(address.rpartition(":")[2])
            elif process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed (exit {process.poll()}):\n{text[-4000:]}")
            else:
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", process.pid
    finally:
        _stop_group(process)
        shutil.rmtree(temp, ignore_errors=True)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """End the cluster: the process group of the ``ray start`` this fixture began."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _group_alive(process.pid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        process.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def audit(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "audit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or _env(),
    )


def assert_same_results(run: Path, reference: Path) -> None:
    for name in FILES:
        assert (run / name).read_bytes() == (reference / name).read_bytes(), name
    db = sqlite3.connect(run / "store.sqlite")
    try:
        (rows,) = db.execute("SELECT SUM(n_rows) FROM jobs").fetchone()
        jobs, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT job_key) FROM jobs").fetchone()
    finally:
        db.close()
    import pyarrow.parquet as pq

    lines = pq.ParquetFile(run / "results.parquet").metadata.num_rows
    assert rows == lines  # nothing duplicated
    assert jobs == distinct == 24


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local") / "run"
    result = audit(*ARGS, "--workers", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_the_pilot_on_ray_equals_the_process_pool(
    ray_cluster: tuple[str, int], local_run: Path, tmp_path: Path
) -> None:
    address, _ = ray_cluster
    out = tmp_path / "ray"
    result = audit(*ARGS, "--executor", "ray", "--ray-address", address, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert_same_results(out, local_run)
    cost = json.loads((out / "costs.json").read_text())["invocations"][-1]["deterministic"]
    assert cost["executor"] == "ray"
    assert cost["cpus"] == 2
    assert cost["jobs"] == 24
    # the same plan: config.json does not name the executor
    assert (
        json.loads((out / "config.json").read_text())["config"]
        == json.loads((local_run / "config.json").read_text())["config"]
    )
    # the same run-directory guarantees: the manifest, with the run's own id
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "complete"
    assert manifest["run_id"] == json.loads((out / "config.json").read_text())["run_id"]
    assert manifest["finished_jobs"] == len(manifest["planned_jobs"]) == 24
    local_manifest = json.loads((local_run / "manifest.json").read_text())
    assert manifest["files"] == local_manifest["files"]  # the same bytes, the same checksums


def _kill_driver_after(args: list[str], out: Path, jobs: int, timeout_s: float = 120) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *args, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=_env(),
    )
    deadline = time.monotonic() + timeout_s
    while finished_jobs(out) < jobs and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before the kill: nothing was tested"
    os.killpg(process.pid, signal.SIGKILL)  # the driver's own session, not the cluster
    process.wait()
    assert 0 < finished_jobs(out) < 24


@pytest.mark.parametrize("resume_with", ["ray", "local"])
def test_a_killed_ray_driver_resumes(
    ray_cluster: tuple[str, int], local_run: Path, tmp_path: Path, resume_with: str
) -> None:
    address, _ = ray_cluster
    out = tmp_path / "killed"
    ray_args = [*ARGS, "--executor", "ray", "--ray-address", address]
    _kill_driver_after(ray_args, out, jobs=3 if resume_with == "ray" else 8)
    run_id = json.loads((out / "config.json").read_text())["run_id"]
    killed = json.loads((out / "manifest.json").read_text())
    assert killed["state"] == "running"  # killed without a word: never "complete"
    assert killed["run_id"] == run_id
    if resume_with == "ray":  # `audit resume`, the plan read back from config.json
        resumed = audit("resume", str(out), "--executor", "ray", "--ray-address", address,
                        "--quiet")  # fmt: skip
    else:  # the same `audit run` command, with the local pool
        resumed = audit(*ARGS, "--workers", "2", "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_results(out, local_run)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "complete"
    assert manifest["run_id"] == run_id
    invocations = json.loads((out / "costs.json").read_text())["invocations"]
    assert [i.get("outcome") for i in invocations] == [None, "finished"]  # the killed one too
    assert invocations[-1]["deterministic"]["executor"] == resume_with
    assert invocations[-1]["deterministic"]["jobs"] < 24  # the finished ones were skipped


def test_nothing_at_the_ray_address_stops_the_run_before_any_work(tmp_path: Path) -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "run"
    result = audit(*ARGS, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}",
                   "--out", str(out))  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --ray-address: nothing answers at 127.0.0.1:{port}")
    assert not out.exists()  # no run directory was made


@pytest.mark.parametrize("listener", ["silent", "http"])
def test_something_that_is_not_ray_at_the_address_stops_the_run_at_once(
    tmp_path: Path, listener: str
) -> None:
    """A port that accepts and says nothing, or an HTTP/1 server: one line within the
    check's timeout, where Ray itself would wait for minutes."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            if listener == "http":
                connection.recv(1024)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    out = tmp_path / "run"
    started = time.monotonic()
    try:
        result = audit(*ARGS, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}",
                       "--out", str(out))  # fmt: skip
    finally:
        server.close()
        for connection in held:
            connection.close()
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "answers, but not as a Ray cluster does" in lines[0], lines
    assert not out.exists()
    assert time.monotonic() - started < 60


def _workers_running_a_job(session: int) -> list[int]:
    """Ray worker processes of our cluster busy with a job (their title names the task)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
            if title.startswith(b"ray::_execute") and os.getsid(int(entry.name)) == session:
                found.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return found


def test_a_lost_worker_is_replaced_and_nothing_is_duplicated(
    ray_cluster: tuple[str, int], tmp_path: Path
) -> None:
    address, session = ray_cluster
    reference = tmp_path / "local"
    result = audit(*SLOW_ARGS, "--workers", "2", "--out", str(reference))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "ray"
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *SLOW_ARGS, "--executor", "ray",
         "--ray-address", address, "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        env=_env(),
    )  # fmt: skip
    killed = 0
    deadline = time.monotonic() + 120
    while killed < 2 and process.poll() is None and time.monotonic() < deadline:
        busy = _workers_running_a_job(session)
        if busy and finished_jobs(out) >= 2 * killed + 1:
            os.kill(busy[0], signal.SIGKILL)  # a worker of the cluster, mid-job
            killed += 1
        time.sleep(0.02)
    _, stderr = process.communicate(timeout=300)
    assert killed == 2, "no worker was caught mid-job: nothing was tested"
    assert process.returncode == 0, stderr.decode(errors="replace")[-3000:]
    assert_same_results(out, reference)


PRIVATE_PROBE = """
from audit.engine import _ray
_ray.connect(None, 1)  # imports Ray (as `audit run` does: Ray is not imported before)
import ray
try:
    print(*sorted({node["NodeManagerAddress"] for node in ray.nodes()}))
finally:
    _ray.disconnect()
"""


def test_a_private_ray_stays_on_loopback_and_equals_the_process_pool(
    local_run: Path, tmp_path: Path
) -> None:
    """No address: the run starts its own Ray, on 127.0.0.1 alone (Ray 2.60 otherwise
    takes the machine's outward address, even when told 127.0.0.1), authenticated with a
    token of its own that it writes nowhere (Ray otherwise writes ~/.ray/auth_token,
    which turns authentication on for every later ``ray start --head`` of the user)."""
    if importlib.util.find_spec("ray") is None:
        if in_ci():
            pytest.fail("CI=true: ray is not installed")
        pytest.skip("ray is not installed")
    home = tmp_path / "home"
    home.mkdir()
    env = _env(HOME=str(home))
    env.pop("RAY_AUTH_TOKEN", None)
    probe = subprocess.run(
        [sys.executable, "-c", PRIVATE_PROBE], capture_output=True, text=True, timeout=300,
        env=env,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split() == ["127.0.0.1"]
    out = tmp_path / "private"
    result = audit(*ARGS, "--executor", "ray", "--workers", "2", "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_results(out, local_run)
    cost = json.loads((out / "costs.json").read_text())["invocations"][-1]["deterministic"]
    assert cost["executor"] == "ray"
    assert cost["cpus"] == 2
    assert not (home / ".ray").exists()
