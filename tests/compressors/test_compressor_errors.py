"""A compressor that raises is a failed run (issue 28): each distinct error once, in
summary.json and run.log, its first on the terminal, and a non-zero exit status.

Real runs in real processes: the plugin below is the obvious first compressor, which
asks every record for its ``key`` and so raises on the first revoke it meets.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from audit.rundir import EXIT_COMPRESSOR_RAISED, CompressorError, ErrorSite, RunStore, pack_job
from tests._cli import finished_jobs

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = """
from compressors import Compressor, dump, load, pack


class Keyed(Compressor):
    name = "keyed"
    summary = "the newest record of each key (forgets that a revoke has no key)"

    def update(self, memory, chunk, query_keys, budget):
        kept = {r.key: r for r in [*load(memory), *chunk.records]}
        return dump(pack(list(kept.values()), budget))
"""


def audit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}
    return subprocess.run(
        [sys.executable, "-m", "audit", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


ARGS = ("run", "--preset", "cca-pilot", "--conditions", "keyed_plugin:Keyed,tail",
        "--transforms", "identity,rename:2")  # fmt: skip


@pytest.fixture(scope="module")
def raising_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    work = tmp_path_factory.mktemp("raising")
    (work / "keyed_plugin.py").write_text(textwrap.dedent(PLUGIN))
    return work, audit(work, *ARGS, "--workers", "2", "--out", "run")


def test_a_raising_compressor_fails_the_run_with_one_error_block(raising_run):
    _work, result = raising_run
    assert result.returncode == EXIT_COMPRESSOR_RAISED == 5, result.stderr
    block = result.stderr.strip().splitlines()
    assert block[0] == "error: compressor keyed raised (deterministic stage)", result.stderr
    assert block[1] == "  AttributeError: 'RevokeRecord' object has no attribute 'key'"
    assert block[2].startswith("  at ")
    assert "keyed_plugin.py:10 in" in block[2]
    assert block[3].startswith("  first: pair ")
    assert "revoke" in result.stderr
    assert block[-2] == "  full traceback in run/run.log"
    assert block[-1] == "  fixed, it is audited in a new run (--out), its version raised"
    assert all(len(line) <= 80 for line in block), block
    assert "Traceback" not in result.stderr
    assert "next: audit report run" in result.stdout  # the run itself finished


def test_each_distinct_error_is_counted_once(raising_run):
    work, _ = raising_run
    run_dir = work / "run"
    log = (run_dir / "run.log").read_text()
    assert len(log.encode()) < 50_000
    assert log.count("Traceback (most recent call last)") == 1
    assert "AttributeError: 'RevokeRecord' object has no attribute 'key'" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    (error,) = [CompressorError.model_validate(e) for e in summary["compressor_errors"]]
    results = pq.read_table(run_dir / "results.parquet", columns=["condition", "outcome"])
    rows = results.to_pylist()
    failed = [r for r in rows if r["outcome"] == "error"]
    assert failed
    assert {r["condition"] for r in failed} == {"keyed"}
    assert error.reads == len(failed)
    assert error.streams * 6 == error.reads  # a stream of A and B: 2 variants x 3 branches
    assert error.first.variant == "A"
    # the first site is the chunk that holds the first revoke, in whichever branch
    assert error.first.branch in {"prefix", "reveal", "override"}
    assert "revoke" in error.first.records
    assert error.traceback is not None
    assert error.traceback in log
    # scores stay as they were: an error read is scored 0, never a smaller n
    keyed = [e for e in summary["scores"] if e["condition"] == "keyed" and e["family"] == "all"]
    assert sum(e["outcomes (reads)"].get("error", 0) for e in keyed) == error.reads


def test_the_count_is_the_same_whatever_runs_the_jobs_and_on_resume(raising_run):
    work, _ = raising_run
    one = audit(work, *ARGS, "--workers", "1", "--out", "one")
    assert one.returncode == EXIT_COMPRESSOR_RAISED, one.stderr
    assert (work / "one" / "run.log").read_text() == (work / "run" / "run.log").read_text()

    def errors(name: str) -> list[dict[str, object]]:
        return json.loads((work / name / "summary.json").read_text())["compressor_errors"]

    assert errors("one") == errors("run")
    again = audit(work, *ARGS, "--workers", "2", "--out", "run")  # the same command resumes
    assert again.returncode == EXIT_COMPRESSOR_RAISED, again.stderr
    assert "complete: nothing to do" in again.stdout
    assert again.stderr.startswith("error: compressor keyed raised")
    assert errors("run") == errors("one")


def test_resume_refuses_a_compressor_whose_version_changed(raising_run, tmp_path: Path):
    """The plugin fixed and its version raised: resuming the old run would write the rest
    of it with the new code under the run's keys, so resume names the change and stops
    (as `audit run` into the same directory does), leaving the run as it was."""
    work, _ = raising_run
    copy = tmp_path / "work"
    shutil.copytree(work / "run", copy / "run")
    fixed = PLUGIN.replace("    def update", '    version = "2"\n\n    def update')
    (copy / "keyed_plugin.py").write_text(textwrap.dedent(fixed))
    before = (copy / "run" / "summary.json").read_bytes()
    resumed = audit(copy, "resume", "run")
    assert resumed.returncode == 2, resumed.stderr
    assert "keyed@1 is now keyed@2 (its name or version changed" in " ".join(resumed.stderr.split())
    assert (copy / "run" / "summary.json").read_bytes() == before
    again = audit(work, "resume", "run")  # the run's own version: its answer again
    assert again.returncode == EXIT_COMPRESSOR_RAISED, again.stderr
    assert "complete: nothing to do" in again.stdout


def test_a_stopped_run_resumes_to_the_same_errors(raising_run):
    """SIGTERM part-way, then `audit resume`: the errors merged from two invocations'
    jobs are those of the uninterrupted run (the first site too: plan order)."""
    work, _ = raising_run
    out = work / "stopped"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)])}
    process = subprocess.Popen(
        [sys.executable, "-m", "audit", *ARGS, "--workers", "1", "--quiet", "--out", str(out)],
        cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while finished_jobs(out) < 10 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the signal: nothing was tested"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    resumed = audit(work, "resume", str(out), "--workers", "2")
    assert resumed.returncode == EXIT_COMPRESSOR_RAISED, resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    whole = json.loads((work / "run" / "summary.json").read_text())
    assert summary["compressor_errors"] == whole["compressor_errors"]
    assert (out / "run.log").read_text() == (work / "run" / "run.log").read_text()


def test_the_store_gives_job_logs_in_plan_order_whatever_order_they_finished(tmp_path: Path):
    store = RunStore(tmp_path, "run-id")
    site = ErrorSite(pair_id="p", transform="identity")

    def job(key: str, message: str) -> None:
        found = CompressorError(condition="c", stage="deterministic", type="E", error=message,
                                raised_at="x.py:1 in update", reads=6, first=site)  # fmt: skip
        log = pack_job(key, [], {}).log
        log.add(found)
        assert store.add_job(pack_job(key, [], {}, log))

    job("second", "E: second")
    job("first", "E: first")
    logs = store.logs(["first", "second"])
    store.close()
    from audit.rundir import merge_errors

    (merged,) = merge_errors(log.errors for log in logs)
    assert merged.error == "E: first"
    assert merged.reads == 12
    assert merged.streams == 2


def test_the_llm_stage_counts_its_errors_the_same_way(tmp_path: Path, plugin):
    """A compressor read by an LLM reader raises in the LLM stage: one error per stream
    of a variant, its reads the reader's, and the same exit status."""
    from typer.testing import CliRunner

    from audit.cli import app
    from tests._fake_openai import Reply, Rule, serving_in_thread

    plugin("keyed_plugin", PLUGIN)
    out = tmp_path / "run"
    with serving_in_thread("m") as fake:
        fake.rules = [Rule(contains=[""], replies=[Reply(content='{"answer": {}}')])]
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
            f'[backends.fake]\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
        )
        result = CliRunner().invoke(
            app,
            ["run", "--preset", "cca-pilot", "--conditions", "tail", "--transforms", "identity",
             "--workers", "1", "--quiet", "--llm-sample", "2", "--repeats", "1",
             "--llm-transforms", "identity", "--reader", "fake", "--llm-conditions",
             "keyed_plugin:Keyed", "--no-determinism", "--config", str(config),
             "--out", str(out)],
        )  # fmt: skip
    assert result.exit_code == EXIT_COMPRESSOR_RAISED, result.output
    summary = json.loads((out / "summary.json").read_text())
    (error,) = [CompressorError.model_validate(e) for e in summary["compressor_errors"]]
    assert error.condition == "keyed"
    assert error.stage == "llm"
    rows = pq.read_table(out / "results.parquet", columns=["condition", "outcome"]).to_pylist()
    failed = [r for r in rows if r["outcome"] == "error"]
    assert {r["condition"] for r in failed} == {"keyed"}
    assert error.reads == len(failed)
    assert error.streams * 3 == error.reads  # one variant's stream: its 3 branches, 1 reader
    assert (out / "run.log").read_text().count("Traceback (most recent call last)") == 1


