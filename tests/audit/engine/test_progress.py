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
from audit.engine import RequestEstimate, RequestTally, Stage, Tallies
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
        self.estimate: RequestEstimate | None = None
        self.notes: list[tuple[int, str]] = []
        """Each status line, with the number of events before it."""
        self.times: list[float] = []
        """When each event came (time.monotonic)."""

    def begin(
        self,
        stage: Stage,
        done: int,
        total: int,
        tallies: Tallies | None = None,
        estimate: RequestEstimate | None = None,
    ) -> None:
        self.events.append(("begin", stage, done, total))
        self.times.append(time.monotonic())
        self.tallies[stage] = tallies
        self.totals[stage] = total
        if stage == "llm":
            self.estimate = estimate

    def advance(self, stage: Stage, done: int) -> None:
        assert stage in self.totals, f"{stage} advanced before it began"
        assert done <= self.totals[stage], (stage, done, self.totals[stage])
        self.events.append(("advance", stage, done, None))
        self.times.append(time.monotonic())

    def note(self, text: str) -> None:
        self.notes.append((len(self.events), text))

    def last(self, stage: Stage) -> int:
        return [e[2] for e in self.events if e[1] == stage][-1]

    def first(self, stage: Stage) -> int:
        """The index of the stage's first event."""
        return next(i for i, e in enumerate(self.events) if e[1] == stage)


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
        assert jobs == 84  # one job per source pair of the preset, as the final line says
        assert "84 source pairs" in " ".join(result.output.split())
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
        assert reader == RequestTally(
            "reader", costs["requests"], costs["sent"], 0, 0, costs["requests"]
        )
        assert reader.sent == len(server.bodies) > 0
        # the estimate before the stage counted every request it asked (one per read)
        assert progress.estimate is not None
        assert progress.estimate.by_role == (("reader", reader.requests),)

        # the same run again in a new directory: every request answered by the cache
        with recording(monkeypatch) as again:
            result = runner.invoke(app, llm_args(config, tmp_path / "again"))
        assert result.exit_code == 0, result.output
        tallies = again.tallies["llm"]
        assert tallies is not None
        (cached,) = tallies()
        assert (cached.requests, cached.cache_hits, cached.sent) == (reader.requests,) * 2 + (0,)

        # a whole run resumed: nothing runs, so no stage is shown
        with recording(monkeypatch) as resumed:
            result = runner.invoke(app, ["resume", str(out), "--config", str(config)])
        assert result.exit_code == 0, result.output
        assert "nothing to do" in result.output
        assert resumed.events == []
        # a finished run whose summary.json is gone: both stages begin complete
        (out / "summary.json").unlink()
        with recording(monkeypatch) as resumed:
            result = runner.invoke(app, ["resume", str(out), "--config", str(config)])
        assert result.exit_code == 0, result.output
        assert ("begin", "deterministic", jobs, jobs) in resumed.events
        assert ("begin", "llm", units, units) in resumed.events


PROBE_DELAY_S = 0.05


