"""Progress that tells the truth: one display per stage, counting what the plan counts.

The deterministic stage counts jobs (one per source pair), the LLM stage counts LLM units
(``manifest.json``'s planned units) and shows each backend's requests, cache hits and NA
as they happen.  The reader here is a real HTTP server (tests/_fake_openai.py) behind the
real client; the terminal is a real pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from audit.cli import _console as console_module
from audit.cli import app
from audit.cli._console import ConsoleProgress
from audit.engine import RequestTally, Stage, Tallies
from tests._fake_openai import FakeOpenAI, Reply, Rule, serving_in_thread

runner = CliRunner()
MODEL = "fake-model"


def llm_args(config: Path, out: Path) -> list[str]:
    return ["run", "--preset", "cca-pilot", "--conditions", "frontier,tail",
            "--transforms", "identity", "--reader", "fake", "--config", str(config),
            "--llm-sample", "2", "--repeats", "1", "--llm-conditions", "frontier",
            "--llm-transforms", "identity", "--workers", "1", "--no-determinism",
            "--out", str(out)]  # fmt: skip


def write_config(path: Path, server: FakeOpenAI, cache: Path) -> Path:
    path.write_text(
        f'cache_path = "{cache}"\n[backends.fake]\nbase_url = "{server.base_url}"\n'
        f'model = "{MODEL}"\nroles = ["reader"]\nmax_retries = 0\n'
    )
    return path


class Recorder:
    """A ``RunProgress`` that keeps every event (what the console would draw)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Stage, int, int | None]] = []
        self.tallies: dict[Stage, Tallies | None] = {}
        self.totals: dict[Stage, int] = {}

    def begin(self, stage: Stage, done: int, total: int, tallies: Tallies | None = None) -> None:
        self.events.append(("begin", stage, done, total))
        self.tallies[stage] = tallies
        self.totals[stage] = total

    def advance(self, stage: Stage, done: int) -> None:
        assert stage in self.totals, f"{stage} advanced before it began"
        assert done <= self.totals[stage], (stage, done, self.totals[stage])
        self.events.append(("advance", stage, done, None))

    def last(self, stage: Stage) -> int:
        return [e[2] for e in self.events if e[1] == stage][-1]


@contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()

    @contextmanager
    def run_progress(enabled: bool = True) -> Iterator[Recorder]:
        yield recorder

    monkeypatch.setattr(console_module, "run_progress", run_progress)
    yield recorder


def test_each_stage_counts_what_the_plan_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with serving_in_thread(MODEL) as server:
        config = write_config(tmp_path / "audit.toml", server, tmp_path / "cache.sqlite")
        out = tmp_path / "run"
        with recording(monkeypatch) as progress:
            result = runner.invoke(app, llm_args(config, out))
        assert result.exit_code == 0, result.output
        manifest = json.loads((out / "manifest.json").read_text())
        jobs, units = len(manifest["planned_jobs"]), len(manifest["planned_units"])
        assert progress.events[0] == ("begin", "deterministic", 0, jobs)
        assert jobs == 24  # one job per source pair of the preset, as the final line says
        assert "24 source pairs" in " ".join(result.output.split())
        assert progress.last("deterministic") == jobs
        assert ("begin", "llm", 0, units) in progress.events
        assert progress.last("llm") == units
        stage_order = [e[1] for e in progress.events]
        assert stage_order.index("llm") > len(stage_order) - 1 - stage_order[::-1].index(
            "deterministic"
        )  # one stage after the other
        tallies = progress.tallies["llm"]
        assert tallies is not None
        (reader,) = tallies()
        costs = json.loads((out / "costs.json").read_text())["invocations"][-1]["llm"]["reader"]
        assert reader == RequestTally("reader", costs["requests"], costs["sent"], 0, 0)
        assert reader.sent == len(server.bodies) > 0

        # the same run again in a new directory: every request answered by the cache
        with recording(monkeypatch) as again:
            result = runner.invoke(app, llm_args(config, tmp_path / "again"))
        assert result.exit_code == 0, result.output
        tallies = again.tallies["llm"]
        assert tallies is not None
        (cached,) = tallies()
        assert (cached.requests, cached.cache_hits, cached.sent) == (reader.requests,) * 2 + (0,)

        # a finished run resumed: both stages begin complete
        with recording(monkeypatch) as resumed:
            result = runner.invoke(app, ["resume", str(out), "--config", str(config)])
        assert result.exit_code == 0, result.output
        assert ("begin", "deterministic", jobs, jobs) in resumed.events
        assert ("begin", "llm", units, units) in resumed.events


