"""The API key never leaves the environment: not in a run directory, the response cache,
logs, reports, command output or error messages.

A random key (with characters that URL- and base64-encoding change) is put in an
environment variable named by ``api_key_env``; the backend points at tests/_fault_proxy.py
(forwarding unchanged) in front of tests/_fake_openai.py (a FAKE server that accepts any
key: no model is needed to check where a key goes).  The proxy and the fake check that the
key *is* sent, as ``Authorization: Bearer``.  Then every file under the test's directory
(run directory, report, cache database with its WAL, HOME and XDG cache, config), the
command output and the captured log records are searched for the key as bytes, in base64
(every alignment, standard and URL-safe), URL-encoded and hex: zero hits.  A second proxy
rejects the key with a 401 whose message echoes the ``Authorization`` header (a careless
proxy): the error messages, rows and check output must not carry it either.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from audit.backends import BackendClient, BackendConfig
from audit.backends._determinism import PROBE_REQUESTS
from audit.backends._secrets import Scrubber, scrub
from audit.cli import app
from audit.rundir import RunStore
from tests._fake_openai import FakeOpenAI, serving_in_thread
from tests._fault_proxy import FaultProxy
from tests._rows import result_csv
from tests.audit.backends.test_backends_hardening import RawServer, completion

runner = CliRunner()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """The FAKE server in a thread of its own (the CLI runs its own event loop)."""
    with serving_in_thread("fake-model") as server:
        yield server


def encodings(key: str) -> dict[str, bytes]:
    """The key as it could end up in a file: raw, base64 (any alignment), URL-encoded, hex."""
    raw = key.encode()
    forms = {"raw": raw, "hex": raw.hex().encode(), "HEX": raw.hex().upper().encode()}
    forms["url"] = quote(key, safe="").encode()
    forms["url_plus"] = quote_plus(key).encode()
    for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
        forms[name] = encode(raw).rstrip(b"=")
        for offset in (1, 2):  # the key inside a longer string, e.g. "Bearer <key>"
            encoded = encode(b"\0" * offset + raw + b"\0\0\0")
            forms[f"{name}+{offset}"] = encoded[4:-8]  # only characters set by the key alone
    assert all(len(f) >= 16 for f in forms.values())
    return forms


def hits(blob: bytes, forms: dict[str, bytes], where: str) -> list[str]:
    return [f"{where}: {name}" for name, form in forms.items() if form in blob]


def scan(root: Path, texts: dict[str, str], forms: dict[str, bytes]) -> tuple[list[str], int]:
    found: list[str] = []
    files = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            files += 1
            found += hits(path.read_bytes(), forms, str(path.relative_to(root)))
    for where, text in texts.items():
        found += hits(text.encode("utf-8", "replace"), forms, where)
    return found, files


def output_of(result: object) -> str:
    parts = [getattr(result, "output", "")]
    with contextlib.suppress(ValueError, AttributeError):
        parts.append(result.stderr)  # type: ignore[attr-defined]
    exception = getattr(result, "exception", None)
    if exception is not None and not isinstance(exception, SystemExit):
        parts.append(repr(exception))
    return "\n".join(p for p in parts if p)


def test_api_key_is_sent_and_never_stored_or_shown(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
):
    caplog.set_level(logging.DEBUG)
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith("MEMORY_AUDIT_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    key = f"sk-test-{secrets.token_urlsafe(24)}/+={secrets.token_hex(8)}"
    monkeypatch.setenv(variable, key)
    forms = encodings(key)
    texts: dict[str, str] = {}

    with (
        FaultProxy(fake.base_url) as good,
        FaultProxy(fake.base_url, require_api_key="the-right-key-is-another-one") as rejecting,
    ):
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "cache" / "responses.sqlite"}"\n'
            "[backends.secret]\n"
            f'base_url = "{good.base_url}"\n'
            'model = "fake-model"\n'
            f'api_key_env = "{variable}"\n'
            "max_retries = 0\n"
            "[backends.rejecting]\n"
            f'base_url = "{rejecting.base_url}"\n'
            'model = "fake-model"\n'
            f'api_key_env = "{variable}"\n'
            "max_retries = 0\n"
        )
        assert key not in config.read_text()

        def cli(*args: str) -> object:
            result = runner.invoke(app, list(args))
            texts[" ".join(args[:3])] = output_of(result)
            return result

        common = [
            "--conditions", "frontier", "--transforms", "identity", "--llm-sample", "1",
            "--repeats", "1", "--llm-conditions", "frontier", "--llm-transforms", "identity",
            "--workers", "1", "--quiet", "--config", str(config),
        ]  # fmt: skip
        run = cli("run", "--reader", "secret", "--out", str(tmp_path / "run"), *common)
        assert run.exit_code == 0, texts
        report = cli("report", str(tmp_path / "run"))
        assert report.exit_code == 0, texts
        assert (tmp_path / "run" / "report" / "report.html").is_file()
        cli("backends", "list", "--config", str(config))
        cli("backends", "check", "secret", "--config", str(config))
        cli("cache", "stats", "--config", str(config))
        cli("cache", "explain", "--config", str(config))
        # the server rejects the key and echoes it in its error message
        rejected = cli("run", "--reader", "rejecting", "--out", str(tmp_path / "run-401"), *common)
        assert rejected.exit_code == 3, texts  # incomplete: every LLM read NA
        cli("report", str(tmp_path / "run-401"))

        # the key is sent, as a bearer token, on every request that reached a server
        assert good.authorization_seen
        assert set(good.authorization_seen) == {f"Bearer {key}"}
        assert rejecting.authorization_seen
        assert set(rejecting.authorization_seen) == {f"Bearer {key}"}
    assert fake.headers
    assert {h.get("Authorization") for h in fake.headers} == {f"Bearer {key}"}

    # the 401 path really ran and carried the echoed header into an error message
    store = RunStore(tmp_path / "run-401")
    try:
        errors = [r["error"] for r in store.rows() if r["reader"] == "rejecting"]
    finally:
        store.close()
    assert len(errors) == 12  # six reads of frontier, six of full (a reader reads full first)
    assert all(e and "HTTP 401" in e and "invalid credentials" in e for e in errors), errors
    assert all("***" in e for e in errors), errors  # the echoed key, scrubbed

    texts["log records"] = caplog.text
    found, files = scan(tmp_path, texts, forms)
    assert files >= 10, "nothing was written?"
    assert any(p.name.startswith("responses.sqlite") for p in (tmp_path / "cache").iterdir())
    assert not found, found


def test_backends_check_does_not_show_a_key_the_server_echoes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI
):
    """``audit backends check`` against a server that rejects the key with a 401 whose
    message echoes the Authorization header: the check output must not carry the key
    (docs/backends.md: error texts never contain the API key)."""
    monkeypatch.chdir(tmp_path)
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    key = f"sk-test-{secrets.token_urlsafe(24)}/+={secrets.token_hex(8)}"
    monkeypatch.setenv(variable, key)
    with FaultProxy(fake.base_url, require_api_key="another-key") as rejecting:
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
            "[backends.rejecting]\n"
            f'base_url = "{rejecting.base_url}"\n'
            'model = "fake-model"\n'
            f'api_key_env = "{variable}"\n'
            "max_retries = 0\n"
        )
        result = runner.invoke(app, ["backends", "check", "rejecting", "--config", str(config)])
        assert set(rejecting.authorization_seen) == {f"Bearer {key}"}
    text = output_of(result)
    assert result.exit_code == 1, text
    assert "401" in text, text
    found, _ = scan(tmp_path, {"backends check": text}, encodings(key))
    assert not found, text


# -- the key in pieces: scrubbed from everything a server sends back (issue 15, item 7) ------


def windows(key: str, size: int = 8) -> set[str]:
    """Every piece of the key that must never be seen (a longer piece contains one)."""
    return {key[i : i + size] for i in range(len(key) - size + 1)}


def pieces_in(root: Path, texts: dict[str, str], key: str) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            blob = path.read_bytes()
            found += [
                f"{path.relative_to(root)}: {w!r}" for w in windows(key) if w.encode() in blob
            ]
    for where, text in texts.items():
        found += [f"{where}: {w!r}" for w in windows(key) if w in text]
    return found


def brute_scrub(text: str, key: str) -> str:
    """The definition: every character inside an 8+ character piece of the key is masked,
    each run of masked characters becomes one ``***``."""
    covered = [False] * len(text)
    for i in range(len(text) - 7):
        if text[i : i + 8] in key:
            covered[i : i + 8] = [True] * 8
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            out.append("***")
            while i < len(text) and covered[i]:
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(alphabet="abcd/+=-", min_size=8, max_size=40),
    cuts=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=5),
    filler=st.lists(st.text(alphabet="abcdxy /+", max_size=9), min_size=6, max_size=6),
)
def test_scrub_masks_exactly_the_pieces_of_8_or_more(
    key: str, cuts: list[tuple[int, int]], filler: list[str]
):
    text = filler[0] + "".join(key[a:b] + filler[i + 1] for i, (a, b) in enumerate(cuts))
    assert Scrubber(key)(text) == brute_scrub(text, key)
    assert scrub(text, key) == brute_scrub(text, key)


def test_scrub_examples_and_the_client_helper():
    key = "sk-test-ABCDEFGHIJKLMNOP/+=0123"
    client = BackendClient(
        "b", BackendConfig(base_url="http://h/v1"), base_urls=["http://h/v1"], model="m",
        api_key=key,
    )  # fmt: skip
    assert client.scrub(f"whole {key} end") == "whole *** end"
    assert client.scrub("cut EFGHIJKLMN. here") == "cut ***. here"  # 10 characters of it
    assert client.scrub("short EFGHIJK stays") == "short EFGHIJK stays"  # 7: ordinary text
    assert client.scrub(f"{key[:12]} and {key[-8:]}") == "*** and ***"
    assert Scrubber("short")("a short one") == "a *** one"  # a tiny key: whole matches
    assert Scrubber(None)("anything") == Scrubber("")("anything") == "anything"


def test_scrub_is_linear_in_the_text_not_quadratic():
    key = "sk-" + secrets.token_urlsafe(48)
    scrubber = Scrubber(key)
    worst = (key[5:40] + "x") * (4_000_000 // 36)  # pieces everywhere: the costly case
    prose = "The quick brown fox jumps over the lazy dog. " * 90_000
    started = time.perf_counter()
    assert set(scrubber(worst).split("x")) == {"***", ""}
    assert scrubber(prose) == prose
    assert time.perf_counter() - started < 20  # ~2 s here; quadratic would take hours


class EchoingServer:
    """A server that puts pieces of the bearer key it gets into a 200 answer: the content
    (whole key, a 10-character piece, the last 9 characters), the reasoning and the model
    name, and base64 and hex forms of it (a careless or hostile proxy)."""

    @staticmethod
    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = completion(
            {
                "role": "assistant",
                "content": f'{{"values": {{}}}} {key} also {key[3:13]} and {key[-9:]}; '
                f"encoded {base64.b64encode(f'Bearer {key}'.encode()).decode()} "
                f"{base64.urlsafe_b64encode(key.encode()).decode()} {key.encode().hex()}",
                "reasoning": f"I was told {key[10:30]}",
            },
            model=f"m-{key[2:12]}",
        )
        return web.json_response(body)


def test_a_key_echoed_in_a_200_answer_is_stored_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith("MEMORY_AUDIT_"):
            monkeypatch.delenv(name)
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    key = f"sk-test-{secrets.token_urlsafe(24)}"
    monkeypatch.setenv(variable, key)
    texts: dict[str, str] = {}
    with RawServer({("POST", "/v1/chat/completions"): EchoingServer.chat}) as server:
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "cache" / "responses.sqlite"}"\n'
            f'[backends.echo]\nbase_url = "{server.base_url}"\nmodel = "m"\n'
            f'api_key_env = "{variable}"\nmax_retries = 0\n'
        )
        common = [
            "--conditions", "frontier", "--transforms", "identity", "--llm-sample", "1",
            "--repeats", "1", "--llm-conditions", "frontier", "--llm-transforms", "identity",
            "--workers", "1", "--quiet", "--config", str(config),
        ]  # fmt: skip
        run = runner.invoke(
            app, ["run", "--reader", "echo", "--out", str(tmp_path / "run"), *common]
        )
        texts["run"] = output_of(run)
        assert run.exit_code == 0, texts
        # six reads of frontier and six of full (every LLM reader reads full first), and
        # the determinism probe's requests sent twice (echoed keys too)
        assert server.calls["/v1/chat/completions"] == 12 + 2 * PROBE_REQUESTS
    for args in (["report", str(tmp_path / "run")], ["cache", "explain", "--config", str(config)]):
        texts[args[0]] = output_of(runner.invoke(app, args))
    store = RunStore(tmp_path / "run")
    try:
        rows = [r for r in store.rows() if r["reader"] == "echo"]
    finally:
        store.close()
    assert len(rows) == 12
    assert all("***" in (r["raw_answer"] or "") for r in rows), rows  # the echo, scrubbed
    assert {r["reader_model"] for r in rows} == {"m-***"}
    found = pieces_in(tmp_path, texts, key)
    assert not found, found
    found, _ = scan(tmp_path, texts, encodings(key))  # issue 27: base64 and hex echoes too
    assert not found, found


def test_a_key_echoed_by_the_model_list_is_not_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI
):
    """No ``model`` configured: the client asks ``/v1/models``, whose 401 echoes the
    ``Authorization`` header; ``audit run`` and ``audit backends check`` print the start
    error, without the key."""
    monkeypatch.chdir(tmp_path)
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    key = f"sk-test-{secrets.token_urlsafe(24)}"
    monkeypatch.setenv(variable, key)
    texts: dict[str, str] = {}
    with FaultProxy(fake.base_url, require_api_key="another-key") as rejecting:
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
            f'[backends.rejecting]\nbase_url = "{rejecting.base_url}"\n'
            f'api_key_env = "{variable}"\nmax_retries = 0\n'
        )
        run = runner.invoke(
            app,
            ["run", "--reader", "rejecting", "--llm-conditions", "frontier", "--conditions",
             "frontier", "--transforms", "identity", "--llm-sample", "1", "--workers", "1",
             "--quiet", "--config", str(config), "--out", str(tmp_path / "run")],
        )  # fmt: skip
        texts["run"] = output_of(run)
        check = runner.invoke(app, ["backends", "check", "rejecting", "--config", str(config)])
        texts["check"] = output_of(check)
        assert set(rejecting.authorization_seen) == {f"Bearer {key}"}
    assert run.exit_code == 1, texts
    assert "401" in texts["run"], texts
    assert "invalid credentials: Bearer ***" in texts["run"], texts
    assert check.exit_code == 1, texts
    assert "FAIL rejecting start" in texts["check"], texts
    found = pieces_in(tmp_path, texts, key)
    assert not found, found


EXTERNAL_MEMORY = """\
import json, os, sys
known = open(sys.argv[1]).read().strip()  # a program that has the key some other way
with open(sys.argv[2], "a") as seen:
    seen.write(f"{len(os.environ.get(sys.argv[3], ''))}\\n")
