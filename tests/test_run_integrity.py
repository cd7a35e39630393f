"""A run that is not whole never looks whole: real `audit` processes, real files.

Each test makes a real run directory with the command line, then damages it the way
the world does (a kill, a full disk, a torn file, a store copied in from another run,
an empty costs.json) and checks what `audit report`, `audit compare` and `audit
resume` say and do: the headline and the exit status name the problem, results come
from what is intact, and resuming gives exactly the results of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier,tail",
       "--transforms", "identity,rename:2", "--quiet", "--workers", "1"]  # fmt: skip
"""A small run: 24 source pairs, two conditions (seconds)."""
KILLED_RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier,tail",
              "--transforms", "identity,rename:30,permute:30", "--quiet", "--workers", "1"]  # fmt: skip
"""The small run with more instances: one worker takes a few seconds."""
SLOW_RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier,tail,full",
            "--transforms", "identity,rename:12,permute:12", "--quiet"]  # fmt: skip
"""A run long enough to be stopped in the middle."""


def audit(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "audit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a command that failed cleanly: one ``error:`` line, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, "no error message"
    assert lines[-1].startswith("error: "), result.stderr
    return lines[-1]


def finished_jobs(run_dir: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{run_dir / 'store.sqlite'}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0
    try:
        return int(db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted small run."""
    out = tmp_path_factory.mktemp("whole") / "run"
    result = audit(*RUN, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def headline(report_dir: Path) -> str:
    return (report_dir / "headline.csv").read_text()


def test_a_finished_run_has_a_manifest_that_matches_its_files(whole: Path, tmp_path: Path):
    manifest = json.loads((whole / "manifest.json").read_text())
    config = json.loads((whole / "config.json").read_text())
    assert manifest["state"] == "complete"
    assert manifest["run_id"] == config["run_id"]
    assert len(manifest["planned_jobs"]) == manifest["finished_jobs"] == 24
    assert manifest["planned_units"] == []
    rows = (whole / "results.csv").read_text().count("\n") - 1
    assert manifest["rows"] == rows
    import hashlib

    for name in ("results.csv", "results.parquet", "summary.json"):
        data = (whole / name).read_bytes()
        assert manifest["files"][name] == {
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
    report = audit("report", str(whole), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert "INCOMPLETE" not in (tmp_path / "report" / "report.md").read_text()


def test_a_killed_run_is_reported_incomplete_and_resume_finishes_it(whole: Path, tmp_path: Path):
    out = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *KILLED_RUN, "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while finished_jobs(out) < 5 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the kill: nothing was tested"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done = finished_jobs(out)
    assert 5 <= done < 24
    report = audit("report", str(out), "--out", str(tmp_path / "partial"))
    assert report.returncode == 3, report.stderr
    text = (tmp_path / "partial" / "report.md").read_text()
    assert "INCOMPLETE" in text
    assert f"{done} of 24 source pairs" in text
    assert f"audit resume {out}" in report.stderr
    compare = audit("compare", str(whole), str(out), "--out", str(tmp_path / "cmp"))
    assert compare.returncode == 3, compare.stderr
    assert "INCOMPLETE" in (tmp_path / "cmp" / "compare.md").read_text()

    resumed = audit("resume", str(out), "--quiet", "--workers", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "manifest.json").read_text())["state"] == "complete"
    again = audit("report", str(out), "--out", str(tmp_path / "whole-now"))
    assert again.returncode == 0, again.stderr
    costs = json.loads((out / "costs.json").read_text())["invocations"]
    assert len(costs) == 2  # the killed invocation is listed, without an outcome
    assert "outcome" not in costs[0]
    assert costs[1]["outcome"] == "finished"
    assert costs[1]["deterministic"]["jobs"] == 24 - done


def test_sigterm_records_why_the_run_stopped(tmp_path: Path):
    out = tmp_path / "terminated"
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *SLOW_RUN, "--workers", "2", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while finished_jobs(out) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before SIGTERM: nothing was tested"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "stopped"
    assert manifest["stopped"].startswith("terminated")
    report = audit("report", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 3
    assert "it stopped: terminated" in (tmp_path / "report" / "report.md").read_text()


def test_damaged_result_files_are_read_from_the_store(whole: Path, tmp_path: Path):
    clean = audit("report", str(whole), "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0
    damaged = tmp_path / "damaged"
    shutil.copytree(whole, damaged)
    csv = damaged / "results.csv"
    csv.write_bytes(csv.read_bytes()[:-50])  # the last row cut off, as a full disk leaves it
    parquet = damaged / "results.parquet"
    parquet.write_bytes(parquet.read_bytes()[:1000])
    report = audit("report", str(damaged), "--out", str(tmp_path / "rebuilt"))
    assert report.returncode == 4, report.stderr
    assert "results read from store.sqlite" in report.stderr
    text = (tmp_path / "rebuilt" / "report.md").read_text()
    assert "damaged" in text
    assert "nan" not in headline(tmp_path / "rebuilt")
    assert headline(tmp_path / "rebuilt") == headline(tmp_path / "clean")
    # resume writes the files again, identical to the run's
    resumed = audit("resume", str(damaged), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert csv.read_bytes() == (whole / "results.csv").read_bytes()
    assert audit("report", str(damaged), "--out", str(tmp_path / "r2")).returncode == 0


def test_a_store_from_another_run_is_refused(whole: Path, tmp_path: Path):
    other = tmp_path / "other"
    made = audit(*RUN[:4], "frontier", *RUN[5:], "--out", str(other))
    assert made.returncode == 0, made.stderr
    shutil.copy(whole / "store.sqlite", other / "store.sqlite")
    for suffix in ("-wal", "-shm"):
        (other / f"store.sqlite{suffix}").unlink(missing_ok=True)
    resumed = audit("resume", str(other), "--quiet")
    assert resumed.returncode != 0
    assert "belongs to another run" in one_line_error(resumed)
    report = audit("report", str(other), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    assert "belongs to another run" in report.stderr
    # its rows were never merged: the report's reads are the other run's own
    reads = (other / "results.csv").read_text().count("\n") - 1
    assert json.loads((other / "manifest.json").read_text())["rows"] == reads


def test_a_store_without_run_id_holding_other_jobs_is_refused(whole: Path, tmp_path: Path):
    """A store of another run made before run ids: its unplanned jobs give it away."""
    other = tmp_path / "other"
    assert audit(*RUN[:4], "frontier", *RUN[5:], "--out", str(other)).returncode == 0
    shutil.copy(whole / "store.sqlite", other / "store.sqlite")
    db = sqlite3.connect(other / "store.sqlite")
    db.execute("DELETE FROM run_meta")
    db.commit()
    db.close()
    resumed = audit("resume", str(other), "--quiet")
    assert "did not plan" in one_line_error(resumed)


def test_an_empty_costs_file_does_not_block_resuming(whole: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    (run / "costs.json").write_bytes(b"")
    resumed = audit("resume", str(run), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    aside = list(run.glob("costs.json.damaged-*"))
    assert len(aside) == 1
    assert aside[0].read_bytes() == b""  # kept, never deleted
    costs = json.loads((run / "costs.json").read_text())
    assert "moved to costs.json.damaged-" in costs["notes"][0]
    assert costs["invocations"][-1]["outcome"] == "finished"
    assert audit("report", str(run), "--out", str(tmp_path / "r")).returncode == 0


@pytest.mark.parametrize(
    ("victim", "content"),
    [("config.json", b"{not json"), ("store.sqlite", b"garbage" * 1000), ("config.json", b"")],
)
def test_an_unreadable_file_is_named_with_the_way_out(
    whole: Path, tmp_path: Path, victim: str, content: bytes
):
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    for suffix in ("-wal", "-shm"):
        (run / f"store.sqlite{suffix}").unlink(missing_ok=True)
    (run / victim).write_bytes(content)
    resumed = audit("resume", str(run), "--quiet")
    line = one_line_error(resumed)
    assert victim in line
    again = audit(*RUN, "--out", str(run))
    assert victim in one_line_error(again)
    if victim == "store.sqlite":
        assert "move it away" in line
        # the result files still match the manifest: the report reads them, and says
        # the store (the drill-down's memories) is damaged
        report = audit("report", str(run), "--out", str(tmp_path / "report"))
        assert report.returncode in (0, 4), report.stderr
        assert headline(tmp_path / "report")
    else:
        assert "restore" in line


def test_the_run_store_is_private_and_the_results_follow_the_umask(whole: Path):
    assert stat.S_IMODE((whole / "store.sqlite").stat().st_mode) == 0o600
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.csv", "results.parquet", "summary.json", "manifest.json"):
        assert stat.S_IMODE((whole / name).stat().st_mode) == 0o666 & ~umask, name


def children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_pool_workers_exit_when_the_run_is_killed(tmp_path: Path):
    """SIGKILL of the main process alone (what the OOM killer does): no worker stays."""
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *SLOW_RUN, "--workers", "2",
         "--out", str(tmp_path / "run")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and process.poll() is None and time.monotonic() < deadline:
        workers = children(process.pid)
        time.sleep(0.05)
    assert len(workers) >= 2, "the pool did not start"
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if alive(w)]
    for pid in left:  # do not leak them into the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent by 10 s"
