"""The command protocol (``cmd:COMMAND``) and its HTTP form, with real processes: the
documented examples in Node.js and Python, timeouts, crashes and malformed answers
(NA with a cause, and a restart), a system's own error, no process left behind, and
a real local HTTP server."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audit.engine._streaming import plan_variant, stream_variant
from audit.plan import parse_conditions
from compressors import ChunkView, build, parse_spec
from compressors.adapters.command import (
    ExternalMemoryError,
    ExternalUnavailableError,
    stop_all,
)
from histories import SetRecord
from tests._rows import result_csv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
NODE = shutil.which("node")
runner = CliRunner()
CHUNK = ChunkView([SetRecord(id="r1", key="k", value="v", rev=1)])


@pytest.fixture(autouse=True)
def _stop_processes() -> Iterator[None]:
    yield
    stop_all()


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _script(tmp_path: Path, body: str, name: str = "memory.py") -> str:
    """A Python memory that runs ``body`` per request (``request``, ``n`` in scope)
    and writes its pid to pids.txt when it starts."""
    path = tmp_path / name
    path.write_text(
        textwrap.dedent(
            """\
            import json, os, sys, time
            with open(os.path.join(os.path.dirname(__file__), "pids.txt"), "a") as f:
                f.write(f"{os.getpid()}\\n")
            n = 0
            for line in sys.stdin:
                n += 1
                request = json.loads(line)
            """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return f"{sys.executable} {path}"


def _pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids.txt"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_cmd_and_http_specs_parse_to_their_compressors():
    spec = parse_spec("cmd:node my memory.js --mode=fast")
    assert (spec.target, spec.params) == ("cmd", {"run": "node my memory.js --mode=fast"})
    assert spec.label == "cmd:node my memory.js --mode=fast"
    spec = parse_spec("cmd:run=python m.py,timeout=5")
    assert (spec.target, spec.params) == ("cmd", {"run": "python m.py", "timeout": "5"})
    spec = parse_spec("http://127.0.0.1:8765/update")
    assert (spec.target, spec.params) == ("http", {"url": "http://127.0.0.1:8765/update"})
    with pytest.raises(ValueError, match="cmd"):
        parse_spec("cmd:")
    # in a --conditions list, a bare key=value item belongs to the condition before it
    listed = parse_conditions("cmd:run=python m.py,timeout=5,tail,langchain_trim:max_tokens=9")
    assert [(s.target, s.params) for s in listed] == [
        ("cmd", {"run": "python m.py", "timeout": "5"}),
        ("tail", {}),
        ("langchain_trim", {"max_tokens": "9"}),
    ]
    with pytest.raises(ValueError, match="url"):
        build("http:url=ftp://x")


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(
            f"node {EXAMPLES / 'keep_newest.js'}",
            marks=pytest.mark.skipif(NODE is None, reason="node is not installed"),
            id="node",
        ),
        pytest.param(f"{sys.executable} {EXAMPLES / 'keep_newest.py'}", id="python"),
    ],
)
def test_the_documented_examples_keep_what_tail_keeps(pilot, command):
    """docs/examples/keep_newest.{js,py} keep the newest whole records that fit, as
    the built-in ``tail`` does: the same memories, byte for byte."""
    external, tail = build(f"cmd:{command}"), build("tail")
    for pair in pilot[::3]:
        for variant in ("A", "B"):
            for budget in (600, 1200):
                got = stream_variant(external, pair, variant, budget)
                assert got.memories == stream_variant(tail, pair, variant, budget).memories
    # one long-lived process served every update
    (process,) = [p for p in _processes() if "keep_newest" in " ".join(p.argv)]
    assert process.starts == 1


def _processes():
    from compressors.adapters import command

    return list(command._PROCESSES.values())


def test_a_timeout_is_na_with_its_cause_and_the_process_is_restarted(tmp_path):
    command = _script(
        tmp_path,
        """\
        if n == 2:
            time.sleep(30)
        print(json.dumps({"memory": f"m{n}"}), flush=True)
        """,
    )
    # 5 s: the first update starts the guard and the interpreter, on a busy machine too
    compressor = build(f"cmd:run={command},timeout=5")
    assert compressor.update("", CHUNK, ["k"], 100) == "m1"
    started = time.monotonic()
    with pytest.raises(ExternalUnavailableError, match=r"no answer within 5 s \(timeout\)"):
        compressor.update("", CHUNK, ["k"], 100)
    assert time.monotonic() - started < 15
    first = _pids(tmp_path)[0]
    assert not _alive(first)  # killed, not left sleeping
    assert compressor.update("", CHUNK, ["k"], 100) == "m1"  # a fresh process
    assert len(_pids(tmp_path)) == 2


def test_a_process_that_stops_reading_is_na_within_the_timeout_not_a_hang(tmp_path):
    """An update larger than the pipe holds, sent to a process that closed its input or
    never reads it: NA with the cause within the timeout, not a hang."""
    (tmp_path / "deaf.py").write_text("import os, time\nos.close(0)\ntime.sleep(60)\n")
    compressor = build(f"cmd:run={sys.executable} {tmp_path / 'deaf.py'},timeout=1")
    started = time.monotonic()
    with pytest.raises(ExternalUnavailableError, match="the process closed its input"):
        compressor.update("x" * 1_000_000, CHUNK, ["k"], 2_000_000)
    assert time.monotonic() - started < 10
    sleeper = build(f"cmd:run={sys.executable} {tmp_path / 'sleepy.py'},timeout=1")
    (tmp_path / "sleepy.py").write_text("import time\ntime.sleep(60)\n")  # stdin open, unread
    started = time.monotonic()
    with pytest.raises(ExternalUnavailableError, match=r"no answer within 1 s \(timeout\)"):
        sleeper.update("x" * 1_000_000, CHUNK, ["k"], 2_000_000)
    assert time.monotonic() - started < 10


def test_a_crash_is_na_with_its_exit_code_and_stderr(tmp_path):
    command = _script(
        tmp_path,
        """\
        if request["memory"] == "crash":
            print("it broke here", file=sys.stderr, flush=True)
            sys.exit(3)
        print(json.dumps({"memory": "ok"}), flush=True)
        """,
    )
    compressor = build(f"cmd:{command}")
    assert compressor.update("", CHUNK, ["k"], 100) == "ok"
    with pytest.raises(ExternalUnavailableError, match=r"exited \(code 3\).*it broke here"):
        compressor.update("crash", CHUNK, ["k"], 100)
    assert compressor.update("", CHUNK, ["k"], 100) == "ok"
    assert len(_pids(tmp_path)) == 2


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        ('print("not json", flush=True)', "not JSON"),
        ('print(json.dumps({"mem": "x"}), flush=True)', 'expected {"memory"'),
        ('print(json.dumps({"memory": 3}), flush=True)', 'expected {"memory"'),
        ('print(json.dumps(["x"]), flush=True)', "got a list"),
        ('print(json.dumps({"memory": "a"}) + "\\n" + json.dumps({"memory": "b"}), flush=True)',
         "more than one line"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_na_with_its_cause(tmp_path, answer, cause):
    command = _script(tmp_path, answer)
    compressor = build(f"cmd:{command}")
    with pytest.raises(ExternalUnavailableError, match="malformed answer") as raised:
        compressor.update("", CHUNK, ["k"], 100)
    assert cause in str(raised.value)
    assert not any(_alive(pid) for pid in _pids(tmp_path))  # killed: its state is unknown


def test_a_systems_own_error_is_the_compressors_failure(tmp_path):
    command = _script(tmp_path, 'print(json.dumps({"error": "no room"}), flush=True)')
    with pytest.raises(ExternalMemoryError, match="no room"):
        build(f"cmd:{command}").update("", CHUNK, ["k"], 100)


def test_a_command_that_cannot_start_is_na():
    with pytest.raises(ExternalUnavailableError, match="cannot start"):
        build("cmd:/nonexistent/memory-binary").update("", CHUNK, ["k"], 100)


def test_the_request_carries_memory_records_text_messages_keys_and_budget(tmp_path):
    command = _script(tmp_path, 'print(json.dumps({"memory": json.dumps(request)}), flush=True)')
    seen = json.loads(build(f"cmd:{command}").update("before", CHUNK, ["k"], 321))
    assert seen["protocol"] == "memory-audit/1"
    assert (seen["memory"], seen["query_keys"], seen["budget"]) == ("before", ["k"], 321)
    assert seen["chunk"]["records"] == [
        {"id": "r1", "op": "set", "key": "k", "value": "v", "rev": 1}
    ]
    assert seen["chunk"]["text"] == CHUNK.text
    roles = [m["role"] for m in seen["chunk"]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert seen["chunk"]["messages"][1]["tool_calls"][0]["function"] == "read_log"


def test_stop_all_leaves_no_process_behind(tmp_path):
    command = _script(tmp_path, 'print(json.dumps({"memory": ""}), flush=True)\ntime.sleep(0)')
    build(f"cmd:{command}").update("", CHUNK, ["k"], 100)
    (pid,) = _pids(tmp_path)
    assert _alive(pid)
    stop_all()
    assert not _alive(pid)


def test_an_audit_run_leaves_no_process_behind_and_records_na_with_the_cause(tmp_path, pilot):
    """A real `audit run` on two worker processes: every external process it started
    is gone afterwards, and a system that crashes on some updates gives NA reads with
    the cause in the error column, the others scored."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(p.to_json() + "\n" for p in pilot[:4]))
    command = _script(
        tmp_path,
        """\
        if len(request["chunk"]["records"]) == 1:
            sys.exit(7)  # crashes on one-record chunks (the reveal's first chunk)
        print(json.dumps({"memory": ""}), flush=True)
        """,
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "audit", "run", "--pairs", str(pairs), "--conditions",
         f"cmd:{command},tail", "--transforms", "identity", "--budget", "600",
         "--workers", "2", "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    # 3: the run is complete but holds NA reads (`audit resume` asks again)
    assert done.returncode in (0, 3), done.stderr + done.stdout
    pids = _pids(tmp_path)
    assert pids
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)
    import pandas as pd

    rows = pd.read_csv(result_csv(out))
    external = rows[rows["condition"].str.startswith("cmd:")]
    assert set(external["outcome"]) == {"na"}  # each pair's stream crosses a crash
    assert external["error"].str.contains(r"exited \(code 7\)").all()
    assert set(rows[rows["condition"] == "tail"]["outcome"]) <= {"pass", "wrong_log"}