def test_a_raised_compressor_is_marked_wherever_its_verdict_is(raising_run):
    """A new user's raising compressor read as a merely poor one: its verdict row said
    3/84 with nothing about the crash, the report's note was empty, and `audit runs
    list` called the run complete."""
    work, result = raising_run
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("  keyed")]
    assert rows, result.stdout
    assert rows[0][:2] == ["keyed", "(raised)"]
    assert not any(line.startswith("  tail (raised)") for line in result.stdout.splitlines())
    report = audit(work, "report", "run")
    assert report.returncode == 0, report.stderr
    verdicts = (work / "run" / "report" / "verdicts.csv").read_text().splitlines()
    keyed = next(line for line in verdicts if line.startswith("keyed (raised)"))
    assert "its compressor raised" in keyed
    listed = audit(work, "runs", "list", "--root", str(work))
    assert listed.returncode == 0, listed.stderr
    states = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()[1:-1]}
    assert states["run"] == "raised"


PRINTER = """
import os
import subprocess

from compressors import Compressor, dump, load, pack

child = []


class Printer(Compressor):
    name = "printer"

    def update(self, memory, chunk, query_keys, budget):
        print("PLUGIN SAYS", len(chunk.records))
        os.write(1, b"DESCRIPTOR SAYS\\n")  # as a library's C code would
        if not child:  # a child process inherits descriptor 1
            child.append(subprocess.run(["echo", "CHILD SAYS"], check=True))
        return dump(pack([*load(memory), *chunk.records], budget))
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_what_a_compressor_prints_stays_off_the_answer(tmp_path: Path, workers: str):
    """stdout carries the verdict: a plugin's prints (from the workers, or from the
    command's own process with one worker) go to stderr, whole."""
    (tmp_path / "printer_plugin.py").write_text(PRINTER)
    result = audit(tmp_path, "run", "--preset", "cca-pilot-paper", "--conditions",
                   "printer_plugin:Printer,tail", "--transforms", "identity", "--quiet",
                   "--workers", workers, "--out", "run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Verdicts at 1200 B" in result.stdout
    for said in ("PLUGIN SAYS", "DESCRIPTOR SAYS", "CHILD SAYS"):
        assert said not in result.stdout
        assert any(line.startswith(said) for line in result.stderr.splitlines()), said


SLOW = """
import time

from compressors import Compressor, dump, load, pack


class Slow(Compressor):
    name = "slow"

    def update(self, memory, chunk, query_keys, budget):
        time.sleep(0.005)
        return dump(pack([*load(memory), *chunk.records], budget))
"""


def test_a_slow_compressor_is_named_with_its_time(tmp_path: Path):
    """A plugin that waits 5 ms an update: costs.json gives each condition's seconds in
    its jobs, the terminal names the slow one, and the report's costs list each; a run
    without errors still writes no run.log."""
    (tmp_path / "slow_plugin.py").write_text(SLOW)
    result = audit(tmp_path, "run", "--preset", "cca-pilot-paper", "--conditions",
                   "slow_plugin:Slow,tail", "--transforms", "identity", "--quiet",
                   "--out", "run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    costs = json.loads((tmp_path / "run" / "costs.json").read_text())
    spent = costs["invocations"][-1]["deterministic"]["conditions"]
    assert set(spent) == {"slow", "tail"}
    assert spent["slow"] > 2.0
    assert spent["slow"] > 5 * spent["tail"]
    assert "note: slow took" in " ".join(result.stdout.split())
    assert not (tmp_path / "run" / "run.log").exists()
    report = audit(tmp_path, "report", "run")
    assert report.returncode == 0, report.stderr
    table = (tmp_path / "run" / "report" / "costs.csv").read_text()
    assert "condition slow, in its jobs" in table
    assert "condition tail, in its jobs" in table
