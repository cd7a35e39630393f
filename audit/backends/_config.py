"""Backend configuration: pydantic models, read from TOML, the environment and ``.env``.

Sources, highest precedence first (a field set in a higher source wins, tables merge):

1. environment variables ``MEMORY_AUDIT_<FIELD>``; a backend's field is
   ``MEMORY_AUDIT_BACKENDS__<NAME>__<FIELD>`` (``__`` separates levels; names and fields
   are case-insensitive; dicts and lists are written as JSON);
2. the same variables in a ``.env`` file (default: ``.env`` in the working directory);
3. the TOML file (``--config FILE``; default ``audit.toml`` in the working directory,
   optional);
4. the defaults documented on each field below.

The built-in backend ``local`` (the embedded llama.cpp server with SmolLM2-135M-Instruct) is
always present; a ``[backends.local]`` table adjusts it.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    ValidationError,
    field_validator,
)
from pydantic import model_validator as _model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError
from yarl import URL

from audit.backends._errors import BackendConfigError, RoleNotConfiguredError, UnknownBackendError
from audit.backends._local import SMOLLM2

Role = Literal["reader", "writer"]
ROLES: tuple[Role, ...] = ("reader", "writer")
ENV_PREFIX = "MEMORY_AUDIT_"
DEFAULT_CONFIG_FILE = "audit.toml"
DEFAULT_ENV_FILE = ".env"
LOCAL = "local"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CLIENT_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "seed", "temperature",
        "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "n", "stream", "response_format", "structured_outputs",
        "chat_template_kwargs", "n_predict",
    }
)  # fmt: skip
"""Request fields the client sets from the backend's settings and the request; an
``extra_body`` may not replace them (the cache key would no longer say what was asked)."""


def _thinking(on: bool) -> dict[str, JsonValue]:
    return {"enable_thinking": on}


class BackendConfig(BaseModel):
    """One named backend: where it is, which model, how to sample, how hard to try."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: Literal["openai", "local"] = "openai"
    """``openai``: any OpenAI-compatible server; ``local``: llama.cpp started in-process."""

    base_url: Annotated[tuple[str, ...], NoDecode] = ()
    """The server's OpenAI API root (``http://gpu1:8000/v1``) or a list of them (the one
    with the fewest outstanding requests is used); none for ``local``."""

    model: str | None = None
    """The served model id; omitted: the one model the server serves (``GET /v1/models``)."""

    api_key_env: str | None = None
    """The NAME of the environment variable (or ``.env`` entry) holding the API key, sent as
    ``Authorization: Bearer``; never the key itself."""

    roles: Annotated[tuple[Role, ...], NoDecode] = ROLES
    """What this backend may serve: ``reader`` (the LLM reader), ``writer`` (LLM compressors)."""

    api_dialect: Literal["vllm", "openai"] = "vllm"
    """``vllm``: also send ``top_k``, ``min_p``, ``repetition_penalty`` and
    ``chat_template_kwargs``; ``openai``: only the OpenAI API's own fields."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature, always sent (0 = greedy)."""

    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass, always sent."""

    top_k: int = Field(default=-1, ge=-1)
    """Top-k (-1 = off), sent in the ``vllm`` dialect."""

    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    """Min-p (0 = off), sent in the ``vllm`` dialect."""

    repetition_penalty: float = Field(default=1.0, gt=0.0)
    """Repetition penalty (1 = off), sent in the ``vllm`` dialect."""

    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    """OpenAI presence penalty, always sent."""

    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    """OpenAI frequency penalty, always sent."""

    max_tokens: int = Field(default=1024, ge=1)
    """Completion token cap when the request does not set one; always sent."""

    seed: int = Field(default=0, ge=0)
    """Base seed: a request is sent with ``seed + request.repeat``."""

    chat_template_kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    """Always passed to the chat template (``vllm`` dialect)."""

    extra_body: dict[str, JsonValue] = Field(default_factory=dict)
    """Fields added to every request body (and so to its cache key), for a server's own
    switches; a field the client sets itself is refused."""

    thinking_on_kwargs: dict[str, JsonValue] = Field(default_factory=lambda: _thinking(True))
    """Merged into ``chat_template_kwargs`` when a request asks for thinking on
    (``ChatRequest.thinking = True``)."""

    thinking_off_kwargs: dict[str, JsonValue] = Field(default_factory=lambda: _thinking(False))
    """Merged into ``chat_template_kwargs`` when a request asks for thinking off."""

    structured_output: Literal["json_schema", "structured_outputs", "json_object", "none"] = (
        "json_schema"
    )
    """How a request's JSON schema is sent: ``json_schema`` (``response_format``),
    ``structured_outputs`` (vLLM's own field), ``json_object`` (JSON without the schema),
    ``none`` (not sent)."""

    max_concurrency: int = Field(default=32, ge=1, le=4096)
    """Requests in flight at once per base URL."""

    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds to open a connection."""

    request_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds one attempt may take, end to end."""

    max_retries: int = Field(default=8, ge=0)
    """Retries after the first attempt, for connection errors, timeouts, 408, 429 and 5xx."""

    retry_budget_s: float = Field(default=900.0, gt=0)
    """Total seconds a request may spend on attempts and back-off before it is NA."""

    backoff_initial_s: float = Field(default=0.5, gt=0)
    """First back-off; doubles per retry (jittered); a ``Retry-After`` is honoured instead."""

    backoff_max_s: float = Field(default=30.0, gt=0)
    """Largest single back-off."""

    read_idle_timeout_s: float = Field(default=30.0, gt=0)
    """Once a response's headers are in, the longest pause between bytes of its body (a
    stalled server: NA, not retried)."""

    body_timeout_s: float = Field(default=120.0, gt=0)
    """Once a response's headers are in, the most seconds its whole body may take."""

    max_response_bytes: int = Field(default=8 << 20, ge=1024)
    """The largest response body read (decompressed); a larger one is abandoned as it
    streams in (NA, not retried)."""

    model_path: Path | None = None
    """``local`` only: a GGUF file to serve; omitted: SmolLM2-135M-Instruct (Q4_1)."""

    mode: Literal["reproducible", "throughput"] = "reproducible"
    """``local`` only.  ``reproducible``: one decoding slot and llama.cpp's prompt cache
    off, so an answer never depends on request order or concurrency; ``throughput``:
    ``n_parallel`` slots, prompt cache on (faster, not reproducible)."""

    n_parallel: int = Field(default=4, ge=1, le=256)
    """``local`` only, ``mode = "throughput"``: parallel decoding slots."""

    n_ctx_per_slot: int = Field(default=8192, ge=256)
    """``local`` only: context tokens per slot."""

    n_threads: int | None = Field(default=None, ge=1)
    """``local`` only: CPU threads (default: every core)."""

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        if isinstance(value, str):
            value = _str_list(value)
        if isinstance(value, list | tuple):
            return tuple(str(v).rstrip("/") for v in value)
        return value

    @field_validator("base_url")
    @classmethod
    def _http_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, url in enumerate(value):
            problem = url_problem(url)
            if problem is not None:
                where = f"URL {index + 1} of {len(value)}: " if len(value) > 1 else ""
                raise ValueError(where + problem)
        if len(set(value)) != len(value):
            raise ValueError("a URL is listed twice")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):  # (the value is never echoed)
            raise ValueError(
                "must be the NAME of an environment variable (letters, digits, _, not "
                "starting with a digit), not the key itself"
            )
        return value

    @field_validator("extra_body")
    @classmethod
    def _no_client_field(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        taken = sorted(name for name in value if name.lower() in CLIENT_FIELDS)
        if taken:  # any case: a server may read "Seed" as seed
            raise ValueError(
                f"{', '.join(taken)}: set by the client itself (use the backend's own "
                "setting of that name, or the request's); extra_body only adds fields"
            )
        if not _finite(value):
            raise ValueError("nan and inf are not JSON: a request body cannot carry them")
        return value

    @field_validator("roles", mode="before")
    @classmethod
    def _roles_list(cls, value: object) -> object:
        return _str_list(value) if isinstance(value, str) else value

    @field_validator("roles")
    @classmethod
    def _some_role(cls, value: tuple[Role, ...]) -> tuple[Role, ...]:
        if not value:
            raise ValueError("at least one role (reader, writer)")
        return tuple(dict.fromkeys(value))

    @_model_validator(mode="after")
    def _kind_fields(self) -> BackendConfig:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("base_url is required for an OpenAI-compatible backend")
        if self.kind == "local" and self.base_url:
            raise ValueError("base_url is not allowed for kind = 'local' (it picks a free port)")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        return self

    # -- what the rest of the code asks of a backend, instead of asking its kind --------

    @property
    def embedded(self) -> bool:
        """Served by llama.cpp inside this process (``kind = "local"``): no base URL to
        reach, its start (``open_backend``) is its health check."""
        return self.kind == "local"

    @property
    def declared_model(self) -> str | None:
        """The model id its requests name, as far as the configuration says (no server is
        asked): ``model``; for the embedded backend, else ``model_path``'s stem or
        SmolLM2; None when only the server can say."""
        if self.model or not self.embedded:
            return self.model
        return self.model_path.stem if self.model_path is not None else SMOLLM2.model_id

    @property
    def run_mode(self) -> str:
        """The mode a run records: the embedded backend's ``mode``; ``server`` for a server
        (its own configuration decides)."""
        return self.mode if self.embedded else "server"

    @property
    def body_fields(self) -> dict[str, JsonValue]:
        """Fields added to every request body (and so to its key): ``extra_body``, and for
        the embedded backend in reproducible mode llama.cpp's ``cache_prompt = false``
        (which also keeps the two modes' cache keys apart)."""
        if self.embedded and self.mode == "reproducible":
            return {**self.extra_body, "cache_prompt": False}
        return self.extra_body

    @property
    def where(self) -> str:
        """Where it answers: its base URLs, or the in-process server."""
        return ", ".join(self.base_url) or "127.0.0.1 (in-process llama.cpp)"

    def template_kwargs(self, thinking: bool | None) -> dict[str, JsonValue]:
        """The ``chat_template_kwargs`` sent for a request with this ``thinking`` setting."""
        if thinking is None:
            return dict(self.chat_template_kwargs)
        extra = self.thinking_on_kwargs if thinking else self.thinking_off_kwargs
        return {**self.chat_template_kwargs, **extra}


def url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as a base URL, or None.  Never echoes the URL: it may
    carry a credential (``user:password@``, ``?key=``)."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "the URL holds whitespace or a control character"
    try:
        parsed = URL(url)
        port = parsed.explicit_port
    except ValueError as error:
        reason = "port out of range 1-65535" if "port" in str(error).lower() else "malformed"
        return f"not a valid URL ({reason})"
    if parsed.scheme not in ("http", "https"):
        return "not an http(s) URL: the scheme must be http or https"
    if not parsed.host:
        return "the URL has no host"
    if port is not None and not 1 <= port <= 65535:
        return "not a valid URL (port out of range 1-65535)"
    if parsed.raw_user is not None or parsed.raw_password is not None:
        return (
            "the URL holds credentials (user:password@): name the key's variable in "
            "api_key_env instead"
        )
    if parsed.raw_query_string or parsed.raw_fragment:
        return "an API root has no query (?...) or fragment (#...)"
    return None


def _finite(value: object) -> bool:
    """No nan or inf anywhere in a JSON-like value."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def _str_list(value: str) -> list[str]:
    """One string, a comma list, or a JSON list (how lists arrive from the environment)."""
    text = value.strip()
    if text.startswith("["):
        loaded = json.loads(text)
        if isinstance(loaded, list):
            return [str(item) for item in loaded]
    return [part.strip() for part in text.split(",") if part.strip()]


def _local_defaults() -> dict[str, Any]:
    return {"kind": "local"}


_toml_path: ContextVar[Path | None] = ContextVar("memory_audit_toml", default=None)


class BackendsConfig(BaseSettings):
    """Every configured backend, plus where the cache and models live."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=DEFAULT_ENV_FILE,
        env_file_encoding="utf-8",
        dotenv_filtering="only_existing",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    backends: dict[str, BackendConfig] = Field(default_factory=dict, validate_default=True)
    """Named backends; ``local`` is always present."""

    reader: str | None = None
    """Default backend for the reader role (``--reader`` overrides)."""

    writer: str | None = None
    """Default backend for the writer role (``--writer`` overrides)."""

    cache_dir: Path | None = None
    """Where models and the response cache live (default ``$XDG_CACHE_HOME/memory-audit``,
    else ``~/.cache/memory-audit``)."""

    cache_path: Path | None = None
    """The response cache database (default ``<cache_dir>/responses.sqlite``)."""

    _source: str = PrivateAttr(default="the built-in defaults (no audit.toml)")
    _env_file: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> str:
        """Where the configuration came from (the TOML file, or ``defaults``)."""
        return self._source

    @property
    def env_file(self) -> Path | None:
        """The ``.env`` file that was read (API keys are looked up there too), if any."""
        return self._env_file

    @field_validator("backends", mode="before")
    @classmethod
    def _with_local(cls, value: object) -> object:
        if not isinstance(value, Mapping):
            return value
        merged: dict[str, Any] = {str(name): table for name, table in value.items()}
        for name in merged:
            if not _NAME.match(name):
                raise ValueError(
                    f"backend name {name!r}: use lowercase letters, digits, '-' and '_', "
                    "starting with a letter"
                )
        local = merged.get(LOCAL, {})
        if isinstance(local, Mapping):
            if local.get("kind", "local") != "local":
                raise ValueError("the built-in backend 'local' must keep kind = 'local'")
            merged[LOCAL] = {**_local_defaults(), **local}
        return merged

    @_model_validator(mode="after")
    def _defaults_exist(self) -> BackendsConfig:
        for role in ROLES:
            name = getattr(self, role)
            if name is not None and name not in self.backends:
                raise ValueError(f"{role} = {name!r} is not a configured backend")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = _toml_path.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        if toml is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml))
        return tuple(sources)

    # -- lookups --------------------------------------------------------------------------

    def get(self, name: str, role: Role | None = None) -> BackendConfig:
        """The backend called ``name``, checked for ``role``; raises before any work."""
        backend = self.backends.get(name)
        if backend is None:
            known = ", ".join(sorted(self.backends))
            raise UnknownBackendError(
                f"no backend named {name!r} (configured: {known})", source=self.source
            )
        if role is not None and role not in backend.roles:
            raise RoleNotConfiguredError(
                f"backend {name!r} is not configured as a {role} (roles = {list(backend.roles)})",
                source=self.source,
                field=f"backends.{name}.roles",
            )
        return backend

    def for_role(self, role: Role, name: str | None = None) -> tuple[str, BackendConfig]:
        """The backend for ``role``: ``name`` if given, else the configured default."""
        chosen = name if name is not None else getattr(self, role)
        if chosen is None:
            raise RoleNotConfiguredError(
                f"no {role} backend chosen: pass --{role} NAME or set {role} = NAME",
                source=self.source,
                field=role,
            )
        return chosen, self.get(chosen, role)

    def resolved_cache_dir(self) -> Path:
        """The cache directory (models, responses), from config or the platform default."""
        return self.cache_dir if self.cache_dir is not None else default_cache_dir()

    def resolved_cache_path(self) -> Path:
        """The response cache database path."""
        if self.cache_path is not None:
            return self.cache_path
        return self.resolved_cache_dir() / "responses.sqlite"


