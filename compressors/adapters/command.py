"""Any memory system, in any language: the command protocol and its HTTP form.

``cmd:COMMAND`` starts the command once per cell and keeps it running; each update is
one JSON line on its standard input (``request_payload``) and one answer line
``{"memory": "..."}`` on its output.  ``http://HOST:PORT/PATH`` POSTs the same object
to a server the user runs.  A timeout, a crash or a malformed answer is an
infrastructure failure (``ExternalUnavailableError``: reads NA, never wrong);
``{"error": "..."}`` is the system's own failure (scored 0); a line no update asked
for makes the whole cell NA.  ``docs/adapters.md`` is the reference: pairing, the
withheld API keys, the guard that keeps processes from outliving the audit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import http.client
import json
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from multiprocessing import util as mp_util
from pathlib import Path
from typing import IO, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from compressors._chat import ChatUnavailableError
from compressors._memory import _DuplicateKeyError, unique_keys
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register
from histories import MemoryAuditError

PROTOCOL = "memory-audit/1"
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""A longer answer line is malformed (a runaway process must not exhaust memory)."""
STDERR_TAIL = 2000
"""Characters of the process's standard error quoted in a failure's cause."""
_STDERR_TAIL_BYTES = 4 * STDERR_TAIL
"""Bytes of standard error kept: 2,000 characters of UTF-8 at most take this many."""
_GUARD = str(Path(__file__).with_name("_guard.py"))
FINISH_GRACE_S = 1.0
"""How long a process may take to exit once its input is closed at the end of a cell,
while the audit reads what it still writes (an answer no update asked for)."""
_STRAY = "malformed answer (more than one line for one update)"
_WITHHELD: frozenset[str] = frozenset()
"""Environment variables kept from every external program: the run's API keys."""


_SCRUB: Callable[[str], str] = str
"""What an external system says passes through this (``withhold``); at first, as it is."""


def withhold(names: Iterable[str], scrub: Callable[[str], str]) -> None:
    """Keep the variables ``names`` (the configured API keys) out of every external
    program's environment, and pass everything an external system says (its memories,
    its errors, the end of its stderr) through ``scrub``, as a server's answers are.
    The audit calls it before any work; forked workers inherit it."""
    global _WITHHELD, _SCRUB
    _WITHHELD, _SCRUB = frozenset(names), scrub


def program_environment(passed: Iterable[str] = ()) -> dict[str, str]:
    """The environment of an external program: the audit's, less the withheld keys
    (a name in ``passed``, the condition's ``env=``, is passed deliberately)."""
    keep = set(passed)
    return {k: v for k, v in os.environ.items() if k not in _WITHHELD or k in keep}


class ExternalUnavailableError(ChatUnavailableError):
    """An external memory system did not answer: a timeout, a crash, a malformed
    answer, a connection refused.  Like an unavailable LLM writer, the stream's reads
    are NA (the cause in the ``error`` column), never scored as wrong."""


class ExternalProtocolError(ExternalUnavailableError):
    """An answer line no update asked for: every read of the cell (the job's streams
    of that condition and budget) is NA, whenever the line arrived."""


class ExternalMemoryError(MemoryAuditError, RuntimeError):
    """The external system answered ``{"error": ...}``: the compressor failed."""


def _scrubbed(error: ExternalUnavailableError | ExternalMemoryError) -> Exception:
    """The same error, its message scrubbed of the run's keys."""
    return type(error)(_SCRUB(str(error)))


def _keyless(memory: str, where: str) -> str:
    """An external system's memory as it wrote it, or NA when it holds a configured key
    (or a piece of one): a scrubbed memory is not what the system kept, so scoring it
    would turn right reads into wrong ones, and storing it whole would leak the key."""
    if _SCRUB(memory) != memory:
        raise ExternalUnavailableError(
            f"{where}: its memory holds a configured API key or a piece of one "
            "(not stored, not scored)"
        )
    return memory


def request_payload(
    memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int
) -> dict[str, Any]:
    """The JSON object of one update."""
    messages = []
    for turn in chunk.messages:
        message: dict[str, Any] = {"role": turn.role, "content": turn.content}
        if turn.tool_calls:
            message["tool_calls"] = [asdict(call) for call in turn.tool_calls]
        if turn.tool_call_id is not None:
            message["tool_call_id"] = turn.tool_call_id
        messages.append(message)
    return {
        "protocol": PROTOCOL,
        "memory": memory,
        "chunk": {
            "records": [record.to_dict() for record in chunk.records],
            "text": chunk.text,
            "style": chunk.style,
            "messages": messages,
        },
        "query_keys": list(query_keys),
        "budget": budget,
    }


