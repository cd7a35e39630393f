"""Backend configuration: TOML, MEMORY_AUDIT_* variables and .env, with named errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.backends import (
    SMOLLM2,
    BackendConfig,
    BackendConfigError,
    RoleNotConfiguredError,
    UnknownBackendError,
    load_config,
    resolve_api_key,
)
from audit.backends._config import LOCAL

TOML = """
reader = "vllm"
[backends.vllm]
base_url = ["http://gpu1:8000/v1/", "http://gpu2:8000/v1"]
model = "Qwen/Qwen3-8B"
api_key_env = "VLLM_KEY"
temperature = 0.2
seed = 1
chat_template_kwargs = {enable_thinking = false}
roles = ["reader"]

[backends.writer-box]
base_url = "http://router:9000/v1"
model = "glm"
thinking_on_kwargs = {enable_thinking = true}
thinking_off_kwargs = {enable_thinking = false}
roles = "writer"

[backends.local]
n_parallel = 2
"""


@pytest.fixture
def workdir(workdir: Path) -> Path:
    """The clean working directory of tests/conftest.py, holding TOML as audit.toml."""
    (workdir / "audit.toml").write_text(TOML)
    return workdir


def test_toml_is_read_from_the_working_directory(workdir: Path):
    config = load_config()
    vllm = config.backends["vllm"]
    assert vllm.base_url == ("http://gpu1:8000/v1", "http://gpu2:8000/v1")
    assert vllm.temperature == 0.2
    assert vllm.seed == 1
    assert vllm.roles == ("reader",)
    assert config.backends["writer-box"].roles == ("writer",)
    assert config.reader == "vllm"
    assert config.source == "audit.toml"
    assert config.backends[LOCAL].kind == "local"
    assert config.backends[LOCAL].n_parallel == 2


def test_environment_beats_dotenv_beats_toml(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    (workdir / ".env").write_text(
        "MEMORY_AUDIT_BACKENDS__VLLM__TEMPERATURE=0.5\n"
        "MEMORY_AUDIT_BACKENDS__VLLM__SEED=9\n"
        "VLLM_KEY=from-dotenv\n"
    )
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__VLLM__TEMPERATURE", "0.9")
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__VLLM__BASE_URL", "http://a:1/v1,http://b:1/v1")
    config = load_config()
    vllm = config.backends["vllm"]
    assert vllm.temperature == 0.9  # environment
    assert vllm.seed == 9  # .env
    assert vllm.model == "Qwen/Qwen3-8B"  # TOML, merged with the rest of the table
    assert vllm.base_url == ("http://a:1/v1", "http://b:1/v1")
    assert resolve_api_key("vllm", vllm, config) == "from-dotenv"
    monkeypatch.setenv("VLLM_KEY", "from-environment")
    assert resolve_api_key("vllm", vllm, config) == "from-environment"


def test_a_whole_backend_can_come_from_the_environment(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    (workdir / "audit.toml").unlink()
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__GPU__BASE_URL", '["http://g:8000/v1"]')
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__GPU__CHAT_TEMPLATE_KWARGS", '{"thinking": true}')
    monkeypatch.setenv("MEMORY_AUDIT_WRITER", "gpu")
    config = load_config()
    assert config.backends["gpu"].chat_template_kwargs == {"thinking": True}
    assert config.for_role("writer") == ("gpu", config.backends["gpu"])
    assert set(config.backends) == {"gpu", LOCAL}
    assert config.source == "the built-in defaults (no audit.toml)"


@pytest.mark.parametrize(
    ("edit", "source", "field"),
    [
        (("temperature = 0.2", "temperature = 7"), "audit.toml", "backends.vllm.temperature"),
        (("seed = 1", "sed = 1"), "audit.toml", "backends.vllm.sed"),
        (
            ('model = "glm"', 'model = "glm"\nmax_concurrency = 0'),
            "audit.toml",
            "backends.writer-box.max_concurrency",
        ),
        (('roles = "writer"', 'roles = "editor"'), "audit.toml", "backends.writer-box.roles.0"),
        (
            ("seed = 1", "seed = 1\nextra_body = {seed = 2}"),
            "audit.toml",
            "backends.vllm.extra_body",
        ),
        (
            ('api_key_env = "VLLM_KEY"', 'api_key_env = "sk-abc.def"'),
            "audit.toml",
            "backends.vllm.api_key_env",
        ),
    ],
)
def test_a_bad_field_is_named_with_its_file(
    workdir: Path, edit: tuple[str, str], source: str, field: str
):
    (workdir / "audit.toml").write_text(TOML.replace(*edit))
    with pytest.raises(BackendConfigError) as caught:
        load_config()
    assert caught.value.source == source
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{source}: {field}: ")


def test_a_bad_variable_is_named(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_AUDIT_BACKENDS__VLLM__TOP_P", "5")
    with pytest.raises(
        BackendConfigError, match=r"MEMORY_AUDIT_BACKENDS__VLLM__TOP_P: backends\.vllm\.top_p"
    ):
        load_config()
    monkeypatch.delenv("MEMORY_AUDIT_BACKENDS__VLLM__TOP_P")
    (workdir / ".env").write_text("MEMORY_AUDIT_BACKENDS__VLLM__MAX_TOKENS=-3\n")
    with pytest.raises(
        BackendConfigError, match=r"^\.env \(MEMORY_AUDIT_BACKENDS__VLLM__MAX_TOKENS\)"
    ):
        load_config()
    (workdir / ".env").write_text("MEMORY_AUDIT_BACKENDS_VLLM_MODEL=x\n")  # one underscore
    with pytest.raises(BackendConfigError, match="malformed name"):
        load_config()


def test_a_missing_or_broken_file_is_named(workdir: Path):
    with pytest.raises(BackendConfigError, match=r"nope\.toml: configuration file not found"):
        load_config(workdir / "nope.toml")
    (workdir / "broken.toml").write_text("[backends.x\n")
    with pytest.raises(BackendConfigError, match=r"broken\.toml"):
        load_config(workdir / "broken.toml")
    (workdir / "nourl.toml").write_text("[backends.x]\nmodel = 'm'\n")
    with pytest.raises(
        BackendConfigError, match=r"nourl\.toml: backends\.x: .*base_url is required"
    ):
        load_config(workdir / "nourl.toml")
    (workdir / "local.toml").write_text("[backends.local]\nkind = 'openai'\n")
    with pytest.raises(BackendConfigError, match="must keep kind"):
        load_config(workdir / "local.toml")
    (workdir / "name.toml").write_text("[backends.Big]\nbase_url = 'http://x/v1'\n")
    with pytest.raises(BackendConfigError, match="backend name 'Big'"):
        load_config(workdir / "name.toml")


def test_unknown_backend_and_unconfigured_role_raise_before_any_work(workdir: Path):
    config = load_config()
    with pytest.raises(
        UnknownBackendError, match=r"no backend named 'gpt' \(configured: local, vllm, writer-box\)"
    ):
        config.get("gpt", "reader")
    with pytest.raises(
        RoleNotConfiguredError,
        match=r"backends\.vllm\.roles: backend 'vllm' is not configured as a writer",
    ):
        config.get("vllm", "writer")
    with pytest.raises(RoleNotConfiguredError, match="no writer backend chosen"):
        config.for_role("writer")
    assert config.for_role("reader")[0] == "vllm"
    (workdir / "audit.toml").write_text(TOML.replace('reader = "vllm"', 'reader = "nobody"'))
    with pytest.raises(BackendConfigError, match="reader = 'nobody' is not a configured backend"):
        load_config()


def test_the_api_key_is_a_variable_name_never_a_value(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    config = load_config()
    vllm = config.backends["vllm"]
    with pytest.raises(BackendConfigError, match="api_key_env names VLLM_KEY, which is not set"):
        resolve_api_key("vllm", vllm, config)
    monkeypatch.setenv("VLLM_KEY", "sk-very-secret")
    assert resolve_api_key("vllm", vllm, config) == "sk-very-secret"
    assert "sk-very-secret" not in repr(config) + repr(vllm) + str(config.model_dump())


def test_thinking_maps_to_chat_template_kwargs():
    glm = BackendConfig(base_url="http://x/v1", chat_template_kwargs={"keep": 1})
    assert glm.template_kwargs(None) == {"keep": 1}
    assert glm.template_kwargs(True) == {"keep": 1, "enable_thinking": True}
    assert glm.template_kwargs(False) == {"keep": 1, "enable_thinking": False}
    deepseek = BackendConfig(
        base_url="http://x/v1",
        thinking_on_kwargs={"thinking": True},
        thinking_off_kwargs={"thinking": False},
    )
    assert deepseek.template_kwargs(True) == {"thinking": True}


def test_defaults_need_no_file(workdir: Path):
    (workdir / "audit.toml").unlink()
    config = load_config()
    assert set(config.backends) == {LOCAL}
    assert config.resolved_cache_path().name == "responses.sqlite"


def test_a_backend_answers_what_the_code_would_otherwise_ask_its_kind():
    """The embedded backend's differences are attributes of the backend, not ``kind``
    tests spread over the code: its declared model, the mode a run records, the body
    fields its requests carry, where it answers."""
    local = BackendConfig(kind="local")
    gguf = BackendConfig(kind="local", model_path=Path("/m/qwen-0.5b.gguf"), mode="throughput")
    served = BackendConfig(base_url="http://x/v1", extra_body={"cache_prompt": False})
    assert (local.embedded, gguf.embedded, served.embedded) == (True, True, False)
    assert (local.declared_model, gguf.declared_model) == (SMOLLM2.model_id, "qwen-0.5b")
    assert served.declared_model is None
    assert served.model_copy(update={"model": "m"}).declared_model == "m"
    assert (local.run_mode, gguf.run_mode, served.run_mode) == (
        "reproducible",
        "throughput",
        "server",
    )
    # llama.cpp's prompt cache off in reproducible mode only; a server's own extra_body kept
    assert (local.body_fields, gguf.body_fields) == ({"cache_prompt": False}, {})
    assert served.body_fields == {"cache_prompt": False}
    assert served.where == "http://x/v1"
    assert "in-process" in local.where
