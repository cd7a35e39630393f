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
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._cli import finished_jobs, lean_copy, store_sql, vouched_rewrite

RUN = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail",
       "--transforms", "identity,rename:2", "--quiet", "--workers", "1", "--csv"]  # fmt: skip
"""A small run: 24 source pairs, two conditions (seconds); it writes results.csv too, so
each result file can be damaged beside an intact one.  The paper's pilot, whose size is
fixed: the default's 84 pairs would only make these checks slower."""
KILLED_RUN = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail",
              "--transforms", "identity,rename:30,permute:30", "--quiet", "--workers", "1"]  # fmt: skip
"""The small run with more instances: one worker takes a few seconds."""
SLOW_RUN = ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail,full",
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


def fits(text: str, width: int = 80) -> None:
    """Issue 28: the INCOMPLETE warning (186 characters) and the `stopped:` message were
    single lines; every line fits the (piped: 80-column) terminal now, save one that holds
    a single path or a single command in backquotes, never split so it can be copied."""
    long = [
        line
        for line in text.splitlines()
        if len(line) > width
        and len(line.split()) > 1
        and not re.fullmatch(r"\s*`[^`]*`[.,;]?", line)
    ]
    assert not long, long


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


def kill_run(out: Path) -> int:
    """Start KILLED_RUN into ``out``, SIGKILL it once 5 jobs are stored; the jobs stored."""
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
    return done


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run killed part-way (never resumed): copy it before damaging it."""
    out = tmp_path_factory.mktemp("killed") / "run"
    kill_run(out)
    return out


def test_results_parquet_keeps_no_column_statistics(whole: Path):
    # the writer held every row group's min and max values until it closed: about 65 KB
    # a job, so the main process grew with the number of jobs (55 MB over 840 jobs);
    # nothing reads results.parquet by predicate, so none are written
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(whole / "results.parquet").metadata
    assert metadata.num_row_groups >= 1
    for group in range(metadata.num_row_groups):
        chunks = metadata.row_group(group)
        assert not any(chunks.column(c).is_stats_set for c in range(chunks.num_columns))


def test_a_killed_run_is_reported_incomplete_and_resume_finishes_it(whole: Path, tmp_path: Path):
    out = tmp_path / "killed"
    done = kill_run(out)
    report = audit("report", str(out), "--out", str(tmp_path / "partial"))
    assert report.returncode == 3, report.stderr
    text = (tmp_path / "partial" / "report.md").read_text()
    assert "INCOMPLETE" in text
    assert f"{done} of 24 source pairs" in text
    assert f"audit resume {out}" in report.stderr
    # the way out is shown as a command, not as escaped backquotes
    assert f"`audit resume {out}`" in text
    assert "\\`" not in text
    html = (tmp_path / "partial" / "report.html").read_text()
    assert f"<code>audit resume {out}</code>" in html
    # the warning comes first, as the README says, not after the "wrote" line
    both = subprocess.run(
        [sys.executable, "-m", "audit", "report", str(out), "--out", str(tmp_path / "again")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert both.returncode == 3
    assert 0 <= both.stdout.index("warning:") < both.stdout.index("wrote"), both.stdout
    assert "INCOMPLETE run:" in both.stdout
    fits(both.stdout)
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
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while finished_jobs(out) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before SIGTERM: nothing was tested"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert "stopped: what finished is kept in" in " ".join(stderr.split())
    fits(stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "stopped"
    assert manifest["stopped"].startswith("terminated")
    report = audit("report", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 3
    assert "it stopped: terminated" in (tmp_path / "report" / "report.md").read_text()


def test_damaged_result_files_are_found_and_resume_runs_their_jobs_again(
    whole: Path, tmp_path: Path
):
    """Both result files damaged: results.parquet was the rows' one copy, so the report
    says which files are damaged and that their jobs' rows are gone (exit 4), and a
    resume runs exactly those jobs again, writing the run's own files back."""
    damaged = tmp_path / "damaged"
    shutil.copytree(whole, damaged)
    csv = damaged / "results.csv"
    csv.write_bytes(csv.read_bytes()[:-50])  # the last row cut off, as a full disk leaves it
    parquet = damaged / "results.parquet"
    parquet.write_bytes(parquet.read_bytes()[:1000])
    report = audit("report", str(damaged), "--out", str(tmp_path / "rebuilt"))
    assert report.returncode == 4, report.stderr
    assert "results.parquet does not match its checksum" in report.stderr
    assert "the rows of 24 finished job(s)" in report.stderr
    assert f"audit resume {damaged}" in report.stderr
    resumed = audit("resume", str(damaged), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    for name in ("results.parquet", "results.csv", "summary.json"):
        assert (damaged / name).read_bytes() == (whole / name).read_bytes(), name
    assert audit("report", str(damaged), "--out", str(tmp_path / "r2")).returncode == 0


def test_a_damaged_config_is_damage_not_a_note(whole: Path, tmp_path: Path):
    """A truncated config.json: the report is still written from what is intact, but it
    says so on stderr and exits 4, as for any other damaged file."""
    damaged = tmp_path / "damaged"
    shutil.copytree(whole, damaged)
    config = damaged / "config.json"
    config.write_bytes(config.read_bytes()[:200])
    report = audit("report", str(damaged), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    assert "config.json is damaged" in report.stderr
    assert "restore it from a copy" in report.stderr
    assert (tmp_path / "report" / "report.md").exists()


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


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another whole run (one condition): a source of files from another run."""
    out = tmp_path_factory.mktemp("other") / "run"
    made = audit(*RUN[:4], "frontier", *RUN[5:], "--out", str(out))
    assert made.returncode == 0, made.stderr
    return out


@pytest.fixture(scope="module")
def clean_headline(whole: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("clean") / "report"
    report = audit("report", str(whole), "--out", str(target))
    assert report.returncode == 0, report.stderr
    return headline(target)


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    """Each warning on stderr as one line: a warning wraps at 80 columns, its later lines
    indented (and none of them wider than that, paths aside)."""
    assert "Traceback" not in result.stderr, result.stderr
    found: list[str] = []
    for line in result.stderr.splitlines():
        if line.startswith("warning: "):
            found.append(line)
        elif line.startswith("  ") and found:
            found[-1] += " " + line.strip()
    return found


@pytest.mark.parametrize(
    ("damage", "victim"),
    [
        ("truncated", "results.csv"),
        ("another run's copy", "results.parquet"),
        ("a directory", "results.parquet"),
        ("checksum edited in manifest.json", "results.csv"),
    ],
)
def test_one_damaged_result_file_is_found_beside_an_intact_one(
    whole: Path, other: Path, clean_headline: str, tmp_path: Path, damage: str, victim: str
):
    """Only one of the two result files is damaged: the other still matches, and the
    report reads it, but says which file is damaged and exits 4."""
    run = copy_run(whole, tmp_path / "run")
    path = run / victim
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-50])
    elif damage == "another run's copy":
        shutil.copy(other / victim, path)
    elif damage == "a directory":
        path.unlink()
        path.mkdir()
    else:
        manifest = json.loads((run / "manifest.json").read_text())
        sha = manifest["files"][victim]["sha256"]
        manifest["files"][victim]["sha256"] = ("0" if sha[0] != "0" else "1") + sha[1:]
        (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    intact = "results.csv" if victim == "results.parquet" else "results.parquet"
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    found = [line for line in warnings(report) if victim in line]
    assert found, report.stderr
    assert f"results read from {intact}" in found[0]
    assert f"audit resume {run}" in found[0]
    assert headline(tmp_path / "report") == clean_headline
    # against another run: a copy of the same run is refused before it is read (one run id)
    compare = audit("compare", str(other), str(run), "--out", str(tmp_path / "cmp"))
    assert compare.returncode == 4, compare.stderr
    assert any(victim in line for line in warnings(compare))


def test_a_deleted_manifest_is_damage_not_a_run_made_before_manifests(killed: Path, tmp_path: Path):
    """Deleting manifest.json of a partial run must not make it look whole."""
    run = copy_run(killed, tmp_path / "run")
    (run / "manifest.json").unlink()
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    found = [line for line in warnings(report) if "manifest.json missing" in line]
    assert found, report.stderr
    assert "completeness cannot be checked" in found[0]
    assert f"audit resume {run}" in found[0]
    # the way out: resume finishes the run and writes the manifest again
    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "manifest.json").read_text())["state"] == "complete"
    assert audit("report", str(run), "--out", str(tmp_path / "r2")).returncode == 0


def test_a_run_made_before_manifests_is_still_read_unchecked(whole: Path, tmp_path: Path):
    """No run id in config.json or the store, no manifest: a legacy run, read as before."""
    run = copy_run(whole, tmp_path / "run")
    (run / "manifest.json").unlink()
    config = json.loads((run / "config.json").read_text())
    del config["run_id"]
    (run / "config.json").write_text(json.dumps(config, indent=2))
    db = sqlite3.connect(run / "store.sqlite")
    db.execute("DELETE FROM run_meta")
    db.commit()
    db.close()
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert not warnings(report)


@pytest.mark.parametrize("recorded_by", ["the run", "RunStore.record_plan"])
def test_a_plan_edited_in_the_manifest_is_found(killed: Path, tmp_path: Path, recorded_by: str):
    """A killed run's manifest edited to plan only the finished jobs, state complete:
    the store recorded the real plan when the run made it (``recorded_by``: the run
    itself, or the call the executor makes, made here on the run's own plan)."""
    run = copy_run(killed, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    assert len(manifest["planned_jobs"]) == 24
    if recorded_by != "the run":
        from audit.rundir import RunStore

        store = RunStore(run, manifest["run_id"])
        store.record_plan(manifest["planned_jobs"], manifest["planned_units"])
        store.close()
    db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
    done = [key for (key,) in db.execute("SELECT job_key FROM jobs")]
    assert db.execute("SELECT 1 FROM run_meta WHERE key = 'plan'").fetchone(), "no plan recorded"
    db.close()
    manifest.update(
        planned_jobs=[k for k in manifest["planned_jobs"] if k in set(done)],
        finished_jobs=len(done), state="complete", stopped=None,
    )  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    found = [line for line in warnings(report) if "manifest.json was changed" in line]
    assert found, report.stderr
    assert f"holds {len(done)} of the 24 jobs" in found[0]


def corrupt(path: Path, offset: int = 8192, size: int = 100) -> None:
    """``size`` bytes of (seeded) noise at ``offset``, as a bad sector leaves them."""
    import random

    noise = random.Random(20250101).randbytes(size)
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(noise)


@pytest.mark.parametrize("damage", ["a directory", "noise at 8192"])
def test_a_damaged_store_is_one_line_for_resume_and_a_warning_for_report(
    whole: Path, clean_headline: str, tmp_path: Path, damage: str
):
    run = copy_run(whole, tmp_path / "run")
    store = run / "store.sqlite"
    for suffix in ("-wal", "-shm"):
        (run / f"store.sqlite{suffix}").unlink(missing_ok=True)
    if damage == "a directory":
        store.unlink()
        store.mkdir()
    else:
        corrupt(store)
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    assert any("store.sqlite is damaged" in line for line in warnings(report)), report.stderr
    assert headline(tmp_path / "report") == clean_headline  # from the intact files
    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    assert resumed.returncode == 1, resumed.stderr
    line = one_line_error(resumed)
    assert str(store) in line
    assert "move it away" in line


def test_files_a_killed_run_never_wrote_are_not_said_to_mismatch(killed: Path, tmp_path: Path):
    run = copy_run(killed, tmp_path / "run")
    for suffix in ("-wal", "-shm"):
        (run / f"store.sqlite{suffix}").unlink(missing_ok=True)
    (run / "store.sqlite").write_bytes(b"garbage" * 1000)
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    line = one_line_error(report)
    assert "results.parquet was not written yet" in line
    assert "results.csv was not written yet" in line
    assert "do not match" not in line


@pytest.mark.parametrize(
    "victim",
    ["manifest.json", "config.json", "results.csv", "results.parquet", "costs.json",
     "store.sqlite"],
)  # fmt: skip
def test_a_fifo_in_place_of_a_run_file_never_blocks(whole: Path, tmp_path: Path, victim: str):
    """A FIFO has no writer: reading it would wait forever.  It is refused, named."""
    run = copy_run(whole, tmp_path / "run")
    for suffix in ("-wal", "-shm"):
        (run / f"store.sqlite{suffix}").unlink(missing_ok=True)
    (run / victim).unlink()
    os.mkfifo(run / victim)
    report = audit("report", str(run), "--out", str(tmp_path / "report"), timeout=120)
    assert "Traceback" not in report.stderr, report.stderr
    if victim == "costs.json":  # a note in the report: nothing of the results is missing
        assert report.returncode == 0, report.stderr
        text = (tmp_path / "report" / "report.md").read_text()
        assert any(victim in line and "FIFO" in line for line in text.splitlines())
    else:
        assert report.returncode == 4, report.stderr
        assert any(victim in line and "FIFO" in line for line in warnings(report))
    resumed = audit("resume", str(run), "--quiet", "--workers", "1", timeout=120)
    if victim == "config.json":
        line = one_line_error(resumed)
        assert victim in line
        assert "FIFO" in line
    elif victim == "store.sqlite":
        assert "move it away" in one_line_error(resumed)
    else:  # rewritten (costs.json: the FIFO moved aside, never deleted)
        assert resumed.returncode == 0, resumed.stderr


def test_temporary_files_of_killed_writers_are_removed_and_live_ones_kept(
    whole: Path, tmp_path: Path
):
    """A writer killed mid-write leaves its temporary sibling; the next invocation on the
    directory removes it, but never the file of a writer that is still alive."""
    run = copy_run(whole, tmp_path / "run")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        stale = run / f".results.parquet.{dead_pid}.0123abcd.tmp"
        kept = run / f".results.csv.{live.pid}.89abcdef.tmp"
        other_file = run / ".notes.tmp"
        for path in (stale, kept, other_file):
            path.write_bytes(b"half a file")
        resumed = audit("resume", str(run), "--quiet", "--workers", "1")
        assert resumed.returncode == 0, resumed.stderr
        assert not stale.exists()
        assert kept.exists()
        assert other_file.exists()
    finally:
        live.kill()
        live.wait()


def test_only_temporary_files_of_dead_writers_are_removed(tmp_path: Path):
    """``remove_stale_temps`` on real files: a dead pid's file goes, a live pid's, this
    process's, a directory of that name and anything else stay."""
    from audit.rundir import remove_stale_temps

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        stale = tmp_path / f".results.parquet.{int(dead.stdout)}.0123abcd.tmp"
        kept = [
            tmp_path / f".results.csv.{live.pid}.89abcdef.tmp",
            tmp_path / f".manifest.json.{os.getpid()}.00000000.tmp",
            tmp_path / "results.csv",
            tmp_path / ".notes.tmp",
            tmp_path / f".config.json.{int(dead.stdout)}.nothex!.tmp",
        ]
        for path in (stale, *kept):
            path.write_bytes(b"half a file")
        folder = tmp_path / f".summary.json.{int(dead.stdout)}.fedcba98.tmp"
        folder.mkdir()
        assert remove_stale_temps(tmp_path) == [stale]
        assert not stale.exists()
        assert all(path.exists() for path in kept)
        assert folder.is_dir()
    finally:
        live.kill()
        live.wait()


FLAKY_SYSTEM = """\
import json, os, sys
DOWN = sys.argv[1]
for line in sys.stdin:
    if os.path.exists(DOWN):
        sys.exit(7)  # down: exits without answering
    request = json.loads(line)
    lines = request["memory"].split("\\n") if request["memory"] else []
    lines += [json.dumps(r, separators=(",", ":")) for r in request["chunk"]["records"]]
    print(json.dumps({"memory": "\\n".join(lines[-8:])}), flush=True)
"""


def test_an_external_system_that_did_not_answer_leaves_the_run_incomplete_until_resumed(
    tmp_path: Path,
):
    """Every read of an external memory system is NA while it is down: the run is not
    "complete" (exit 3, the report exits 3 and says why), and a resume once it is back
    runs those jobs again and ends with the results of a run that never saw it down."""
    system, down = tmp_path / "system.py", tmp_path / "down"
    system.write_text(FLAKY_SYSTEM)
    condition = f"cmd:run={sys.executable} {system} {down},timeout=20"
    args = ["run", "--preset", "cca-pilot-paper", "--conditions", f"frontier,{condition}",
            "--transforms", "identity", "--quiet", "--workers", "1"]  # fmt: skip
    down.touch()
    out = tmp_path / "run"
    first = audit(*args, "--out", str(out))
    assert first.returncode == 3, first.stderr
    assert "24 job(s) hold reads that are NA" in first.stderr, first.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["state"], manifest["na_jobs"]) == ("incomplete", 24)
    report = audit("report", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 3, report.stderr
    assert "24 job(s) hold reads that are NA" in (tmp_path / "report" / "report.md").read_text()

    down.unlink()  # the system is back
    resumed = audit("resume", str(out), "--quiet", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["state"], manifest["na_jobs"]) == ("complete", 0)
    reference = tmp_path / "reference"
    assert audit(*args, "--out", str(reference)).returncode == 0
    assert (out / "results.parquet").read_bytes() == (reference / "results.parquet").read_bytes()


def _damaged_index(index: bytes, how: str) -> bytes:
    """A block index (magic, count, 32 bytes a sha256, zlib-compressed 4-byte lengths)
    damaged as ``how`` says."""
    import zlib

    count = int.from_bytes(index[4:8], "little")
    digests, lengths = index[8 : 8 + 32 * count], zlib.decompress(index[8 + 32 * count :])
    if how == "cut inside its sha256s":
        return index[:40]
    if how == "empty, its rows still pointing in":
        return index[:4] + (0).to_bytes(4, "little") + zlib.compress(b"")
    if how == "one sha256 short":
        short = (count - 1).to_bytes(4, "little")
        return index[:4] + short + digests[:-32] + zlib.compress(lengths[:-4])
    return index[:8] + digests + zlib.compress(lengths + bytes(12))  # lengths to spare


STORE_DAMAGE = {
    "an index that is empty bytes": "UPDATE memory_blocks SET shas = x'' WHERE block = ?",
    "an index that is a number": "UPDATE memory_blocks SET shas = 7 WHERE block = ?",
    "an index that is text, not UTF-8": (
        "UPDATE memory_blocks SET shas = CAST(x'ff' || shas AS TEXT) WHERE block = ?"
    ),
    "an index counting 2**32-1 memories": (
        "UPDATE memory_blocks SET shas = CAST(substr(shas, 1, 4) || x'ffffffff' "
        "|| substr(shas, 9) AS BLOB) WHERE block = ?"
    ),
    "a block that is empty": "UPDATE memory_blocks SET blob = x'' WHERE block = ?",
    "a block that is a number": "UPDATE memory_blocks SET blob = 5 WHERE block = ?",
    "a block of random bytes": "UPDATE memory_blocks SET blob = randomblob(99) WHERE block = ?",
    "a block size that is text": "UPDATE memory_blocks SET size = 'x' WHERE block = ?",
    "a block size too small": "UPDATE memory_blocks SET size = 10 WHERE block = ?",
    "a block size of 9 TB": "UPDATE memory_blocks SET size = 9000000000000 WHERE block = ?",
    "a block gone": "DELETE FROM memory_blocks WHERE block = ?",
    "a block of another size, whole": (
        "UPDATE memory_blocks SET blob = (SELECT blob FROM memory_blocks WHERE size != "
        "(SELECT size FROM memory_blocks WHERE block = ?1) LIMIT 1) WHERE block = ?1"
    ),
    "a block another job's too": (
        "UPDATE jobs SET memory_block = ?1 WHERE job_key = "
        "(SELECT job_key FROM jobs WHERE memory_block != ?1 LIMIT 1)"
    ),
    "a job's record gone": "DELETE FROM jobs WHERE memory_block = ?",
    "a row count that is text": ("UPDATE jobs SET n_rows = 'x' WHERE memory_block = ?"),
    "a row count one too many": "UPDATE jobs SET n_rows = n_rows + 1 WHERE memory_block = ?",
    "a row count one too few": "UPDATE jobs SET n_rows = n_rows - 1 WHERE memory_block = ?",
    "a job's memory block gone from its record": (
        "UPDATE jobs SET memory_block = NULL WHERE memory_block = ?"
    ),
}


@pytest.mark.parametrize(
    "how",
    [
        "cut inside its sha256s",
        "empty, its rows still pointing in",
        "one sha256 short",
        "lengths to spare",
        *STORE_DAMAGE,
    ],
)
def test_a_damaged_memory_block_is_named_left_out_and_run_again_by_resume(
    whole: Path, tmp_path: Path, how: str
):
    """A store whose memory block, its index or its job's row count is damaged.  An
    index cut inside its sha256s, empty bytes, a number or text stopped the report and
    export with "this is a bug" (zlib.error, AttributeError, a UTF-8 decode error); a
    damaged block stopped the report ("Corrupt ZSTD compressed data") or, a number,
    with a traceback; a row count that is text stopped report, export and resume; a
    block gone failed export with "Index 0 out of bounds"; a row count of another
    number made the report say "nothing here can be trusted; run the audit again"; and
    an index with fewer sha256s than its rows name, or with lengths to spare, a block
    of the wrong size, or a job that names no block was read without a word.  Now the report is written, only that job's memories left
    out, with the store and the job named (status 4); export refuses, naming them; and
    resume runs the job again, after which the run is whole and its results.parquet is
    byte for byte the undamaged one's."""
    from audit.rundir import load_run

    run = lean_copy(whole, tmp_path / "run")  # the report reads results.parquet, or nothing
    db = sqlite3.connect(run / "store.sqlite")
    try:
        key, block, index = db.execute(
            "SELECT j.job_key, b.block, b.shas FROM jobs j "
            "JOIN memory_blocks b ON b.block = j.memory_block LIMIT 1"
        ).fetchone()
        if how in STORE_DAMAGE:
            db.execute(STORE_DAMAGE[how], (block,))
        else:
            damaged = _damaged_index(index, how)
            db.execute("UPDATE memory_blocks SET shas = ? WHERE block = ?", (damaged, block))
        db.commit()
    finally:
        db.close()
    results = load_run(run).results
    victim = results["job_key"] == key
    assert victim.any()
    assert results.loc[~victim, "memory_sha256"].notna().all()
    digests_lost = how not in STORE_DAMAGE or "index" in how or "gone" in how
    if how != "a block another job's too":  # (the other job's rows may name it or not)
        assert results.loc[victim, "memory_sha256"].isna().all() == digests_lost
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    named = " ".join(warnings(report))
    victims = f"(job {key}: " if how != "a block another job's too" else "and 1 more)"
    assert "store.sqlite is damaged (job " in named, named
    assert victims in named, named
    assert f"`audit resume {run}` runs those jobs again" in named, named
    assert (tmp_path / "report" / "report.html").exists()
    export = audit("export", str(run), "--csv")
    assert export.returncode == 2, export.stderr
    assert victims in one_line_error(export)

    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    again = audit("report", str(run), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert (run / "results.parquet").read_bytes() == (whole / "results.parquet").read_bytes()
    assert load_run(run).results["memory_sha256"].notna().all()


def _named_refused_and_mended(
    run: Path, whole: Path, tmp_path: Path, key: str, why: str
) -> subprocess.CompletedProcess[str]:
    """A damaged store record of job ``key`` (its damage said as ``why``): the report
    (in ``tmp_path``/report) names the store and the job with the way out and exits 4,
    export refuses naming them, and resume runs the job again, after which the report
    exits 0 and results.parquet is byte for byte ``whole``'s.  Returns the resume."""
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    assert report.returncode == 4, report.stderr
    named = " ".join(warnings(report))
    assert f"store.sqlite is damaged (job {key}: {why}" in named, named
    assert f"`audit resume {run}` runs those jobs again" in named, named
    export = audit("export", str(run), "--csv")
    assert export.returncode == 2, export.stderr
    assert f"(job {key}: {why}" in one_line_error(export)
    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    again = audit("report", str(run), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert (run / "results.parquet").read_bytes() == (whole / "results.parquet").read_bytes()
    return resumed


def _every_memory_changed(db: sqlite3.Connection, block: int, how: str) -> None:
    """A block whose header and index still agree (the check of ``damaged_jobs`` without
    reading memories passes): each memory of it changed inside, its length kept; or its
    index's sha256s in reverse order."""
    import pyarrow as pa

    size, blob, index = db.execute(
        "SELECT size, blob, shas FROM memory_blocks WHERE block = ?", (block,)
    ).fetchone()
    if how == "a byte changed inside each memory":
        codec = pa.Codec("zstd", 3)
        memories = codec.decompress(blob, decompressed_size=size).to_pybytes()
        changed = memories.replace(b'"op":"set"', b'"op":"SET"')
        assert len(changed) == size
        assert changed != memories
        db.execute(
            "UPDATE memory_blocks SET blob = ? WHERE block = ?",
            (codec.compress(changed, asbytes=True), block),
        )
    else:
        count = int.from_bytes(index[4:8], "little")
        digests = [index[8 + 32 * i : 8 + 32 * (i + 1)] for i in range(count)]
        reordered = index[:8] + b"".join(reversed(digests)) + index[8 + 32 * count :]
        db.execute("UPDATE memory_blocks SET shas = ? WHERE block = ?", (reordered, block))


@pytest.mark.parametrize(
    "how", ["a byte changed inside each memory", "an index's sha256s in reverse order"]
)
def test_a_memory_that_is_not_the_one_its_sha256_names_is_found_where_it_is_read(
    whole: Path, tmp_path: Path, how: str
):
    """A block whose memories were changed inside (their lengths kept), or whose index
    lists their sha256s in another order, passed every check: the report's drill-down
    showed the changed memories under the old sha256s (exit 0), and resume called the
    run whole.  Now the report leaves out each memory it reads that is not the one its
    sha256 names, names the store and the job (exit 4), and resume, which hashes every
    memory, runs the job again."""
    import pyarrow.parquet as pq

    run = lean_copy(whole, tmp_path / "run")

    rows = pq.read_table(run / "results.parquet").to_pandas()
    failing = rows.loc[rows["condition"].astype(str).eq("tail") & rows["correct"].eq(0)]
    key = str(failing["job_key"].iloc[0])  # a job the drill-down shows a memory of
    db = sqlite3.connect(run / "store.sqlite")
    try:
        (block,) = db.execute("SELECT memory_block FROM jobs WHERE job_key = ?", (key,)).fetchone()
        _every_memory_changed(db, block, how)
        db.commit()
    finally:
        db.close()
    # export wrote the digests against the wrong rows; resume called the run whole
    resumed = _named_refused_and_mended(run, whole, tmp_path, key, "its memory block does not hold")
    assert "This run is damaged" in (tmp_path / "report" / "report.md").read_text()
    assert "nothing to do" not in resumed.stdout


@pytest.mark.parametrize(
    "how", ["another job's rows", "its rows cut to 10", "bytes that are no rows"]
)
def test_rows_waiting_in_the_store_that_are_not_the_jobs_are_named_and_run_again(
    whole: Path, tmp_path: Path, how: str
):
    """A finished job given rows waiting in the store that are not its own: another job's
    rows under its key made resume write them into results.parquet (that job's own rows
    gone) with exit 0; ten of its rows made resume drop the rest; bytes that are no rows
    stopped export with a raw pyarrow message and resume with "move it away" (the
    adversary's findings).  Now the report names the job (exit 4), export refuses, and
    resume runs it again: results.parquet is byte for byte the undamaged one's."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    run = lean_copy(whole, tmp_path / "run")
    table = pq.read_table(run / "results.parquet")
    keys = table["job_key"].to_pylist()
    victim, other = keys[0], next(k for k in keys if k != keys[0])
    rows = table.filter(pa.compute.equal(table["job_key"], other if "another" in how else victim))
    if "cut" in how:
        rows = rows.slice(0, 10)
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    blob = bytes.fromhex("00112233") if "no rows" in how else sink.getvalue().to_pybytes()
    db = sqlite3.connect(run / "store.sqlite")
    try:
        db.execute("INSERT INTO pending VALUES (?, ?)", (victim, blob))
        db.commit()
    finally:
        db.close()
    _named_refused_and_mended(run, whole, tmp_path, victim, "its rows waiting in the store")


def test_two_jobs_given_each_others_block_of_as_many_memories_are_named(
    whole: Path, tmp_path: Path
):
    """Two jobs pointing at each other's memory blocks, each listing as many memories
    as the other: every check passed (each block hashes to its own index), so export
    wrote each job's rows with the other's sha256s (exit 0) and resume called the run
    whole (the adversary's finding).  Now the rows' ``memory_bytes`` are checked
    against the index's lengths: the report names the job, export refuses, resume runs
    both again."""
    run = lean_copy(whole, tmp_path / "run")
    found = store_sql(
        run,
        "SELECT j.job_key, j.memory_block, length(b.shas) FROM jobs j "
        "JOIN memory_blocks b ON b.block = j.memory_block ORDER BY j.rowid",
    )
    (first, one), (_, other) = next(
        [(key, block) for key, block, size in found if size == wanted][:2]
        for wanted in sorted({size for *_, size in found})
        if sum(size == wanted for *_, size in found) > 1
    )
    swap = "UPDATE jobs SET memory_block = ? WHERE memory_block = ?"
    for new, old in ((-1, one), (one, other), (other, -1)):
        store_sql(run, swap, new, old)
    why = "its memory block is not the one its rows name"
    _named_refused_and_mended(run, whole, tmp_path, first, why)


@pytest.mark.parametrize("how", ["renamed", "copied under another key"])
def test_a_job_record_the_plan_never_made_is_named_and_run_again(
    whole: Path, tmp_path: Path, how: str
):
    """A job record of this run's own store under a key its plan never made (its key
    changed, or a copy of another job's record): the report said resume runs the job
    again, but resume refused the store as another run's ("did not plan").  Now resume
    drops the record and runs what the plan lacks: results.parquet is byte for byte
    the undamaged one's."""
    run = lean_copy(whole, tmp_path / "run")
    ((key,),) = store_sql(run, "SELECT job_key FROM jobs ORDER BY job_key LIMIT 1")
    if how == "renamed":
        store_sql(run, "UPDATE jobs SET job_key = 'ffff' || job_key WHERE job_key = ?", key)
    else:
        store_sql(
            run,
            "INSERT INTO jobs SELECT 'ffff' || job_key, finished, n_rows, retry_na, "
            "memory_block FROM jobs WHERE job_key = ?",
            key,
        )
    why = "the store holds no record of it" if how == "renamed" else "its memory block is also"
    resumed = _named_refused_and_mended(run, whole, tmp_path, key, why)
    # said, and recorded: resume deleted a record (the adversary's finding: silently)
    assert "dropped 1 job record(s) its plan never made" in " ".join(warnings(resumed))
    costs = json.loads((run / "costs.json").read_text())
    assert costs["invocations"][-1]["dropped_jobs"] == [f"ffff{key}"]
    keys = {k for (k,) in store_sql(run, "SELECT job_key FROM jobs")}
    assert key in keys
    assert f"ffff{key}" not in keys


@pytest.mark.parametrize(
    ("damage", "report_exit", "resume_exit"),
    [
        ("UPDATE jobs SET finished = 'x' WHERE rowid = 3", 0, 0),
        ("UPDATE jobs SET finished = x'00' WHERE rowid = 3", 0, 0),
        ("UPDATE store_format SET version = 'six'", 4, 1),
    ],
)
def test_a_store_value_of_the_wrong_type_is_no_traceback(
    whole: Path, tmp_path: Path, damage: str, report_exit: int, resume_exit: int
):
    """A job's finishing time that is not a number stopped report and resume with "this
    is a bug" (a sort of text against numbers), and a store format that is text stopped
    every command so (the adversary's findings).  A time that is not one is no time (the
    job's rows are whole); a format that is not a number is a damaged store, said in one
    line."""
    run = copy_run(whole, tmp_path / "run")
    db = sqlite3.connect(run / "store.sqlite")
    try:
        db.execute(damage)
        db.commit()
    finally:
        db.close()
    report = audit("report", str(run), "--out", str(tmp_path / "report"))
    export = audit("export", str(run), "--csv", "--out", str(tmp_path / "rows.csv"))
    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    for done in (report, export, resumed):
        assert "this is a bug" not in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    assert (report.returncode, resumed.returncode) == (report_exit, resume_exit)
    if resume_exit:
        assert "its format is 'six', not a version number" in one_line_error(resumed)


def test_a_summary_the_manifest_does_not_record_is_written_again_by_resume(
    whole: Path, tmp_path: Path
):
    """summary.json garbled and left out of manifest.json: the run was called whole (its
    summary is not checked when the manifest does not record it) and resume stopped
    with a JSONDecodeError, "this is a bug".  A run is whole only with its summary
    recorded, so resume writes it again."""
    run = copy_run(whole, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["files"]["summary.json"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "summary.json").write_text("garbage{")
    resumed = audit("resume", str(run), "--quiet", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert (run / "summary.json").read_bytes() == (whole / "summary.json").read_bytes()


@pytest.mark.parametrize(
    "damage", ["UPDATE store_format SET version = 3", "DELETE FROM store_format"]
)
def test_a_store_whose_format_is_not_the_runs_is_not_called_an_older_run(
    whole: Path, tmp_path: Path, damage: str
):
    """A store of this run whose format number was changed or deleted: export said "a
    run of an older format: its results.csv is already in it" of a run that has no
    results.csv (the adversary's finding).  Now it names the store, both formats and
    the way out."""
    run = lean_copy(whole, tmp_path / "run")
    store_sql(run, damage)
    export = audit("export", str(run), "--csv")
    assert export.returncode == 2, export.stderr
    said = one_line_error(export)
    assert "older format" not in said, said
    assert "store.sqlite is not a store of this version" in said, said
    assert f"the run's {json.loads((run / 'manifest.json').read_text())['format']})" in said
    assert f"`audit resume {run}`" in said, said
    assert not (run / "results.csv").exists()


@pytest.mark.parametrize("how", ["every row of a job negative", "one row's id past every row"])
def test_rows_naming_a_memory_no_block_can_hold_are_named_not_a_crash(
    whole: Path, tmp_path: Path, how: str
):
    """A results.parquet (re-vouched in manifest.json and the store) whose rows name a
    memory by a negative number, or by one far past any block: checking each block
    against its rows' sizes crashed ("negative dimensions", an index out of bounds) or
    allocated 16 GiB first (the adversary's finding).  Now the job is named, export
    refuses, and resume runs it again: results.parquet is byte for byte the whole one's."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    run = lean_copy(whole, tmp_path / "run")
    handle = pq.ParquetFile(run / "results.parquet")
    groups = [handle.read_row_group(g) for g in range(handle.num_row_groups)]
    key = groups[0]["job_key"][0].as_py()

    def damaged(group: pa.Table, first: bool) -> pa.Table:
        ids = group["memory_id"].combine_chunks()
        if how.startswith("every"):
            ids = pc.if_else(pc.equal(group["job_key"], key), pa.scalar(-7, pa.int32()), ids)
        elif first:
            ids = pa.concat_arrays([pa.array([2**31 - 1], pa.int32()), ids.slice(1)])
        return group.set_column(group.schema.get_field_index("memory_id"), "memory_id", ids)

    vouched_rewrite(run, [damaged(group, i == 0) for i, group in enumerate(groups)])
    why = "its rows name a memory by" if how.startswith("every") else "its rows name 2147483648"
    _named_refused_and_mended(run, whole, tmp_path, key, why)
