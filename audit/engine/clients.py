"""Opening the writer and reader backends of a run's LLM stage (and closing them).

They are opened before any work of the run: a backend that cannot be reached stops
the run at once with one line naming it, instead of turning every read into NA.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from audit.backends import (
    BackendClient,
    BackendsConfig,
    BackendStartError,
    ResponseCache,
    open_backend,
)
from compressors import ChatClient


def declared_model(config: BackendsConfig, name: str) -> str:
    """The model a backend will serve, as far as the configuration says (for results and
    unit keys; the served id is recorded per read as well)."""
    return config.get(name).declared_model or "served-model"


@asynccontextmanager
async def open_clients(
    config: BackendsConfig,
    writer: str | None,
    reader: str | None,
    cache_path: Path,
    check_reachable: bool = True,
    status: Callable[[str], object] | None = None,
) -> AsyncIterator[tuple[ChatClient | None, ChatClient | None]]:
    """(writer client, reader client); one cache for both; servers stopped on exit.

    ``check_reachable``: a server that does not answer stops the run before any work;
    off only for a run whose every request is known to be answered by the cache (a run
    completed by batches, ``engine.batch.live_requests``).  ``status`` hears the steps of
    opening them (fetching the embedded model, starting its server)."""
    async with AsyncExitStack() as stack:
        cache = stack.enter_context(ResponseCache(cache_path))
        opened: dict[str, ChatClient] = {}
        clients: list[ChatClient | None] = []
        for name, role in ((writer, "writer"), (reader, "reader")):
            if name is None:
                clients.append(None)
                continue
            if name not in opened:
                client = await stack.enter_async_context(
                    open_backend(name, config, role=role, cache=cache, status=status)  # type: ignore[arg-type]
                )
                if check_reachable:
                    await ensure_reachable(client)
                opened[name] = client
            clients.append(opened[name])
        yield clients[0], clients[1]


async def ensure_reachable(client: BackendClient) -> None:
    """Raise ``BackendStartError`` when a configured base URL of ``client`` does not
    answer at all (``GET /models``; any HTTP status counts as an answer: some routers
    have no such endpoint, and a key problem shows in the reads).  The embedded backend
    has none: its start was its check."""
    for base_url in client.backend.base_url:
        status, _, text = await client.get_json(base_url, "/models")
        if status is None:
            raise BackendStartError(
                f"backend {client.name!r}: {client.scrub(base_url)} does not answer "
                f"({client.scrub(text)}); nothing was run: start the server or fix base_url "
                "(audit backends check tells more)"
            )