def _is_text(value: str) -> bool:
    """Valid Unicode text: JSON may carry lone surrogates (``"\\ud800"``), which no
    UTF-8 memory can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_answer(raw: bytes, where: str) -> str:
    """The memory of an answer; ``ExternalUnavailableError`` when it is malformed,
    ``ExternalMemoryError`` when the system reported a failure of its own."""
    try:
        answer = json.loads(raw, object_pairs_hook=unique_keys)
    except _DuplicateKeyError as error:
        raise ExternalUnavailableError(f"{where}: malformed answer ({error})") from None
    except (ValueError, RecursionError) as error:
        excerpt = raw[:200].decode("utf-8", "replace")
        raise ExternalUnavailableError(
            f"{where}: malformed answer (not JSON: {error}): {excerpt!r}"
        ) from None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str) and "memory" not in answer:
        message = answer["error"][:500].encode("utf-8", "replace").decode("utf-8")
        raise ExternalMemoryError(f"{where} reported an error: {message}")
    if not isinstance(answer, dict) or not isinstance(answer.get("memory"), str):
        kind = type(answer).__name__
        raise ExternalUnavailableError(
            f'{where}: malformed answer (expected {{"memory": "..."}}, got a {kind} '
            f"{json.dumps(answer)[:200]})"
        )
    if not _is_text(answer["memory"]):
        raise ExternalUnavailableError(
            f"{where}: malformed answer (the memory is not valid Unicode text: a lone surrogate)"
        )
    return str(answer["memory"])


def _prctl() -> Any:
    """libc's prctl, resolved before any fork (the child must not import)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the guard gets SIGTERM when the thread that started it ends (the process
    killed, or the audit's worker thread gone): PR_SET_PDEATHSIG, kept across exec;
    the guard then kills its whole group."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


