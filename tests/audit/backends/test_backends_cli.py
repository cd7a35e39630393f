"""``audit backends ...`` and ``audit cache ...``.

``audit backends check local`` runs against the real embedded server (shared with the other
backend tests).  The failing check uses tests/_fake_openai.py, a FAKE server, on purpose: it
plays a server that ignores the JSON schema, which no real server does on demand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audit.backends import ResponseCache
from audit.backends._cache import canonical_request
from audit.cli import app
from compressors import ChatResponse
from tests._backends_support import LocalModel, local_model
from tests._fake_openai import FakeOpenAI, Reply, serving_in_thread

__all__ = ["local_model"]

runner = CliRunner()


def test_backends_check_local(workdir: Path, local_model: LocalModel):
    result = runner.invoke(app, ["backends", "check", "local"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[2].rstrip(":") for line in lines] == [
        "start",
        "health",
        "models",
        "json_schema",
        "reasoning",
        "determinism",
    ]
    assert all(line.startswith("ok   local ") for line in lines)
    assert "4/4 answers identical" in lines[-1]  # the reproducible default: one slot
    assert local_model.server.base_url in result.output  # the session's server, shared
    assert "serves 'SmolLM2-135M-Instruct-Q4_1' (context 8192 tokens)" in result.output
    assert "json_schema honoured" in result.output


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAI]:
    """The FAKE server in a thread of its own (the CLI runs its own event loop)."""
    with serving_in_thread("m") as server:
        yield server


def test_backends_check_names_each_failure(workdir: Path, fake_server: FakeOpenAI):
    fake_server.script(
        "Reply with the single word hello, and nothing else.", Reply(content="hello")
    )
    fake_server.health_status = 503
    (workdir / "audit.toml").write_text(
        f'[backends.ignores]\nbase_url = "{fake_server.base_url}"\nmodel = "other"\n'
    )
    result = runner.invoke(app, ["backends", "check", "ignores"])
    assert result.exit_code == 1
    lines = {line.split()[2].rstrip(":"): line for line in result.output.splitlines()}
    assert lines["health"].startswith("FAIL ignores health: http://127.0.0.1:")
    assert "expected HTTP 200, got HTTP 503" in lines["health"]
    assert "expected model 'other' to be served, got ['m']" in lines["models"]
    assert lines["json_schema"].startswith("FAIL")
    assert 'got "hello"' in lines["json_schema"]
    assert "ignores the schema" in lines["json_schema"]
    assert not any(k.startswith("guided_") for k in fake_server.bodies[-1])


def test_backends_check_unreachable_and_unknown(workdir: Path):
    (workdir / "audit.toml").write_text('[backends.gone]\nbase_url = "http://127.0.0.1:9/v1"\n')
    result = runner.invoke(app, ["backends", "check", "gone"])
    assert result.exit_code == 1
    assert result.output.startswith("FAIL gone start: http://127.0.0.1:9/v1: ")
    result = runner.invoke(app, ["backends", "check", "nope"])
    assert result.exit_code == 2
    assert "no backend named 'nope'" in result.output
    (workdir / "audit.toml").write_text(
        '[backends.gone]\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[backends.qwen]\nkind = "local"\nmodel_path = "/models/qwen-0.5b.gguf"\n'
    )
    result = runner.invoke(app, ["backends", "list"])
    assert result.exit_code == 0
    assert re.search(r"^gone\s+openai\s+reader\+writer\s+\(the one served\)", result.output, re.M)
    assert re.search(r"^qwen\s+local\s+reader\+writer\s+qwen-0\.5b\s+@ 127", result.output, re.M)
    assert re.search(r"^local\s+local\s+reader\+writer\s+SmolLM2-135M", result.output, re.M)


def test_backends_list_shows_control_characters_of_audit_toml_as_text(workdir: Path):
    """Issue 27 (also): a model name in audit.toml holding an escape sequence or a
    newline reached the terminal raw (it could set the window title or fake a line)."""
    (workdir / "audit.toml").write_text(
        '[backends.odd]\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m\\u001b]0;owned\\u0007\\nFAKE line"\n'
    )
    result = runner.invoke(app, ["backends", "list"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "\x07" not in result.output
    assert len(result.output.strip().splitlines()) == 2, result.output  # odd, and local
    assert "FAKE line" in result.output


def fill(path: Path) -> list[str]:
    """Three cached answers (each first missed) and one unanswered miss that differs from
    an entry only by its seed."""
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "memory A"},
        ],
        "temperature": 0.0,
        "seed": 3,
    }
    with ResponseCache(path) as cache:
        keys = []
        for tag, seed, model in (
            ("reader@1", 3, "m"),
            ("writer:prose@2", 3, "m"),
            ("reader@1", 3, "n"),
        ):
            request = canonical_request({**body, "seed": seed, "model": model}, repeat=0, tag=tag)
            cache.put(request, ChatResponse(content=f"answer {tag} {model}"))
            keys.append(request.key)
        missed = canonical_request({**body, "seed": 4}, repeat=0, tag="reader@1")
        cache.record_miss(missed)
        keys.append(missed.key)
    return keys


def test_cache_stats_explain_prune_clear(workdir: Path):
    path = workdir / "c.sqlite"
    keys = fill(path)
    result = runner.invoke(app, ["cache", "stats", "--cache", str(path)])
    assert result.exit_code == 0, result.output
    assert "3 entries" in result.output
    assert "4 misses logged" in result.output
    assert "model m: 2 entries" in result.output
    assert "tag writer:prose@2: 1 entries" in result.output

    result = runner.invoke(app, ["cache", "explain", "--last", "1", "--cache", str(path)])
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[0] == f"{keys[3][:16]}  nearest entry {keys[0][:16]} differs in:"
    )
    assert result.output.splitlines()[1:] == ["    seed: 4 (entry: 3)"]
    result = runner.invoke(app, ["cache", "explain", keys[3][:8], "--cache", str(path)])
    assert "seed: 4 (entry: 3)" in result.output
    result = runner.invoke(app, ["cache", "explain", keys[0][:8], "--cache", str(path)])
    assert "a new request" in result.output  # it missed because nothing like it was cached

    result = runner.invoke(app, ["cache", "prune", "--cache", str(path)])
    assert result.exit_code == 2
    assert "at least one of" in result.output
    result = runner.invoke(app, ["cache", "prune", "--model", "n", "--cache", str(path)])
    assert result.exit_code == 0
    assert "pruned 1 entries, 2 left" in result.output
    result = runner.invoke(app, ["cache", "prune", "--older-than", "1d", "--cache", str(path)])
    assert "pruned 0 entries, 2 left" in result.output
    result = runner.invoke(
        app, ["cache", "prune", "--older-than", "0s", "--tag", "writer:", "--cache", str(path)]
    )
    assert "pruned 1 entries, 1 left" in result.output

    result = runner.invoke(app, ["cache", "clear", "--cache", str(path)], input="n\n")
    assert result.exit_code == 1
    result = runner.invoke(app, ["cache", "clear", "--yes", "--cache", str(path)])
    assert result.exit_code == 0
    assert "cleared 1 entries" in result.output
    assert "0 entries" in runner.invoke(app, ["cache", "stats", "--cache", str(path)]).output


def test_cache_commands_use_the_configured_path(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_AUDIT_CACHE_PATH", str(workdir / "env.sqlite"))
    result = runner.invoke(app, ["cache", "stats"])
    assert result.exit_code == 2
    assert f"no cache at {workdir / 'env.sqlite'}" in result.output
    fill(workdir / "env.sqlite")
    assert "3 entries" in runner.invoke(app, ["cache", "stats"]).output


def test_the_tiny_model_note_follows_the_model_not_the_backend_name():
    from audit.backends import SMOLLM2
    from audit.cli._console import llm_stage_line

    stage = {"sample": 1, "repeats": 1, "reader": "local", "reader_model": SMOLLM2.model_id}
    assert "The embedded model is tiny" in llm_stage_line(stage)
    bigger = {**stage, "reader_model": "qwen-7b"}  # the local backend serving another GGUF
    assert "tiny" not in llm_stage_line(bigger)
    elsewhere = {**stage, "reader": "cpu", "reader_model": SMOLLM2.model_id}
    assert "The embedded model is tiny" in llm_stage_line(elsewhere)