n = 0
for line in sys.stdin:
    n += 1
    request = json.loads(line)
    if request["budget"] == 600 and n == 2:
        print(f"stderr {known}", file=sys.stderr, flush=True)
        sys.exit(3)
    if request["budget"] == 600:
        print(json.dumps({"memory": "a memory holding no key"}), flush=True)
        continue
    if request["budget"] == 700:
        print(json.dumps({"error": f"failed with {known[2:30]}"}), flush=True)
        continue
    print(json.dumps({"memory": f"a memory holding {known} and {known[5:20]}"}), flush=True)
"""


def test_a_cmd_program_gets_no_configured_key_and_what_it_says_is_scrubbed(tmp_path: Path):
    """Issue 27, 3: a `cmd:` program inherited the whole environment, API keys included,
    and its memories, errors and stderr went unscrubbed into results.csv, the parquet,
    the store, run.log and the report.  Now a key the backends configuration names is
    not in its environment (`env=NAME` passes it deliberately) and every piece of a key
    it writes anyway (a memory, an error, its stderr) is scrubbed."""
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    key = f"sk-test-{secrets.token_urlsafe(24)}"
    (tmp_path / "key.txt").write_text(key)
    program = tmp_path / "memory.py"
    program.write_text(EXTERNAL_MEMORY)
    (tmp_path / "audit.toml").write_text(
        f'[backends.remote]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        f'api_key_env = "{variable}"\n'
    )
    pairs = tmp_path / "pairs.jsonl"
    from histories import PRESETS, generate

    pairs.write_text("".join(p.to_json() + "\n" for p in list(generate(PRESETS["cca-pilot"]))[:2]))
    base = f"{sys.executable} {program} {tmp_path / 'key.txt'}"
    conditions = (
        f"cmd:{base} {tmp_path / 'withheld.txt'} {variable},"
        f"cmd:run={base} {tmp_path / 'passed.txt'} {variable},env={variable}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_AUDIT_")}
    env[variable] = key
    out = tmp_path / "run"
    texts = {}
    for args in (
        ["run", "--pairs", str(pairs), "--conditions", conditions, "--transforms", "identity",
         "--budget", "600,700,800", "--workers", "1", "--out", str(out)],
        ["report", str(out)],
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "audit", *args], capture_output=True, text=True,
            cwd=tmp_path, env=env, timeout=300,
        )  # fmt: skip
        texts[args[0]] = done.stdout + done.stderr
        assert done.returncode == 3, texts
    assert set((tmp_path / "withheld.txt").read_text().split()) == {"0"}
    assert set((tmp_path / "passed.txt").read_text().split()) == {str(len(key))}
    import pandas as pd

    rows = pd.read_csv(result_csv(out))
    assert rows["error"].str.contains("stderr ***", regex=False).any(), rows["error"]
    assert rows["error"].str.contains("failed with ***", regex=False).any(), rows["error"]
    held = rows[rows["budget"] == 800]  # a memory holding the key: NA, never rewritten
    assert held["error"].str.contains("holds a configured API key").all(), held["error"]
    (tmp_path / "key.txt").unlink()
    found = pieces_in(tmp_path, texts, key)
    assert not found, found


KEEP_NEWEST = """\
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if request["budget"] == 700:
        print(json.dumps({"error": "bad state"}), flush=True)
        continue
    records = request["chunk"]["records"]
    print(json.dumps({"memory": "\\n".join(json.dumps(r, separators=(",", ":"))
                                            for r in records)}), flush=True)