def test_a_failed_request_is_counted_as_na_while_the_stage_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    with serving_in_thread(MODEL) as server:
        server.rules.append(Rule(contains=[], replies=[Reply(status=503)]))
        config = write_config(tmp_path / "audit.toml", server, tmp_path / "cache.sqlite")
        with recording(monkeypatch) as progress:
            result = runner.invoke(app, llm_args(config, tmp_path / "run"))
        assert result.exit_code == 3, result.output  # incomplete: every LLM read NA
        tallies = progress.tallies["llm"]
        assert tallies is not None
        (reader,) = tallies()
        assert reader.failed == reader.requests > 0


def test_without_a_terminal_a_long_stage_logs_lines_that_fit():
    text = io.StringIO()
    console = Console(file=text, width=80, force_terminal=False)
    state = {"requests": 0}

    def tallies() -> list[RequestTally]:
        n = state["requests"]
        return [RequestTally("reader", n, n - 1 if n else 0, 1 if n else 0, 0)]

    with ConsoleProgress(console, terminal=False, log_every_s=0.0) as progress:
        progress.begin("deterministic", 0, 3)
        for done in (1, 2, 3):
            progress.advance("deterministic", done)
        progress.begin("llm", 1, 4, tallies)
        for done in (2, 3, 4):
            state["requests"] += 6
            progress.advance("llm", done)
    lines = text.getvalue().splitlines()
    assert lines[0].startswith("deterministic: 1/3 jobs, ")
    assert lines[2].startswith("deterministic: 3/3 jobs, ")
    assert lines[3].startswith("LLM stage: 2/4 units, ")
    assert "reader: 6 asked, 5 sent, 1 cached, 0 NA" in lines[3]
    assert "reader: 18 asked, 17 sent, 1 cached, 0 NA" in lines[-1]

    # one slow unit: the timer still writes a line while nothing finishes
    ticking = io.StringIO()
    with ConsoleProgress(Console(file=ticking), terminal=False, log_every_s=0.2) as progress:
        progress.begin("llm", 0, 1, tallies)
        time.sleep(0.9)
    assert ticking.getvalue().count("LLM stage: 0/1 units") >= 2, ticking.getvalue()

    quiet = io.StringIO()
    with ConsoleProgress(Console(file=quiet), terminal=False) as progress:  # 30 s apart
        progress.begin("deterministic", 0, 3)
        for done in (1, 2, 3):
            progress.advance("deterministic", done)
    assert quiet.getvalue() == ""  # a short stage says nothing


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def run_in_terminal(args: list[str], columns: int, timeout: float = 300.0) -> str:
    """``audit ARGS`` in a real pseudo-terminal ``columns`` wide; everything it drew."""
    primary, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    command = [sys.executable, "-c", "from audit.cli import main; main()", *args]
    process = subprocess.Popen(command, stdin=secondary, stdout=secondary, stderr=secondary,
                               env=env, close_fds=True)  # fmt: skip
    os.close(secondary)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], timeout)
            if not ready:
                raise AssertionError("the run drew nothing for too long")
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
        process.wait(timeout)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_shows_each_stage_with_its_requests_within_80_columns(tmp_path: Path):
    """The bars, the request line under them and the tables after them all fit 80
    columns, in a real pseudo-terminal."""
    with serving_in_thread(MODEL) as server:
        server.rules.append(Rule(contains=[], replies=[Reply(content="a=1", delay_s=0.3)]))
        config = write_config(tmp_path / "audit.toml", server, tmp_path / "cache.sqlite")
        drawn = run_in_terminal(llm_args(config, tmp_path / "run"), columns=80)
    plain = ANSI.sub("", drawn)
    segments = [s for s in re.split(r"[\r\n]", plain) if s.strip()]
    drawn_lines = [s for s in segments if str(tmp_path) not in s]  # a path may be longer
    assert max(len(s) for s in drawn_lines) <= 80, max(drawn_lines, key=len)
    assert any(re.search(r"deterministic .*\d+/24\s+jobs", s) for s in segments), segments
    llm = [s for s in segments if re.search(r"LLM stage .*\d+/\d+\s+units", s)]
    assert llm, segments
    assert any(re.search(r"reader: \d+ asked, \d+ sent, 0 cached, 0 NA", s) for s in segments)
    assert any(re.search(r"eta", s) for s in llm)
    assert "…" not in plain  # no name or number cut, in the bars or the tables after them
    assert " frontier " in plain
    final = next(line for line in re.split(r"[\r\n]", drawn) if " reads on " in line)
    assert "\x1b[" not in final  # the counts and the path are not coloured digit by digit