def test_a_killed_audit_takes_its_external_processes_with_it(tmp_path):
    """SIGKILL gives the audit no chance to clean up: the child dies with it
    (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    command = _script(tmp_path, 'print(json.dumps({"memory": ""}), flush=True)')
    with _audit_holding(tmp_path, command) as parent:
        (pid,) = _pids(tmp_path)
        assert _alive(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)


@contextlib.contextmanager
def _audit_holding(tmp_path: Path, command: str) -> Iterator[subprocess.Popen[str]]:
    """A process that built ``cmd:COMMAND``, gave it one chunk, said ``ready`` and now
    sleeps: the audit as it holds an external memory system (killed when done)."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys, time\n"
        "from compressors import ChunkView, build\n"
        "from histories import SetRecord\n"
        f"c = build({('cmd:' + command)!r})\n"
        "c.update('', ChunkView([SetRecord(id='r1', key='k', value='v', rev=1)]), ['k'], 9)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(driver)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "ready"
        yield parent
    finally:
        if parent.poll() is None:
            parent.kill()


class _Memory(http.server.BaseHTTPRequestHandler):
    """keep_newest over HTTP; ``/fail`` answers 500, ``/slow`` sleeps, ``/truncated``
    closes before its stated length, ``/trickle`` sends a byte every 0.3 s."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/fail":
            self.send_error(500, "boom")
            return
        if self.path in ("/truncated", "/trickle"):
            body = b'{"memory": "' + b"x" * 40 + b'"}'
            self.send_response(200)
            self.send_header(
                "Content-Length", str(len(body) + (9 if self.path == "/truncated" else 0))
            )
            self.end_headers()
            try:
                if self.path == "/truncated":
                    self.wfile.write(body)
                    return
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.3)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if self.path == "/slow":
            time.sleep(3)
        lines = request["memory"].split("\n") if request["memory"] else []
        lines += [json.dumps(r, separators=(",", ":")) for r in request["chunk"]["records"]]
        kept: list[str] = []
        used = -1
        for line in reversed(lines):
            if used + len(line.encode()) + 1 > request["budget"]:
                break
            kept.insert(0, line)
            used += len(line.encode()) + 1
        body = json.dumps({"memory": "\n".join(kept)}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except BrokenPipeError:  # the client gave up (the timeout test)
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_memory() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Memory)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_form_against_a_real_local_server(pilot, http_memory):
    external, tail = build(f"{http_memory}/update"), build("tail")
    pair = pilot[5]
    for variant in ("A", "B"):
        assert (
            stream_variant(external, pair, variant, 1200).memories
            == stream_variant(tail, pair, variant, 1200).memories
        )
    with pytest.raises(ExternalUnavailableError, match="HTTP 500"):
        build(f"{http_memory}/fail").update("", CHUNK, ["k"], 100)
    with pytest.raises(ExternalUnavailableError, match=r"no answer within 0.5 s \(timeout\)"):
        build(f"http:url={http_memory}/slow,timeout=0.5").update("", CHUNK, ["k"], 100)
    with pytest.raises(ExternalUnavailableError, match="incomplete answer"):
        build(f"{http_memory}/truncated").update("", CHUNK, ["k"], 100)
    started = time.monotonic()  # each byte within the timeout, the whole answer not
    with pytest.raises(ExternalUnavailableError, match=r"no answer within 1 s \(timeout\)"):
        build(f"http:url={http_memory}/trickle,timeout=1").update("", CHUNK, ["k"], 100)
    assert time.monotonic() - started < 3


def test_the_http_form_when_nothing_listens():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ExternalUnavailableError, match="refused"):
        build(f"http://127.0.0.1:{port}/update").update("", CHUNK, ["k"], 100)


def test_a_and_b_share_the_updates_of_their_shared_chunks(tmp_path, pilot):
    """The memory string is the protocol's only state, so the deterministic stage's
    update memo applies: A and B send their shared chunks once."""
    command = _script(
        tmp_path,
        """\
        with open(os.path.join(os.path.dirname(__file__), "calls.txt"), "a") as f:
            f.write("x")
        print(json.dumps({"memory": ""}), flush=True)
        """,
    )
    compressor = build(f"cmd:{command}")
    pair = pilot[0]
    memo: dict = {}
    for variant in ("A", "B"):
        stream_variant(compressor, pair, variant, 600, memo)
    updates = sum(
        len(prefix) + sum(len(c) for c in futures.values())
        for prefix, futures in (plan_variant(pair, v) for v in ("A", "B"))
    )
    calls = len((tmp_path / "calls.txt").read_text())
    assert 0 < calls < updates


# --- the adversary's findings: each of these hung, leaked or misjudged before ---


def _group_members(pgid: int) -> list[int]:
    """The live processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def test_a_killed_audit_takes_the_whole_process_group_with_it(tmp_path):
    """A wrapper that starts helpers (``bash -c``, a launcher script): SIGKILL of the
    audit kills its grandchildren too, not only the process it started."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    helper = f"{sys.executable} -c 'import time; time.sleep(60)'"
    command = _script(
        tmp_path,
        f"""\
        if n == 1:
            import subprocess
            helper = subprocess.Popen({helper!r}, shell=True)
            with open(os.path.join(os.path.dirname(__file__), "group.txt"), "w") as f:
                f.write(f"{{os.getpgrp()}} {{helper.pid}}")
        print(json.dumps({{"memory": ""}}), flush=True)
        """,
    )
    try:
        with _audit_holding(tmp_path, command) as parent:
            pgid, helper_pid = (int(x) for x in (tmp_path / "group.txt").read_text().split())
            assert _alive(helper_pid)
            assert len(_group_members(pgid)) >= 3  # the memory, its shell, the helper
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(timeout=10)
            deadline = time.monotonic() + 5
            while _group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _group_members(pgid) == []
    finally:
        with_group = (
            (tmp_path / "group.txt").read_text().split()
            if (tmp_path / "group.txt").exists()
            else []
        )
        if with_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(with_group[0]), signal.SIGKILL)


def test_a_process_flooding_its_stderr_fills_no_file_and_its_tail_is_kept(tmp_path):
    """A process writing stderr without end: a pipe drained into a bounded tail, no
    file that grows (before, /tmp filled), and the last words quoted in the cause."""
    command = _script(
        tmp_path,
        """\
        sys.stderr.write("x" * 20_000_000 + "\\n")
        if n == 2:
            print("the last words", file=sys.stderr, flush=True)
            sys.exit(3)
        print(json.dumps({"memory": "ok"}), flush=True)
        """,
    )
    compressor = build(f"cmd:run={command},timeout=20")
    assert compressor.update("", CHUNK, ["k"], 100) == "ok"
    (pid,) = _pids(tmp_path)
    assert stat.S_ISFIFO(os.stat(f"/proc/{pid}/fd/2").st_mode)  # not a file on disk
    with pytest.raises(ExternalUnavailableError, match=r"exited \(code 3\)") as raised:
        compressor.update("", CHUNK, ["k"], 100)
    message = str(raised.value)
    assert message.endswith("the last words")
    assert len(message.split("; stderr: ", 1)[1]) <= 2000


def test_an_answer_line_over_the_cap_is_refused_as_it_passes_it(tmp_path):
    """A 70 MB answer line: refused as malformed soon after it passes the 64 MiB cap
    (before, the quadratic read ran into the timeout first)."""
    command = _script(
        tmp_path,
        """\
        sys.stdout.write('{"memory": "' + "x" * 70_000_000 + '"}\\n')
        sys.stdout.flush()
        """,
    )
    started = time.monotonic()
    with pytest.raises(ExternalUnavailableError, match="a line over 67108864 bytes"):
        build(f"cmd:run={command},timeout=15").update("", CHUNK, ["k"], 100)
    assert time.monotonic() - started < 10


def test_a_long_answer_line_under_the_cap_is_read_whole_and_soon(tmp_path):
    """A 32 MB line (under the cap) is one answer, read in linear time (the quadratic
    read took about 6 s on a loaded machine)."""
    command = _script(
        tmp_path,
        """\
        sys.stdout.write('{"memory": "' + "x" * 32_000_000 + '"}\\n')
        sys.stdout.flush()
        """,
    )
    started = time.monotonic()
    assert len(build(f"cmd:run={command},timeout=15").update("", CHUNK, ["k"], 100)) == 32_000_000
    assert time.monotonic() - started < 5


@pytest.fixture(params=["headers", "body"])
def trickling_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A raw HTTP server that sends its status line, then one header byte every 0.2 s
    (or its headers, with a Content-Length, then one body byte every 0.2 s): each read
    is well within a per-read timeout, the answer never complete."""
    head = b"HTTP/1.1 200 OK\r\n"
    if request.param == "body":
        head += b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(head)
                    while not done.is_set():
                        conn.sendall(b"X" if request.param == "headers" else b" ")
                        time.sleep(0.2)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/update"
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()