def test_the_steps_around_the_llm_stage_are_told_in_order_and_costed_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The determinism probe runs after the deterministic stage, counted as a stage of
    its own and charged to its own line of costs.json; the stage's requests are
    estimated before it begins; the reader's check on full is read first."""
    from audit.backends._determinism import PROBE_REQUESTS, probe_requests

    probe_text = probe_requests(1)[0].messages[0].content
    with serving_in_thread(MODEL) as server:
        server.rules.append(Rule(contains=[probe_text], replies=[Reply(delay_s=PROBE_DELAY_S)]))
        config = write_config(tmp_path / "audit.toml", server, tmp_path / "cache.sqlite")
        out = tmp_path / "run"
        args = [a for a in llm_args(config, out) if a != "--no-determinism"]
        began = time.monotonic()
        with recording(monkeypatch) as progress:
            result = runner.invoke(app, args)
        ended = time.monotonic()
        assert result.exit_code == 0, result.output
    events = progress.events
    last_deterministic = max(i for i, e in enumerate(events) if e[1] == "deterministic")
    probe, llm = progress.first("probe"), progress.first("llm")
    assert last_deterministic < probe < llm  # one stage after the other
    assert events[probe] == ("begin", "probe", 0, 2 * PROBE_REQUESTS)
    assert progress.last("probe") == 2 * PROBE_REQUESTS  # every answer counted

    costs = json.loads((out / "costs.json").read_text())["invocations"][-1]
    probe_bodies = [b for b in server.bodies if b["messages"][0]["content"] == probe_text]
    assert costs["probe"]["requests"] == len(probe_bodies) == 2 * PROBE_REQUESTS
    assert costs["probe"]["seconds"] >= PROBE_REQUESTS * PROBE_DELAY_S  # one at a time
    # each stage's time is its own: the deterministic stage's ends before the probe
    # begins, the LLM stage's starts after it ends (both used to count from the start)
    assert costs["deterministic"]["seconds"] <= progress.times[probe] - began
    assert costs["llm"]["seconds"] <= ended - progress.times[llm] + 0.5
    assert costs["backends_start"]["seconds"] >= 0

    # the probe says what it sends, then what it found, while it is the running stage
    notes = progress.notes
    probed = [(at, t) for at, t in notes if t.startswith("determinism probe of fake: ")]
    assert [at for at, _ in probed] == [probe + 1, llm], notes
    assert probed[0][1].startswith(f"determinism probe of fake: {2 * PROBE_REQUESTS} requests")
    assert probed[1][1] == "determinism probe of fake: 16/16 answers identical"
    # before the stage: a status line of what it will ask; then the reader's check
    (estimate,) = [(at, t) for at, t in notes if t.startswith("LLM stage: ")]
    assert estimate[0] == llm  # told just before the stage began
    assert "4 units, about 24 requests (reader 24)" in estimate[1]  # 2 pairs x 2 x 6 reads
    assert "at the probe's pace" in estimate[1]
    checks = [(at, t) for at, t in notes if t.startswith("reader's check: ")]
    assert len(checks) == 2, notes  # when it starts, and when it ends
    assert all(at > llm for at, _ in checks), notes
    reads = [b for b in server.bodies if b["messages"][0]["content"] != probe_text]
    sizes = [len(b["messages"][-1]["content"]) for b in reads]
    # 2 pairs x 2 variants x 3 branches, full then frontier; a request identical to one
    # already asked (two variants' equal memories) is asked once
    assert len(sizes) == len({json.dumps(b, sort_keys=True) for b in reads}) <= 24
    assert min(sizes[:12]) > max(sizes[12:]), sizes  # the whole history first


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
        assert reader.failed == reader.sent > 0  # every request sent failed
        assert reader.requests == 24  # and every read is NA (a repeated one shares it)


def test_without_a_terminal_a_long_stage_logs_lines_that_fit():
    text = io.StringIO()
    console = Console(file=text, width=80, force_terminal=False)
    state = {"requests": 0}

    def tallies() -> list[RequestTally]:
        n = state["requests"]
        return [RequestTally("reader", n, n - 1 if n else 0, 1 if n else 0, 0, n)]

    estimate = RequestEstimate(3, (("reader", 24),), probe_s=2.0)
    with ConsoleProgress(console, terminal=False, log_every_s=0.0) as progress:
        progress.begin("deterministic", 0, 3)
        for done in (1, 2, 3):
            progress.advance("deterministic", done)
        progress.note(estimate.before())
        progress.begin("llm", 1, 4, tallies, estimate)
        for done in (2, 3, 4):
            state["requests"] += 6
            progress.advance("llm", done)
    lines = text.getvalue().splitlines()
    assert lines[0].startswith("deterministic: 1/3 jobs, ")
    assert lines[2].startswith("deterministic: 3/3 jobs, ")
    # a status line, at once and whole: what the stage will ask, and at what pace
    assert lines[3].startswith("LLM stage: 3 units, about 24 requests (reader 24); ")
    assert "at the probe's pace (2.0 s a short request) 48 s" in lines[3]
    assert lines[4].startswith("LLM stage: 2/4 units, ")
    assert "reader: 6 asked, 5 sent, 1 cached, 0 NA" in lines[4]
    assert "about 18 of 24 requests left" in lines[4]
    assert "reader: 18 asked, 17 sent, 1 cached, 0 NA" in lines[-1]
    # the stage is done: what it took, not what is left
    assert "18 requests answered (about 24 counted before), " in lines[-1]

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
    assert any(re.search(r"deterministic .*\d+/84\s+jobs", s) for s in segments), segments
    llm = [s for s in segments if re.search(r"LLM stage .*\d+/\d+\s+units", s)]
    assert llm, segments
    assert any(re.search(r"reader: \d+ asked, \d+ sent, 0 cached, 0 NA", s) for s in segments)
    assert any(re.search(r"eta", s) for s in llm)
    assert "…" not in plain  # no name or number cut, in the bars or the tables after them
    assert " frontier " in plain
    final = next(line for line in re.split(r"[\r\n]", drawn) if " reads on " in line)
    assert "\x1b[" not in final  # the counts and the path are not coloured digit by digit
