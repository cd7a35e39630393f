"""Opening the writer and reader backends of a run's LLM stage (and closing them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from audit.backends import SMOLLM2, BackendsConfig, ResponseCache, open_backend
from compressors import ChatClient


def declared_model(config: BackendsConfig, name: str) -> str:
    """The model a backend will serve, as far as the configuration says (for results and
    unit keys; the served id is recorded per read as well)."""
    backend = config.get(name)
    if backend.model:
        return backend.model
    if backend.kind == "local":
        return Path(backend.model_path).stem if backend.model_path else SMOLLM2.model_id
    return "served-model"


@asynccontextmanager
async def open_clients(
    config: BackendsConfig, writer: str | None, reader: str | None, cache_path: Path
) -> AsyncIterator[tuple[ChatClient | None, ChatClient | None]]:
    """(writer client, reader client); one cache for both; servers stopped on exit."""
    async with AsyncExitStack() as stack:
        cache = stack.enter_context(ResponseCache(cache_path))
        opened: dict[str, ChatClient] = {}
        clients: list[ChatClient | None] = []
        for name, role in ((writer, "writer"), (reader, "reader")):
            if name is None:
                clients.append(None)
                continue
            if name not in opened:
                opened[name] = await stack.enter_async_context(
                    open_backend(name, config, role=role, cache=cache)  # type: ignore[arg-type]
                )
            clients.append(opened[name])
        yield clients[0], clients[1]