def test_the_http_form_times_out_on_trickled_headers_and_bodies(trickling_server):
    """Issue 27 (also): a trickled body was "incomplete answer", not the timeout."""
    compressor = build(f"http:url={trickling_server},timeout=1")
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            compressor.update("", CHUNK, ["k"], 100)
        except BaseException as error:
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the request hung past its timeout"
    assert time.monotonic() - started < 3
    assert isinstance(outcome[0], ExternalUnavailableError)
    assert re.search(r"no answer within 1 s \(timeout\)", str(outcome[0]))


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        ('print(json.dumps({"memory": "abc\\ud800def"}), flush=True)', "not valid Unicode"),
        ('print(\'{"memory": "a", "memory": "b"}\', flush=True)', "duplicate key"),
    ],
)
def test_an_answer_that_is_not_text_or_is_ambiguous_is_malformed(tmp_path, answer, cause):
    """A lone surrogate is valid JSON but not text (before: scored as the system's
    error); a duplicate key leaves the answer ambiguous (before: the last one won)."""
    command = _script(tmp_path, answer)
    compressor = build(f"cmd:{command}")
    with pytest.raises(ExternalUnavailableError, match="malformed answer") as raised:
        compressor.update("", CHUNK, ["k"], 100)
    assert cause in str(raised.value)