class _StderrTail:
    """The end of a process's standard error: a pipe drained by a thread into a
    bounded buffer, so that a process writing without end fills neither the pipe
    (blocking it) nor a disk."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.tail = bytearray()
        self.lock = threading.Lock()
        self.abandoned = threading.Event()
        self.thread = threading.Thread(target=self._drain, name="cmd-stderr", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        fd = self.stream.fileno()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                while not self.abandoned.is_set():
                    if not selector.select(0.5):
                        continue
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    with self.lock:
                        self.tail += chunk
                        del self.tail[:-_STDERR_TAIL_BYTES]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self.stream.close()

    def finish(self, wait: float) -> str:
        """What it wrote, after waiting up to ``wait`` s for the end of the pipe (the
        group is dead: only a process that escaped it can hold the pipe longer)."""
        self.thread.join(wait)
        self.abandoned.set()
        with self.lock:
            data = bytes(self.tail)
        return data.decode("utf-8", "replace").strip()[-STDERR_TAIL:]


class ExternalProcess:
    """One long-lived external process speaking the JSON-lines protocol.

    ``ask`` writes one line and reads one line within the timeout; any failure kills
    the process (its process group) and raises ``ExternalUnavailableError``; the next
    ``ask`` starts a new one.  Thread-safe: requests to one process are serialized.
    """

    def __init__(self, argv: Sequence[str], where: str, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.where = where
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.stderr: _StderrTail | None = None
        self.buffer = bytearray()
        self.starts = 0
        self.lock = threading.Lock()

    def _start(self, deadline: float, timeout: float) -> subprocess.Popen[bytes]:
        """Start the command under its guard; a command that cannot be run (not found,
        not executable) is "cannot start", reported by the guard on a pipe."""
        status_read, status_write = os.pipe()
        try:
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", _GUARD, str(os.getpid()), str(status_write),
                     *self.argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    env=self.env,
                    pass_fds=(status_write,),
                    preexec_fn=_die_with_parent if _PRCTL is not None else None,
                )  # fmt: skip
            except OSError as error:
                raise ExternalUnavailableError(f"{self.where}: cannot start: {error}") from None
            finally:
                os.close(status_write)
            self.process = process
            assert process.stderr is not None
            self.stderr = _StderrTail(process.stderr)
            self.buffer = bytearray()
            self.starts += 1
            failure = self._start_status(status_read, deadline, timeout)
        finally:
            os.close(status_read)
        if failure:
            self.stop()
            raise ExternalUnavailableError(f"{self.where}: cannot start: {failure}")
        return process

    def _start_status(self, fd: int, deadline: float, timeout: float) -> str:
        """The guard's report: nothing once the command runs, else why it could not."""
        report = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise self._fail(f"no answer within {timeout:g} s (timeout)")
                chunk = os.read(fd, 4096)
                if not chunk:
                    return report.decode("utf-8", "replace")
                report += chunk[:4096]

    def _fail(self, cause: str, quote_stderr: bool = True) -> ExternalUnavailableError:
        """Stop the process (its group) and say why, with the end of its stderr.  A
        protocol error quotes none: what a process writes there after its stray line
        (a broken pipe, once we stop reading) depends on timing, and the same run must
        give the same rows."""
        stderr, self.stderr = self.stderr, None  # drained to its end, not abandoned
        self.stop()
        tail = stderr.finish(wait=1.0) if stderr is not None else ""
        tail = tail if quote_stderr else ""
        return ExternalUnavailableError(
            f"{self.where}: {cause}" + (f"; stderr: {tail}" if tail else "")
        )

    def ask(self, line: bytes, timeout: float) -> bytes:
        """The answer line to ``line``: exactly one line per request."""
        with self.lock:
            try:
                return self._ask(line, timeout)
            except ExternalUnavailableError:
                raise
            except Exception:  # the audit's own plumbing: its internals stay out of the cause
                raise self._fail("the exchange with the process failed") from None

    def _ask(self, line: bytes, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        process = self.process
        if process is None or process.poll() is not None:
            if process is not None:
                self.stop()
            process = self._start(deadline, timeout)
        if self._unsolicited(process):
            raise ExternalProtocolError(str(self._fail(_STRAY, quote_stderr=False)))
        self._write_line(process, line + b"\n", deadline, timeout)
        return self._read_line(process, deadline, timeout)

    def _unsolicited(self, process: subprocess.Popen[bytes]) -> bool:
        """Whether the process wrote something before this update was sent: an answer
        to no update (an end of file is left for the exchange to find)."""
        assert process.stdout is not None
        if self.buffer.strip():
            return True
        fd = process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            if not selector.select(0):
                return False
        chunk = os.read(fd, 1 << 20)
        self.buffer += chunk
        return bool(chunk.strip())

    def finish(self, grace: float = FINISH_GRACE_S) -> bool:
        """End the process at the end of a cell: close its input, read what it still
        writes until it exits (within ``grace``), then end its group.  True when it
        wrote anything no update asked for: with the input closed first, a process
        that exits at end of file has shown all it wrote, however late."""
        with self.lock:
            process = self.process
            if process is None:
                return False
            stray = bool(self.buffer.strip())
            assert process.stdout is not None
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            fd = process.stdout.fileno()
            deadline = time.monotonic() + grace
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                while not stray:
                    left = deadline - time.monotonic()
                    if left <= 0 or not selector.select(left):
                        break
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except OSError:
                        break
                    if not chunk:
                        break
                    stray = bool(chunk.strip())
            self.stop()
            return stray

    def _write_line(
        self, process: subprocess.Popen[bytes], data: bytes, deadline: float, timeout: float
    ) -> None:
        """Write the update within the timeout: a process that stops reading its input
        cannot block the audit once the pipe is full."""
        assert process.stdin is not None
        fd = process.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise self._fail(f"no answer within {timeout:g} s (timeout)")
                try:
                    written = os.write(fd, view)
                except BlockingIOError:
                    continue
                except OSError:  # a broken pipe: it exited, or closed its input
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=1)
                    code = process.poll()
                    if code is None:
                        raise self._fail("the process closed its input") from None
                    raise self._fail(
                        f"the process exited (code {code}) before reading the update"
                    ) from None
                view = view[written:]

    def _read_line(
        self, process: subprocess.Popen[bytes], deadline: float, timeout: float
    ) -> bytes:
        """One answer line within the timeout, in time linear in its length: only each
        new chunk is searched for the newline, and a line is refused as soon as it
        passes the size cap."""
        assert process.stdout is not None
        fd = process.stdout.fileno()
        buffer = self.buffer
        end = buffer.find(b"\n")
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while end < 0:
                if len(buffer) > MAX_ANSWER_BYTES:
                    raise self._fail(f"malformed answer (a line over {MAX_ANSWER_BYTES} bytes)")
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise self._fail(f"no answer within {timeout:g} s (timeout)")
                chunk = os.read(fd, 1 << 20)
                if not chunk:  # its output closed: it exited, or closed it and runs on
                    try:
                        code = process.wait(timeout=0.5)
                    except subprocess.TimeoutExpired:
                        raise self._fail("the process closed its output") from None
                    raise self._fail(f"the process exited (code {code}) without answering")
                found = chunk.find(b"\n")
                if found >= 0:
                    end = len(buffer) + found
                buffer += chunk
        if end > MAX_ANSWER_BYTES:
            raise self._fail(f"malformed answer (a line over {MAX_ANSWER_BYTES} bytes)")
        line = bytes(buffer[:end])
        del buffer[: end + 1]
        if buffer.strip():
            raise ExternalProtocolError(str(self._fail(_STRAY, quote_stderr=False)))
        return line

    def stop(self) -> None:
        """End the process and everything it started: close its input, give it a
        moment, then SIGTERM and SIGKILL its process group."""
        process, self.process = self.process, None
        stderr, self.stderr = self.stderr, None
        if process is not None:
            _end(process)
        if stderr is not None:
            stderr.finish(wait=0)


