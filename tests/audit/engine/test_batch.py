"""``audit batch export`` / ``audit batch import``: a run's LLM requests as offline batches.

The same run is made twice: live, against a local HTTP server that records every body it
receives, and offline, as rounds of batch files answered by a batch runner of the test's
own (the same answers, computed from the request, as the server's).  The exported
requests must be exactly the requests the live run sends (bodies and therefore cache
keys), one round per writer update plus the reader's round, and the offline run must
end with the same results while sending nothing.  The round trip through vLLM's own
batch runner is in tests/audit/backends/test_vllm_integration.py.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from audit.cli import app
from tests._rows import result_csv

runner = CliRunner()
MODEL = "batch-model"
RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms", "identity",
       "--writer", "llm", "--reader", "llm", "--llm-conditions", "prose_off,frontier",
       "--llm-sample", "1", "--repeats", "1", "--llm-transforms", "identity",
       "--workers", "1", "--quiet"]  # fmt: skip
COMPARED = ("pair_id", "condition", "reader", "variant", "branch", "outcome", "correct",
            "answer", "memory_sha256", "writer_model", "reader_model")  # fmt: skip


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion computed from the request: a writer's memory names a digest of
    its prompt (so each update's answer differs, and a wrong chain shows), a reader answers
    null for each query key."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You read") or "You read an agent's memory" in system:
        keys = json.loads(re.search(r"Query keys: (\[.*?\])", user).group(1))  # type: ignore[union-attr]
        content = json.dumps({"values": dict.fromkeys(keys)})
    else:
        digest = hashlib.sha256(json.dumps(body["messages"]).encode()).hexdigest()[:12]
        content = f"kept {digest}"
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


@contextmanager
def live_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base URL, bodies received) of a local server answering with ``answer``."""
    bodies: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), asyncio.Event()
    url: list[str] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        return web.json_response(answer(body))

    async def serve() -> None:
        application = web.Application()
        application.router.add_post("/v1/chat/completions", chat)
        site_runner = web.AppRunner(application, access_log=None)
        await site_runner.setup()
        site = web.TCPSite(site_runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url.append(f"http://127.0.0.1:{port}/v1")
        ready.set()
        await stop.wait()
        await site_runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield url[0], bodies
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def run_batch(requests: Path, outputs: Path, refuse: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """A batch runner: OpenAI Batch API input lines in, output lines out."""
    with outputs.open("w") as sink:
        for text in requests.read_text().splitlines():
            line = json.loads(text)
            assert line["method"] == "POST"
            assert line["url"] == "/v1/chat/completions"
            if line["custom_id"] in refuse:
                result = {"status_code": 400, "request_id": "r", "body": None}
                error: Any = {"message": "prompt too long"}
            else:
                result = {"status_code": 200, "request_id": "r", "body": answer(line["body"])}
                error = None
            sink.write(json.dumps({"id": "b", "custom_id": line["custom_id"],
                                   "response": result, "error": error}) + "\n")  # fmt: skip


def config(path: Path, base_url: str, cache: Path) -> Path:
    path.write_text(
        f'cache_path = "{cache}"\n[backends.llm]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\n'
        "max_retries = 0\n"
    )
    return path


def rows(run_dir: Path) -> list[tuple[str, ...]]:
    with result_csv(run_dir).open(newline="") as handle:
        return sorted(tuple(r[c] for c in COMPARED) for r in csv.DictReader(handle))


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_batch_rounds_send_exactly_the_live_requests_and_finish_with_none(tmp_path: Path):
    with live_server() as (url, received):
        live_config = config(tmp_path / "live.toml", url, tmp_path / "live.sqlite")
        # without the determinism probe, whose requests measure a server and are no part
        # of the stage (a batch has no server to measure: the offline run skips it too)
        invoke(*RUN, "--config", str(live_config), "--out", str(tmp_path / "live"),
               "--no-determinism")  # fmt: skip
    assert received

    # offline: the server URL answers nothing; every answer comes through batch files
    offline = config(tmp_path / "offline.toml", "http://127.0.0.1:9/v1", tmp_path / "b.sqlite")
    run_dir = tmp_path / "offline"
    planned = invoke(*RUN, "--config", str(offline), "--out", str(run_dir), "--plan-only")
    assert "planned" in planned
    assert not (run_dir / "store.sqlite").exists()
    exported: list[dict[str, Any]] = []
    rounds: list[str] = []
    for number in range(1, 30):
        output = invoke("batch", "export", str(run_dir), "--config", str(offline))
        if output.startswith("nothing to export"):
            break
        if number == 10:  # the last round still to answer: the run would need its server
            early = runner.invoke(app, [*RUN, "--config", str(offline), "--out", str(run_dir)])
            assert early.exit_code == 1, early.output
            assert "does not answer" in early.output, early.output
            assert "nothing was run" in early.output, early.output
            assert not (run_dir / "store.sqlite").exists()
        rounds.append(output)
        assert output.startswith(f"round {number}: "), output
        batch = run_dir / "batch" / f"round-{number:03d}.jsonl"
        lines = [json.loads(t) for t in batch.read_text().splitlines()]
        assert all(line["custom_id"] == line["custom_id"].lower() for line in lines)
        exported += [line["body"] for line in lines]
        run_batch(batch, tmp_path / f"out-{number}.jsonl")
        imported = invoke("batch", "import", str(tmp_path / f"out-{number}.jsonl"),
                          "--config", str(offline))  # fmt: skip
        assert f"{len(lines)} answers imported" in imported, imported
    # pilot pairs: 5 prefix chunks and 2 + 2 future chunks, one update each, then the reader
    assert len(rounds) == 10, rounds
    # the pair's two variants begin with the same chunk: one request is both streams' first
    # update (identical requests are exported once, as the live client sends them once)
    # and the reads of frontier and of full (every LLM reader's check) need no writer
    assert "1 writer updates of 2 streams, 12 reader reads" in rounds[0], rounds[0]
    assert all("2 writer updates of 2 streams, 0 reader reads" in r for r in rounds[1:-1])
    assert "still to come: 9 more round(s), at most 16 writer requests and 6 reader" in rounds[0]
    assert "0 writer updates of 0 streams, 6 reader reads" in rounds[-1], rounds[-1]
    assert "this is the last round" in rounds[-1]

    def canonical(bodies: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(b, sort_keys=True) for b in bodies)

    assert canonical(exported) == canonical(received)  # the very requests, byte for byte

    # every answer is in the cache: the run completes without its server (which answers
    # nothing), and says so
    final = invoke(*RUN, "--config", str(offline), "--out", str(run_dir))
    assert "the response cache answers every LLM request of this run" in final, final
    llm = json.loads((run_dir / "costs.json").read_text())["invocations"][-1]["llm"]
    counters = llm["writer_and_reader"]
    assert counters["sent"] == 0, counters
    assert counters["attempts"] == 0, counters
    live = json.loads((tmp_path / "live" / "costs.json").read_text())["invocations"][-1]
    live_counters = live["llm"]["writer_and_reader"]
    assert live_counters["sent"] == len(received)
    # every chat call the live run made, now from the cache (an identical request the live
    # run sent once for two streams, answering the second in flight, is two hits here)
    assert counters["cache_hits"] == counters["requests"] == live_counters["requests"]
    assert counters["cache_hits"] == len(received) + live_counters["deduplicated"]
    assert rows(run_dir) == rows(tmp_path / "live")


def test_an_import_is_checked_line_by_line_before_anything_is_stored(tmp_path: Path):
    offline = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", tmp_path / "c.sqlite")
    run_dir = tmp_path / "run"
    invoke(*RUN, "--config", str(offline), "--out", str(run_dir), "--plan-only")
    first = invoke("batch", "export", str(run_dir), "--config", str(offline))
    # 1 writer (both streams), 12 reader (frontier, and full: the reader's check)
    assert first.startswith("round 1: 13 requests"), first
    batch = run_dir / "batch" / "round-001.jsonl"
    out = tmp_path / "out.jsonl"
    run_batch(batch, out)
    good = out.read_text().splitlines()

    bad = tmp_path / "bad.jsonl"
    bad.write_text(good[0] + "\n{not json\n")
    result = runner.invoke(app, ["batch", "import", str(bad), "--config", str(offline)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {bad}:2: not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))"
    ]
    forged = tmp_path / "forged.jsonl"
    line = json.loads(good[0])
    line["custom_id"] = "0" * 64
    forged.write_text(json.dumps(line) + "\n")
    result = runner.invoke(app, ["batch", "import", str(forged), "--config", str(offline)])
    assert result.exit_code == 2
    assert f"{forged}:1: custom_id 0000000000000000... names no request exported" in result.output

    # nothing was stored by the refused files: the same round is exported again
    again = invoke("batch", "export", str(run_dir), "--config", str(offline))
    assert again.startswith("round 1: 13 requests"), again

    refused = json.loads(good[-1])["custom_id"]  # a reader request (writers come first)
    run_batch(batch, out, refuse={refused})
    output = invoke("batch", "import", str(out), "--config", str(offline))
    assert "12 answers imported" in output, output
    assert "1 refused by the batch" in output, output
    twice = invoke("batch", "import", str(out), "--config", str(offline))
    assert "0 answers imported" in twice, twice
    assert "12 already in the cache" in twice, twice
    following = invoke("batch", "export", str(run_dir), "--config", str(offline))
    assert following.startswith("round 2: "), following
    assert refused not in (run_dir / "batch" / "round-002.jsonl").read_text()
    assert "1 request(s) refused by an earlier batch are not exported" in following


def test_answers_from_another_model_are_refused(tmp_path: Path):
    """Issue 27, 4: a batch output whose bodies name another model was imported
    silently, and the cache served those answers under the configured model's keys.
    Now the import stops at the first such line and stores nothing; a dated snapshot
    of the model (as providers name them) is the model."""
    offline = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", tmp_path / "c.sqlite")
    run_dir = tmp_path / "run"
    invoke(*RUN, "--config", str(offline), "--out", str(run_dir), "--plan-only")
    first = invoke("batch", "export", str(run_dir), "--config", str(offline))
    out = tmp_path / "out.jsonl"
    run_batch(run_dir / "batch" / "round-001.jsonl", out)
    lines = [json.loads(text) for text in out.read_text().splitlines()]
    other = tmp_path / "other.jsonl"
    lines[1]["response"]["body"]["model"] = "gpt-other-9"
    other.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["batch", "import", str(other), "--config", str(offline)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"error: {other}:2: answered by model 'gpt-other-9', not '{MODEL}', the model the "
        "request was exported for: its answers would be cached as that model's (export "
        "again with the backend's model set to the one that answers)"
    )
    again = invoke("batch", "export", str(run_dir), "--config", str(offline))
    # nothing was stored: the same round asks for the same requests again
    assert again.split(" -> ")[0] == first.split(" -> ")[0], (first, again)
    assert again.startswith("round 1: 13 requests"), again  # 1 writer, 6 + 6 of full
    lines[1]["response"]["body"]["model"] = f"{MODEL}-2024-08-06"
    other.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "13 answers imported" in invoke("batch", "import", str(other), "--config", str(offline))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "{run}: not a run directory ({run}/config.json: missing; not a run directory)"),
        ("deterministic", "{run}: its plan has no LLM stage"),
        ("no-model", "set model = ... for this backend"),
        ("old-layout", "{run}: its LLM stage was planned with prompt layout 1; this version"),
    ],
)
def test_export_refuses_what_it_cannot_batch_in_one_line(tmp_path: Path, setup: str, message: str):
    run_dir = tmp_path / "run"
    cfg = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", tmp_path / "c.sqlite")
    if setup == "deterministic":
        invoke("run", "--preset", "cca-pilot", "--conditions", "tail", "--transforms",
               "identity", "--quiet", "--workers", "1", "--out", str(run_dir))  # fmt: skip
    elif setup == "no-model":
        invoke(*RUN, "--config", str(cfg), "--out", str(run_dir), "--plan-only")
        cfg.write_text(f'cache_path = "{tmp_path / "c.sqlite"}"\n[backends.llm]\n'
                       'base_url = "http://127.0.0.1:9/v1"\n')  # fmt: skip
    elif setup == "old-layout":  # planned before prompts had a layout number
        invoke(*RUN, "--config", str(cfg), "--out", str(run_dir), "--plan-only")
        planned = json.loads((run_dir / "config.json").read_text())
        del planned["config"]["llm"]["prompt_layout"]
        (run_dir / "config.json").write_text(json.dumps(planned))
    result = runner.invoke(app, ["batch", "export", str(run_dir), "--config", str(cfg)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    assert message.format(run=run_dir) in lines[0], lines[0]


SECRET = "sk-TESTKEYabcdef0123456789SECRET"


def exported_round(tmp_path: Path, key_env: str | None = None) -> tuple[Path, Path, list[str]]:
    """(config, cache, the output lines answering round 1) of a planned offline run."""
    cache = tmp_path / "c.sqlite"
    cfg = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", cache)
    if key_env is not None:
        cfg.write_text(cfg.read_text() + f'api_key_env = "{key_env}"\n')
    run_dir = tmp_path / "run"
    invoke(*RUN, "--config", str(cfg), "--out", str(run_dir), "--plan-only")
    invoke("batch", "export", str(run_dir), "--config", str(cfg))
    out = tmp_path / "answers.jsonl"
    run_batch(run_dir / "batch" / "round-001.jsonl", out)
    return cfg, cache, out.read_text().splitlines()


def import_error(*args: str) -> str:
    """The one line an import refused with (exit 2, no traceback)."""
    result = runner.invoke(app, ["batch", "import", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def audit_process(*args: str, timeout: float = 60) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in KiB) of the real command in a process of its own
    (``VmHWM``: ``ru_maxrss`` would count the forked test process before its exec)."""
    probe = (
        "import re, sys\n"
        "from audit.cli import main\n"
        "sys.argv = ['audit', *sys.argv[1:]]\n"
        "try:\n    main()\n"
        "except SystemExit as end:\n    code = end.code\n"
        "else:\n    code = 0\n"
        "status = open('/proc/self/status').read()\n"
        "print(re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=timeout
    )
    *message, peak = done.stderr.strip().splitlines()
    return done.returncode, "\n".join(message), int(peak)


def test_an_over_long_line_is_refused_while_it_is_read_in_bounded_memory(tmp_path: Path):
    cache = tmp_path / "c.sqlite"
    cfg = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", cache)
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as sink:  # a blank line, then 1 GiB of NULs (sparse) unbroken
        sink.write(b"\n")
        sink.truncate(1 + 1024 * 1024 * 1024)
    code, message, peak_kib = audit_process("batch", "import", str(huge), "--config", str(cfg))
    assert code == 2, message
    assert message == (
        f"error: {huge}:2: a line longer than 16777216 bytes (16 MiB), refused without "
        "reading the rest: not a batch output line"
    )
    # the interpreter and the CLI (the engine's imports) take under 200 MiB, the line
    # read up to the cap 16 MiB; the whole line held would be over 1 GiB more
    assert peak_kib < 400 * 1024, peak_kib


def test_an_import_reads_only_a_regular_file(tmp_path: Path):
    cfg = config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", tmp_path / "c.sqlite")
    fifo = tmp_path / "answers.fifo"
    os.mkfifo(fifo)
    # no writer ever opens it: a reader that waited for one would hang (the timeout)
    code, message, _ = audit_process("batch", "import", str(fifo), "--config", str(cfg))
    assert code == 2, message
    assert message == (
        f"error: {fifo}: not a regular file (a FIFO), so it is not read: give the batch "
        "output file itself"
    )
    assert import_error("/dev/zero", "--config", str(cfg)) == (
        "error: /dev/zero: not a regular file (a character device), so it is not read: "
        "give the batch output file itself"
    )
    assert import_error(str(tmp_path), "--config", str(cfg)).startswith(
        f"error: {tmp_path}: not a regular file (a directory)"
    )
    missing = tmp_path / "missing.jsonl"
    assert import_error(str(missing), "--config", str(cfg)) == f"error: {missing}: no such file"


def test_a_deeply_nested_line_is_one_line_naming_it(tmp_path: Path):
    cfg, _, good = exported_round(tmp_path)
    deep = tmp_path / "deep.jsonl"
    depth = 100_000
    deep.write_text(good[0] + "\n" + '{"custom_id":' + "[" * depth + "]" * depth + "}\n")
    assert import_error(str(deep), "--config", str(cfg)) == (
        f"error: {deep}:2: JSON nested too deeply to be an output line"
    )
    inside = json.loads(good[0])  # as deep inside a 200 answer's body
    inside["response"]["body"]["choices"][0]["message"]["content"] = "@"
    text = json.dumps(inside).replace('"@"', "[" * depth + "]" * depth)
    deep.write_text(text + "\n")
    message = import_error(str(deep), "--config", str(cfg))
    assert message.startswith(f"error: {deep}:1: "), message


def test_no_api_key_is_stored_or_printed_by_an_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BATCH_TEST_KEY", SECRET)
    cfg, cache, good = exported_round(tmp_path, key_env="BATCH_TEST_KEY")
    piece = SECRET[5:17]  # 12 characters of it, as a server cuts a header short
    answered = json.loads(good[0])
    message = answered["response"]["body"]["choices"][0]["message"]
    message["content"] = f"the header was Bearer {SECRET}; also {piece}"
    message["reasoning_content"] = f"thinking about {SECRET}"
    answered["response"]["body"]["model"] = f"model-{SECRET}"
    refused = json.loads(good[-1])
    refused["response"] = {"status_code": 401, "request_id": "r", "body": None}
    refused["error"] = {"message": f"invalid key {SECRET} (Authorization: Bearer {piece})"}
    out = tmp_path / "keyed.jsonl"
    out.write_text(json.dumps(answered) + "\n" + json.dumps(refused) + "\n")

    bad = tmp_path / "bad.jsonl"  # a refused line's error shows no key either
    bad.write_text(json.dumps({"custom_id": f"{SECRET}-not-a-key"}) + "\n")
    line = import_error(str(bad), "--config", str(cfg))
    assert line.startswith(f"error: {bad}:1: custom_id '***-not-a-key' is not a cache key"), line

    line = import_error(str(out), "--config", str(cfg))  # another model: refused, scrubbed
    assert f"{out}:1: answered by model 'model-***', not '{MODEL}'" in line, line
    answered["response"]["body"]["model"] = MODEL
    out.write_text(json.dumps(answered) + "\n" + json.dumps(refused) + "\n")
    output = invoke("batch", "import", str(out), "--config", str(cfg))
    assert "1 answers imported" in output, output
    assert "1 refused by the batch" in output, output
    assert SECRET[:8] not in output
    with sqlite3.connect(cache) as db:
        stored = "\n".join(db.iterdump())
    assert "the header was Bearer ***; also ***" in stored
    assert "invalid key *** (Authorization: Bearer ***)" in stored
    for window in range(len(SECRET) - 7):  # no 8 characters of the key anywhere
        assert SECRET[window : window + 8] not in stored, SECRET[window : window + 8]
