"""``open_backend``: configuration + API key + (local server) + cache -> a ready ChatClient."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from dotenv import dotenv_values

from audit.backends._cache import ResponseCache
from audit.backends._client import BackendClient
from audit.backends._config import BackendConfig, BackendsConfig, Role, load_config
from audit.backends._errors import BackendConfigError
from audit.backends._local import (
    LOCAL_SERVERS,
    SMOLLM2,
    LocalServer,
    LocalServerSpec,
    Status,
    ensure_local_model,
    model_sha256,
)
from audit.backends._secrets import has_control_characters


def resolve_api_key(name: str, backend: BackendConfig, config: BackendsConfig) -> str | None:
    """The API key named by ``api_key_env``: the environment first, then the ``.env`` file.

    Raises ``BackendConfigError`` when it is unset or is no header value (a line break or
    another control character), naming the backend and the field, never the key.  The
    variable is named only when it looks like one (upper case): a key pasted into
    ``api_key_env`` by mistake is not printed back.
    """
    variable = backend.api_key_env
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value and config.env_file is not None and config.env_file.is_file():
        value = dotenv_values(config.env_file).get(variable)
    shown = variable if _CONVENTIONAL_NAME.fullmatch(variable) else "the variable it names"
    field = f"backends.{name}.api_key_env"
    if not value:
        raise BackendConfigError(
            f"api_key_env names {shown}, which is not set in the environment"
            + (f" or in {config.env_file}" if config.env_file is not None else ""),
            source=config.source,
            field=field,
        )
    if has_control_characters(value):
        raise BackendConfigError(
            f"the key in {shown} holds a line break or another control character, which "
            "cannot go in an HTTP header (a stray newline from a file?)",
            source=config.source,
            field=field,
        )
    return value


_CONVENTIONAL_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
"""A variable name as people write them; anything else may be a key put there by mistake."""


def local_spec(
    backend: BackendConfig, cache_dir: Path, name: str = "local", status: Status | None = None
) -> LocalServerSpec:
    """What the local server serves: ``model_path`` (any GGUF) or the provisioned SmolLM2,
    with the file's content hash (a model is its content, not its file name); ``status``
    hears a fetch of the model."""
    if backend.model_path is not None:
        path = backend.model_path.expanduser()
        if not path.is_file():
            raise BackendConfigError(f"{path} is not a file", field=f"backends.{name}.model_path")
        try:
            digest = model_sha256(path, cache_dir)
        except OSError as error:
            raise BackendConfigError(
                f"{path} cannot be read ({error.strerror})", field=f"backends.{name}.model_path"
            ) from None
    else:
        path = ensure_local_model(cache_dir, status=status)
        digest = SMOLLM2.sha256  # (checked when it was provisioned)
    return LocalServerSpec(
        model_path=path,
        model_id=backend.declared_model or SMOLLM2.model_id,
        model_sha256=digest,
        n_parallel=backend.n_parallel,
        reproducible=backend.mode == "reproducible",
        n_ctx_per_slot=backend.n_ctx_per_slot,
        n_threads=backend.n_threads,
    )


@asynccontextmanager
async def open_backend(
    name: str,
    config: BackendsConfig | None = None,
    *,
    role: Role | None = None,
    cache: ResponseCache | str | Path | None = None,
    status: Status | None = None,
) -> AsyncIterator[BackendClient]:
    """Yield a started ``BackendClient`` (a ``compressors.ChatClient``) for backend ``name``.

    ``config``: from ``load_config()`` (default: ``audit.toml`` + environment + ``.env``).
    ``role``: checked before anything starts (``RoleNotConfiguredError``).
    ``cache``: a ``ResponseCache`` to share (left open), a path to open (closed on exit),
    or ``None`` for no cache.  A ``local`` backend's server is started (or shared, if one
    is running in this process) and stopped when the last user exits; ``status`` hears
    a line as a model is fetched and a server starts (steps of seconds to minutes).
    """
    config = config if config is not None else load_config()
    backend = config.get(name, role)
    api_key = resolve_api_key(name, backend, config)
    owned: ResponseCache | None = None
    if isinstance(cache, str | Path):
        owned = cache = ResponseCache(cache)
    server: LocalServer | None = None
    try:
        urls, model, identity = backend.base_url, backend.model, ""
        if backend.embedded:
            cache_dir = config.resolved_cache_dir()
            spec = await asyncio.to_thread(local_spec, backend, cache_dir, name, status)
            server = await asyncio.to_thread(LOCAL_SERVERS.acquire, spec, status)
            urls, model, identity = (server.base_url,), spec.model_id, f"sha256:{spec.model_sha256}"
            # llama.cpp decodes n_parallel requests at once: more in flight only queue there
            backend = backend.model_copy(update={"max_concurrency": spec.slots()})
            api_key = None
        client = BackendClient(
            name, backend, base_urls=urls, model=model, api_key=api_key, cache=cache,
            identity=identity,
        )  # fmt: skip
        try:
            await client.start()
            yield client
        finally:
            await client.aclose()
    finally:
        if server is not None:
            await asyncio.to_thread(LOCAL_SERVERS.release, server)
        if owned is not None:
            owned.close()