"""


def test_a_memory_holding_a_key_is_na_never_rewritten_and_scored(tmp_path: Path):
    """Found attacking issue 27: a key that occurs in an external system's memory (here
    a dummy key that every record line contains) was scrubbed out of the memory, which
    was then scored: right reads became wrong, exit 0.  Such a memory is NA now, naming
    why; and an ``{"error"}`` answer's cause is its message, not the audit's class name."""
    variable = f"AUDIT_TEST_KEY_{secrets.token_hex(4).upper()}"
    program = tmp_path / "memory.py"
    program.write_text(KEEP_NEWEST)
    (tmp_path / "audit.toml").write_text(
        f'[backends.remote]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        f'api_key_env = "{variable}"\n'
    )
    from histories import PRESETS, generate

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(p.to_json() + "\n" for p in list(generate(PRESETS["cca-pilot"]))[:2]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_AUDIT_")}
    env[variable] = '"op":"set"'
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "audit", "run", "--pairs", str(pairs), "--conditions",
         f"cmd:{sys.executable} {program}", "--transforms", "identity", "--budget", "600,700",
         "--workers", "1", "--quiet", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    import pandas as pd

    rows = pd.read_csv(result_csv(out))
    kept = rows[rows["budget"] == 600]
    assert set(kept["outcome"]) == {"na"}, kept["outcome"].value_counts()
    assert kept["error"].str.contains("holds a configured API key").all()
    failed = rows[rows["budget"] == 700]
    assert set(failed["outcome"]) == {"error"}
    assert set(failed["error"]) == {f"cmd:{sys.executable} {program} reported an error: bad state"}