def _end(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=0.5)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # its own session: the group is its children too
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # children left behind by a leader that exited


_PROCESSES: dict[int, ExternalProcess] = {}
"""Every external process this process runs (by id), for ``stop_all``."""
_PROCESSES_LOCK = threading.Lock()
_OWNER = os.getpid()


def _register(process: ExternalProcess) -> ExternalProcess:
    global _OWNER
    with _PROCESSES_LOCK:
        if os.getpid() != _OWNER:  # a forked worker: the parent's processes are not ours
            _PROCESSES.clear()
            _OWNER = os.getpid()
            mp_util.Finalize(None, stop_all, exitpriority=100)
        _PROCESSES[id(process)] = process
    return process


def _release(process: ExternalProcess) -> None:
    with _PROCESSES_LOCK:
        _PROCESSES.pop(id(process), None)


def stop_all() -> None:
    """Stop every external process this process started (at exit, and in tests)."""
    with _PROCESSES_LOCK:
        processes = list(_PROCESSES.values())
        _PROCESSES.clear()
    for process in processes:
        process.stop()


atexit.register(stop_all)
mp_util.Finalize(None, stop_all, exitpriority=100)  # multiprocessing workers skip atexit


class CommandParams(BaseModel):
    """``cmd:COMMAND`` or ``cmd:run=COMMAND,timeout=SECONDS``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str = Field(min_length=1)
    """The command line (split like a shell would, not run by one; no commas)."""
    timeout: float = Field(default=30.0, gt=0, le=3600)
    """Seconds an update may take (a process's first includes its start)."""
    env: str = Field(default="", pattern=r"^([A-Za-z_]\w*( [A-Za-z_]\w*)*)?$")
    """Names of withheld variables (API keys) to pass all the same, space separated."""


class _External(Compressor):
    """An external system: its updates block on I/O, so ``aupdate`` runs them in a thread."""

    version = "1"
    adapter = True
    extra: ClassVar[str] = ""

    async def aupdate(
        self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int, repeat: int = 0
    ) -> str:
        return await asyncio.to_thread(self.update, memory, chunk, query_keys, budget)


@register
class CommandMemory(_External):
    """An external process speaking the JSON-lines protocol."""

    name = "cmd"
    summary = "cmd:COMMAND: an external process, one JSON line per update (docs/adapters.md)"
    Params = CommandParams

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._process: ExternalProcess | None = None
        self._broken: str | None = None
        self._lock = threading.Lock()

    def _session(self) -> ExternalProcess:
        """This object's process: one per cell of a job (or LLM unit), ended by
        ``finish``, so no answer line crosses into another cell."""
        params = self.params
        assert isinstance(params, CommandParams)
        with self._lock:
            if self._process is None:
                argv = shlex.split(params.run)
                if not argv:
                    raise ExternalUnavailableError(f"cmd: empty command {params.run!r}")
                env = program_environment(params.env.split())
                self._process = _register(ExternalProcess(argv, f"cmd:{params.run}", env))
            return self._process

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        params = self.params
        assert isinstance(params, CommandParams)
        where = f"cmd:{params.run}"
        line = json.dumps(request_payload(memory, chunk, query_keys, budget)).encode()
        process = self._session()
        try:
            return _keyless(parse_answer(process.ask(line, params.timeout), where), where)
        except ExternalProtocolError as error:
            self._broken = self._broken or str(error)
            raise _scrubbed(error) from None
        except ExternalUnavailableError as error:
            process.stop()  # what it will say next is anyone's guess: start afresh
            raise _scrubbed(error) from None
        except ExternalMemoryError as error:
            raise _scrubbed(error) from None

    def finish(self) -> None:
        """End the cell's process; an answer line no update asked for, seen at any time
        in the cell or written before the process exited, makes the cell NA."""
        with self._lock:
            process, self._process = self._process, None
            broken, self._broken = self._broken, None
        if process is not None:
            if process.finish() and broken is None:
                broken = f"{process.where}: {_STRAY}"
            _release(process)
        if broken is not None:
            raise ExternalProtocolError(_SCRUB(broken))


class HttpParams(BaseModel):
    """``http://HOST:PORT/PATH`` or ``http:url=URL,timeout=SECONDS``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    timeout: float = Field(default=30.0, gt=0, le=3600)


@register
class HttpMemory(_External):
    """A server the user runs, POSTed the same JSON object per update."""

    name = "http"
    summary = "http://HOST:PORT/PATH: a server you run, POSTed one JSON object per update"
    Params = HttpParams

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        params = self.params
        assert isinstance(params, HttpParams)
        body = json.dumps(request_payload(memory, chunk, query_keys, budget)).encode()
        try:
            answer = parse_answer(_post(params.url, body, params.timeout).strip(), params.url)
            return _keyless(answer, params.url)
        except (ExternalUnavailableError, ExternalMemoryError) as error:
            raise _scrubbed(error) from None


def _post(url: str, body: bytes, timeout: float) -> bytes:
    """POST one update; the whole answer (connection, status line, headers, body) must
    arrive within ``timeout``.  A per-read timeout cannot bound a server that sends a
    byte at a time, so a watchdog shuts the socket down at the deadline, which ends
    whatever read is waiting."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    deadline = time.monotonic() + timeout
    expired = threading.Event()
    timed_out = ExternalUnavailableError(f"{url}: no answer within {timeout:g} s (timeout)")
    try:
        connection = connection_class(host, timeout=timeout)
    except (ValueError, http.client.HTTPException) as error:
        raise ExternalUnavailableError(f"{url}: {type(error).__name__}: {error}") from None

    def expire() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.connect()
        if expired.is_set():  # the watchdog fired before there was a socket to shut
            raise timed_out
        connection.request("POST", target, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if not 200 <= response.status < 300:
            raise ExternalUnavailableError(f"{url}: HTTP {response.status} {response.reason}")
        return _read_body(response, expired, url)
    except (OSError, http.client.HTTPException) as error:
        if expired.is_set() or time.monotonic() >= deadline:
            raise timed_out from None
        reason = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
        raise ExternalUnavailableError(f"{url}: {reason}") from None
    finally:
        watchdog.cancel()
        connection.close()


def _read_body(response: http.client.HTTPResponse, expired: threading.Event, url: str) -> bytes:
    """The whole body, no more than the size cap, and as long as its Content-Length
    says.  The watchdog in ``_post`` bounds the time: the end of a body it cut short
    is the timeout (an ``OSError`` there), not an incomplete answer."""
    stated = response.headers.get("Content-Length")
    if stated is not None and stated.isdigit() and int(stated) > MAX_ANSWER_BYTES:
        raise ExternalUnavailableError(f"{url}: malformed answer (over the size cap)")
    parts: list[bytes] = []
    size = 0
    while True:
        part = response.read1(1 << 16)
        if expired.is_set():
            raise OSError("past the deadline")
        if not part:
            break
        parts.append(part)
        size += len(part)
        if size > MAX_ANSWER_BYTES:
            raise ExternalUnavailableError(f"{url}: malformed answer (over the size cap)")
    if stated is not None and stated.isdigit() and int(stated) != size:
        raise ExternalUnavailableError(f"{url}: incomplete answer ({size} of {stated} bytes)")
    return b"".join(parts)
