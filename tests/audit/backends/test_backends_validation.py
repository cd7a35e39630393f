"""What the configuration refuses before any request, and how it says so.

A base URL must be one a request can go to (http or https, a host, a port 1-65535, no
credentials, query or fragment); an API key must be a header value (no CR, LF or other
control character).  Each refusal names the backend and the field and never echoes a
key: a key pasted into ``api_key_env`` instead of a variable's name is not printed back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audit.backends import (
    BackendClient,
    BackendConfig,
    BackendConfigError,
    BackendStartError,
    load_config,
    resolve_api_key,
)
from audit.cli import app


def config_error(workdir: Path, table: str) -> BackendConfigError:
    (workdir / "audit.toml").write_text(f"[backends.remote]\nmodel = 'm'\n{table}\n")
    with pytest.raises(BackendConfigError) as caught:
        load_config()
    return caught.value


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:99999/v1", "port out of range 1-65535"),
        ("http://127.0.0.1:0/v1", "port out of range 1-65535"),
        ("http://127.0.0.1:80a/v1", "not a valid URL"),
        ("ftp://host/v1", "the scheme must be http or https"),
        ("http:///v1", "no host"),
        ("http://exa\\nmple:8000/v1", "whitespace or a control character"),
        ("http://host:8000/v1 extra", "whitespace or a control character"),
        ("http://user:sk-hunter2-secret@host/v1", "credentials"),
        ("http://host/v1?api_key=sk-hunter2-secret", "no query"),
        ("http://host/v1#sk-hunter2-secret", "no query (?...) or fragment"),
    ],
)
def test_an_unusable_base_url_is_refused_naming_backend_and_field(
    workdir: Path, url: str, reason: str
):
    error = config_error(workdir, f'base_url = "{url}"')
    assert error.field == "backends.remote.base_url"
    assert reason in str(error)
    assert "hunter2" not in str(error)  # a URL may carry a secret: never echoed


def test_the_url_at_fault_in_a_list_is_named_by_its_place(workdir: Path):
    error = config_error(workdir, 'base_url = ["http://a:8000/v1", "http://b:123456/v1"]')
    assert "URL 2 of 2: not a valid URL (port out of range 1-65535)" in str(error)


def test_good_urls_still_pass(workdir: Path):
    (workdir / "audit.toml").write_text(
        "[backends.remote]\n"
        'base_url = ["http://127.0.0.1:1/v1", "https://[::1]:65535/v1", "HTTP://Host/v1/"]\n'
    )
    assert load_config().backends["remote"].base_url == (
        "http://127.0.0.1:1/v1",
        "https://[::1]:65535/v1",
        "HTTP://Host/v1",
    )


@pytest.mark.parametrize(
    "value", ["sk-proj.abc123-SECRETVALUE", "VLLM_KEY\n", "1KEY", "sk abc SECRETVALUE"]
)
def test_an_api_key_env_that_is_no_variable_name_is_refused_without_echoing_it(
    workdir: Path, value: str
):
    error = config_error(workdir, f"base_url = 'http://h/v1'\napi_key_env = {json.dumps(value)}")
    assert error.field == "backends.remote.api_key_env"
    assert "must be the NAME of an environment variable" in str(error)
    assert value.strip() not in str(error)


def test_a_key_pasted_into_api_key_env_is_not_printed_when_unset(workdir: Path):
    """``sk_live_...`` is a valid variable name, so it passes validation; when it names no
    variable, the error must not print it back (it is probably the key itself)."""
    pasted = "sk_live_51HxYzSECRETVALUE"
    (workdir / "audit.toml").write_text(
        f"[backends.remote]\nbase_url = 'http://h/v1'\napi_key_env = '{pasted}'\n"
        "[backends.named]\nbase_url = 'http://h/v1'\napi_key_env = 'REMOTE_API_KEY'\n"
    )
    config = load_config(env_file=None)
    with pytest.raises(BackendConfigError) as caught:
        resolve_api_key("remote", config.backends["remote"], config)
    assert "SECRETVALUE" not in str(caught.value)
    assert "backends.remote.api_key_env" in str(caught.value)
    assert "not set" in str(caught.value)
    with pytest.raises(BackendConfigError, match="names REMOTE_API_KEY, which is not set"):
        resolve_api_key("named", config.backends["named"], config)  # a name is still named


@pytest.mark.parametrize("bad", ["\n", "\r\n", "\r", "\t", "\x1b", "\x7f", "\x85"])
def test_a_key_that_is_no_header_value_is_refused_before_any_request(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, bad: str
):
    key = f"sk-test-0123456789{bad}abcdef"
    monkeypatch.setenv("REMOTE_KEY", key)
    (workdir / "audit.toml").write_text(
        "[backends.remote]\nbase_url = 'http://h/v1'\napi_key_env = 'REMOTE_KEY'\n"
    )
    config = load_config(env_file=None)
    with pytest.raises(BackendConfigError) as caught:
        resolve_api_key("remote", config.backends["remote"], config)
    assert "backends.remote.api_key_env" in str(caught.value)
    assert "line break or another control character" in str(caught.value)
    assert "0123456789" not in str(caught.value)
    backend = config.backends["remote"]
    with pytest.raises(BackendStartError, match="control character") as direct:
        BackendClient("remote", backend, base_urls=backend.base_url, model="m", api_key=key)
    assert "0123456789" not in str(direct.value)


def test_body_limits_have_sane_defaults_and_are_configurable(workdir: Path):
    backend = BackendConfig(base_url="http://h/v1")
    assert backend.max_response_bytes == 8 << 20
    assert 0 < backend.read_idle_timeout_s <= 60
    assert backend.read_idle_timeout_s <= backend.body_timeout_s < backend.request_timeout_s
    error = config_error(workdir, "base_url = 'http://h/v1'\nmax_response_bytes = 10")
    assert error.field == "backends.remote.max_response_bytes"


# -- a configuration nested hundreds of levels deep (issue 15, item 16) -----------------------


@pytest.mark.parametrize("depth", [300, 500])
@pytest.mark.parametrize("kind", ["arrays", "tables"])
def test_a_toml_nested_hundreds_of_levels_is_a_clean_error_naming_the_file(
    workdir: Path, kind: str, depth: int
):
    """Python's TOML parser recurses once per level: 500 levels used to end in a
    RecursionError traceback from ``audit backends list``; 300 levels parse, and the
    validator's depth limit then named a field path hundreds of levels long."""
    if kind == "arrays":
        value = "[" * depth + "1" + "]" * depth
    else:
        value = "{a = " * depth + "1" + "}" * depth
    deep = workdir / "deep.toml"
    deep.write_text(
        f"[backends.remote]\nbase_url = 'http://h/v1'\nchat_template_kwargs = {{a = {value}}}\n"
    )
    result = CliRunner().invoke(app, ["backends", "list", "--config", str(deep)])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert f"{deep}: " in result.output
    assert "nested too deeply" in result.output
    assert len(result.output) < 300, result.output
    with pytest.raises(BackendConfigError, match="nested too deeply") as caught:
        load_config(deep, env_file=None, environ=False)
    assert caught.value.source == str(deep)


def test_a_json_value_nested_too_deeply_in_the_environment_is_a_clean_error(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__REMOTE__BASE_URL", "http://h/v1")
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__REMOTE__CHAT_TEMPLATE_KWARGS", deep)
    with pytest.raises(BackendConfigError, match="nested too deeply") as caught:
        load_config(env_file=None)
    assert caught.value.source == "the environment"


def test_a_dotenv_that_is_not_utf8_is_one_line_naming_it_and_the_byte(tmp_path: Path):
    """Issue 27, 6: a `.env` that is not UTF-8 gave a traceback and "this is a bug in
    memory-audit"; now one line naming the file and the byte."""
    (tmp_path / ".env").write_bytes(b"A=1\nB=\xff\xfe\n")
    for args in (["backends", "list"], ["run", "--conditions", "cmd:true", "--out", "r"]):
        done = subprocess.run(
            [sys.executable, "-m", "audit", *args], capture_output=True, text=True,
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            "error: .env: not UTF-8 text (byte 7: invalid start byte)"
        ], done.stderr