def default_cache_dir() -> Path:
    """``$MEMORY_AUDIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/memory-audit``, else
    ``~/.cache/memory-audit``."""
    explicit = os.environ.get(f"{ENV_PREFIX}CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "memory-audit"


@contextmanager
def _toml(path: Path | None) -> Iterator[None]:
    token = _toml_path.set(path)
    try:
        yield
    finally:
        _toml_path.reset(token)


def load_config(
    path: str | Path | None = None,
    *,
    env_file: str | Path | None = DEFAULT_ENV_FILE,
    environ: bool = True,
) -> BackendsConfig:
    """Read the backend configuration.

    ``path``: a TOML file (it must exist); ``None`` reads ``audit.toml`` from the working
    directory when it exists.  ``env_file``: a dotenv file read when it exists (``None``:
    none).  ``environ=False`` ignores ``MEMORY_AUDIT_*`` variables (tests).  A bad field
    raises ``BackendConfigError`` naming the file or variable and the field.
    """
    toml: Path | None
    if path is None:
        default = Path(DEFAULT_CONFIG_FILE)
        toml = default if default.is_file() else None
    else:
        toml = Path(path)
        if not toml.is_file():
            raise BackendConfigError("configuration file not found", source=str(toml))
    dotenv = Path(env_file) if env_file is not None and Path(env_file).is_file() else None
    if dotenv is not None:
        _check_text(dotenv)
    source = str(toml) if toml is not None else "the built-in defaults (no audit.toml)"
    _check_variable_names(dotenv, environ)
    try:
        with _toml(toml):
            if environ:
                config = BackendsConfig(_env_file=dotenv)
            else:
                with _no_prefixed_environ():
                    config = BackendsConfig(_env_file=dotenv)
    except ValidationError as error:
        raise _named(error, toml, dotenv, environ) from None
    except (SettingsError, ValueError) as error:  # a malformed TOML or a bad JSON value
        cause = error.__cause__ or error
        raise BackendConfigError(str(cause), source=source) from None
    except RecursionError:  # the TOML or JSON parser recurses once per level of nesting
        raise _too_deep(toml, dotenv) from None
    config._source = source
    config._env_file = dotenv
    return config


TOO_DEEP = "nested too deeply to read (arrays or tables hundreds of levels deep)"


def _check_text(dotenv: Path) -> None:
    """A ``.env`` that is not UTF-8 is one line naming it and the byte (python-dotenv
    would raise a UnicodeDecodeError)."""
    try:
        dotenv.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise BackendConfigError(
            f"not UTF-8 text (byte {error.start + 1}: {error.reason})", source=str(dotenv)
        ) from None
    except OSError as error:
        raise BackendConfigError(
            f"cannot be read ({error.strerror or error})", source=str(dotenv)
        ) from None


def _too_deep(toml: Path | None, dotenv: Path | None) -> BackendConfigError:
    """The error for a value nested deeper than Python's parsers follow (hundreds of levels
    of arrays or tables), naming the TOML file when it is the one at fault, else the
    ``MEMORY_AUDIT_*`` JSON values (the environment or the ``.env`` file)."""
    if toml is not None:
        try:
            with toml.open("rb") as handle:
                tomllib.load(handle)
        except RecursionError:
            return BackendConfigError(TOO_DEEP, source=str(toml))
        except (OSError, ValueError):
            pass
    where = "the environment" + (f" or {dotenv}" if dotenv is not None else "")
    return BackendConfigError(f"a MEMORY_AUDIT_* JSON value is {TOO_DEEP}", source=where)


_BACKEND_VAR = re.compile(r"^BACKENDS(__[^_].*)?$", re.IGNORECASE)


def _check_variable_names(dotenv: Path | None, environ: bool) -> None:
    """A misspelt ``MEMORY_AUDIT_BACKENDS...`` variable would be ignored silently: refuse it."""
    names: list[tuple[str, str]] = []
    if environ:
        names += [("environment variable", key) for key in os.environ]
    if dotenv is not None:
        names += [(str(dotenv), key) for key in dotenv_values(dotenv)]
    for where, key in names:
        if not key.upper().startswith(ENV_PREFIX):
            continue
        rest = key[len(ENV_PREFIX) :]
        if rest.upper().startswith("BACKEND") and not _BACKEND_VAR.match(rest):
            raise BackendConfigError(
                f"malformed name; write {ENV_PREFIX}BACKENDS__<NAME>__<FIELD>",
                source=where,
                field=key,
            )


@contextmanager
def _no_prefixed_environ() -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def _named(
    error: ValidationError, toml: Path | None, dotenv: Path | None, environ: bool
) -> BackendConfigError:
    """Name the first bad field and the source that set it (env var, .env file, TOML file)."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    # pydantic reports tagged model errors as e.g. ('backends', 'vllm', 'temperature')
    field = ".".join(loc) if loc else "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    if first["type"] == "recursion_depth_exceeded":  # name the field, not a path 300 levels long
        inside = [i for i, part in enumerate(loc) if part in ("list", "dict")]
        loc = loc[: min(inside[0] if inside else len(loc), 4)]
        field = ".".join(loc)
        message = TOO_DEEP
    source = _origin(loc, toml, dotenv, environ)
    return BackendConfigError(message, source=source, field=field)


def _origin(loc: list[str], toml: Path | None, dotenv: Path | None, environ: bool) -> str:
    candidates: list[tuple[str, dict[str, Any]]] = []
    with _toml(toml):
        if environ:
            env = EnvSettingsSource(
                BackendsConfig,
                env_prefix=ENV_PREFIX,
                env_nested_delimiter="__",
                case_sensitive=False,
            )
            candidates.append(("environment", env()))
        if dotenv is not None:
            dot = DotEnvSettingsSource(
                BackendsConfig,
                env_file=dotenv,
                env_prefix=ENV_PREFIX,
                env_nested_delimiter="__",
                case_sensitive=False,
            )
            candidates.append((str(dotenv), dot()))
        if toml is not None:
            candidates.append((str(toml), TomlConfigSettingsSource(BackendsConfig, toml)()))
    for where, data in candidates:
        node: Any = data
        found = True
        for part in loc:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                found = False
                break
        if found and loc:
            if where == "environment":
                return "environment variable " + ENV_PREFIX + "__".join(loc).upper()
            if where == str(dotenv):
                return f"{dotenv} ({ENV_PREFIX}{'__'.join(loc).upper()})"
            return where
    # the field was missing, or a model-level check failed: blame the most specific file
    return str(toml) if toml is not None else (str(dotenv) if dotenv else "configuration")
