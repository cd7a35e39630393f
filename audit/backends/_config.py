"""Backend configuration: pydantic models, read from the environment (``MEMORY_AUDIT_*``),
then ``.env``, then the TOML file, then the defaults; tables merge field by field and a
bad value names its source and field (docs/backends.md, "Sources and precedence").  The
built-in backend ``local`` (llama.cpp in-process, SmolLM2) is always present.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
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
    ValidationInfo,
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


class BackendConfig(BaseModel):
    """One named backend: where it is, which model, how to sample, how hard to try.  What
    each field means is the table "Backend fields" of docs/backends.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai", "local"] = "openai"
    base_url: Annotated[tuple[str, ...], NoDecode] = ()
    model: str | None = None
    api_key_env: str | None = None
    roles: Annotated[tuple[Role, ...], NoDecode] = ROLES
    api_dialect: Literal["vllm", "openai"] = "vllm"
    # sampling: sent in every body (top_k, min_p, repetition_penalty: the vllm dialect only)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, ge=-1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    max_tokens: int = Field(default=1024, ge=1)
    seed: int = Field(default=0, ge=0)
    chat_template_kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    extra_body: dict[str, JsonValue] = Field(default_factory=dict)
    thinking_on_kwargs: dict[str, JsonValue] = Field(default={"enable_thinking": True})
    thinking_off_kwargs: dict[str, JsonValue] = Field(default={"enable_thinking": False})
    structured_output: Literal["json_schema", "structured_outputs", "json_object", "none"] = (
        "json_schema"
    )
    # per base URL; then how hard to try (retries, back-off) and how long to wait
    max_concurrency: int = Field(default=32, ge=1, le=4096)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=8, ge=0)
    retry_budget_s: float = Field(default=900.0, gt=0)
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    read_idle_timeout_s: float = Field(default=30.0, gt=0)
    body_timeout_s: float = Field(default=120.0, gt=0)
    max_response_bytes: int = Field(default=8 << 20, ge=1024)
    # kind = "local" only
    model_path: Path | None = None
    mode: Literal["reproducible", "throughput"] = "reproducible"
    n_parallel: int = Field(default=4, ge=1, le=256)
    n_ctx_per_slot: int = Field(default=8192, ge=256)
    n_threads: int | None = Field(default=None, ge=1)

    @field_validator("base_url", "roles", mode="before")
    @classmethod
    def _one_or_many(cls, value: object, info: ValidationInfo) -> object:
        """One string, a comma list, or a JSON list (how lists arrive from the environment)."""
        if isinstance(value, str):
            text = value.strip()
            loaded = json.loads(text) if text.startswith("[") else None
            if isinstance(loaded, list):
                value = [str(item) for item in loaded]
            else:
                value = [part.strip() for part in text.split(",") if part.strip()]
        if isinstance(value, list | tuple):
            end = "/" if info.field_name == "base_url" else ""
            return tuple(str(v).rstrip(end) for v in value)
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


_reading: ContextVar[tuple[Path | None, bool]] = ContextVar("memory_audit", default=(None, True))
"""What ``load_config`` reads besides ``.env``: the TOML file, and whether the environment."""


class BackendsConfig(BaseSettings):
    """Every configured backend (``local`` always), the default backend of each role, and
    where the cache and models live (docs/backends.md, "Top-level fields")."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=DEFAULT_ENV_FILE,
        env_file_encoding="utf-8",
        dotenv_filtering="only_existing",
        extra="forbid",
        frozen=True,
    )

    backends: dict[str, BackendConfig] = Field(default_factory=dict, validate_default=True)
    reader: str | None = None
    writer: str | None = None
    cache_dir: Path | None = None
    cache_path: Path | None = None

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
            merged[LOCAL] = {"kind": "local", **local}
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
        toml, environ = _reading.get()
        sources = [init_settings, *([env_settings] if environ else []), dotenv_settings]
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
    token = _reading.set((toml, environ))
    try:
        config = BackendsConfig(_env_file=dotenv)
    except ValidationError as error:
        raise _named(error, toml, dotenv, environ) from None
    except (SettingsError, ValueError) as error:  # a malformed TOML or a bad JSON value
        cause = error.__cause__ or error
        raise BackendConfigError(str(cause), source=source) from None
    except RecursionError:  # the TOML or JSON parser recurses once per level of nesting
        raise _too_deep(toml, dotenv) from None
    finally:
        _reading.reset(token)
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
    """Which source set the field at ``loc``, highest precedence first."""
    variable = ENV_PREFIX + "__".join(loc).upper()
    candidates: list[tuple[str, PydanticBaseSettingsSource]] = []
    if environ:
        candidates.append((f"environment variable {variable}", EnvSettingsSource(BackendsConfig)))
    if dotenv is not None:
        dot = DotEnvSettingsSource(BackendsConfig, env_file=dotenv)
        candidates.append((f"{dotenv} ({variable})", dot))
    if toml is not None:
        candidates.append((str(toml), TomlConfigSettingsSource(BackendsConfig, toml)))
    for where, source in candidates:
        node: Any = source()
        for part in loc:
            node = node.get(part, _MISSING) if isinstance(node, Mapping) else _MISSING
        if loc and node is not _MISSING:
            return where
    # the field was missing, or a model-level check failed: blame the most specific file
    return str(toml) if toml is not None else (str(dotenv) if dotenv else "configuration")


_MISSING = object()