def _audit(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "audit", *args, "--quiet"],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
    )  # fmt: skip


def test_a_process_that_closes_its_output_is_na_never_wrong_and_stays_na_on_resume(tmp_path, pilot):
    """Issue 27, 1: a system that answers once, closes its stdout and runs on was
    scored `error` (correct 0) with the audit's own TimeoutExpired and paths as the
    cause, and `audit resume` made the run `complete` with every read wrong.  Now each
    read is NA with a cause that names the system only, the run ends incomplete (3),
    and a resume leaves it NA and incomplete."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(p.to_json() + "\n" for p in pilot[:3]))
    program = """bash -c 'read l; echo {\\"memory\\":\\"\\"}; exec 1>&-; sleep 100'"""
    out = tmp_path / "run"
    started = time.monotonic()
    done = _audit(tmp_path, "run", "--pairs", str(pairs), "--conditions", f"cmd:{program}",
                  "--transforms", "identity", "--budget", "600", "--workers", "1",
                  "--out", str(out))  # fmt: skip
    assert done.returncode == 3, done.stderr + done.stdout
    assert time.monotonic() - started < 60
    import pandas as pd

    for attempt in ("run", "resume"):
        rows = pd.read_csv(result_csv(out))
        assert set(rows["outcome"]) == {"na"}, (attempt, rows["outcome"].value_counts())
        assert rows["correct"].isna().all()
        causes = set(rows["error"])
        assert all("the process closed its output" in cause for cause in causes), causes
        for internal in ("TimeoutExpired", "_guard", sys.executable, str(ROOT)):
            assert not any(internal in cause for cause in causes), (internal, causes)
        assert json.loads((out / "manifest.json").read_text())["state"] == "incomplete"
        if attempt == "run":
            resumed = _audit(tmp_path, "resume", str(out))
            assert resumed.returncode == 3, resumed.stderr + resumed.stdout


def test_two_lines_for_one_update_give_the_same_rows_every_time(tmp_path, pilot):
    """Issue 27, 2: a second line written a moment after the answer was sometimes
    taken as the answer to the next update (three runs: 24, 18 and 0 scored rows).
    Each cell's process is ended at the cell's end with its input closed first, so a
    line no update asked for is always seen and the cell is NA: the same rows each
    run, on one worker or two."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(p.to_json() + "\n" for p in pilot[:4]))
    command = _script(
        tmp_path,
        """\
        records = request["chunk"]["records"]  # keeps the newest chunk
        memory = "\\n".join(json.dumps(r, separators=(",", ":")) for r in records)
        print(json.dumps({"memory": memory}), flush=True)
        if request["budget"] == 600 and n == 3:
            time.sleep(0.05)  # a stray line, written after the answer was read
            print(json.dumps({"memory": ""}), flush=True)
        """,
    )
    seen = []
    for index, workers in enumerate(("1", "2", "1")):
        out = tmp_path / f"run{index}"
        done = _audit(tmp_path, "run", "--pairs", str(pairs), "--conditions",
                      f"cmd:{command}", "--transforms", "identity,rename:1",
                      "--budget", "600,1200", "--workers", workers, "--seed", "0",
                      "--out", str(out))  # fmt: skip
        assert done.returncode == 3, done.stderr + done.stdout
        import pandas as pd

        rows = pd.read_csv(result_csv(out))
        broken = rows[rows["budget"] == 600]
        assert set(broken["outcome"]) == {"na"}
        assert broken["error"].str.contains("more than one line for one update").all()
        assert set(rows[rows["budget"] == 1200]["outcome"]) <= {"pass", "wrong_log"}
        seen.append(rows.drop(columns=["run_id"], errors="ignore").to_csv(index=False))
    assert seen[0] == seen[1] == seen[2]


