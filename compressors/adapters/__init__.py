"""Adapters of the memory systems people use, each calling the real library.

One module per library, each importing its library lazily (``import compressors``
never needs an extra); every adapter is registered like a built-in and listed by
``audit compressors`` whether or not its extra is installed (with the extra to
install).  ``docs/adapters.md`` says what each one calls, how the budget maps to the
library's threshold, and what each kept on the pilot.
"""

from compressors.adapters import (
    command,
    inspect_compaction,
    langchain_memory,
    langmem_summary,
    llamaindex_memory,
    mem0_memory,
    pydantic_ai_compaction,
)
from compressors.adapters._base import (
    BYTES_PER_TOKEN,
    AdapterNotInstalledError,
    ChatAdapter,
    count_tokens,
    threshold_tokens,
)

ADAPTERS = (
    "inspect_trim",
    "inspect_edit",
    "inspect_summary",
    "langchain_trim",
    "langchain_summary",
    "langmem_summary",
    "llamaindex_summary",
    "pydantic_window",
    "pydantic_clear",
    "pydantic_dedup",
    "pydantic_clamp",
    "pydantic_summary",
    "mem0_local",
    "cmd",
    "http",
)
"""The adapters in listing order: no-LLM first within each library."""

__all__ = [
    "ADAPTERS",
    "BYTES_PER_TOKEN",
    "AdapterNotInstalledError",
    "ChatAdapter",
    "command",
    "count_tokens",
    "inspect_compaction",
    "langchain_memory",
    "langmem_summary",
    "llamaindex_memory",
    "mem0_memory",
    "pydantic_ai_compaction",
    "threshold_tokens",
]