def test_a_protocol_error_cause_is_the_same_whatever_the_process_writes_to_stderr(tmp_path, pilot):
    """Found attacking issue 27: a line written before any update made every read NA,
    but some causes also quoted a BrokenPipeError traceback from stderr, depending on
    timing, so two identical runs differed.  A protocol error's cause quotes no stderr."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(p.to_json() + "\n" for p in pilot[:2]))
    program = tmp_path / "early.py"
    program.write_text(
        "import json, sys\n"
        "print(json.dumps({'memory': ''}), flush=True)  # no update asked for this\n"
        "print('a traceback that may or may not be written', file=sys.stderr, flush=True)\n"
        "for line in sys.stdin:\n"
        "    print(json.dumps({'memory': ''}), flush=True)\n"
    )
    out = tmp_path / "run"
    done = _audit(tmp_path, "run", "--pairs", str(pairs), "--conditions",
                  f"cmd:{sys.executable} {program}", "--transforms", "identity",
                  "--budget", "600", "--workers", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 3, done.stderr + done.stdout
    import pandas as pd

    rows = pd.read_csv(result_csv(out))
    assert set(rows["outcome"]) == {"na"}
    assert set(rows["error"]) == {
        f"unavailable: cmd:{sys.executable} {program}: malformed answer (more than one line "
        "for one update)"
    }, set(rows["error"])
