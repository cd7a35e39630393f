"""Memory conditions: the streaming-updater protocol, the registry, the built-ins.

A plugin needs only ``histories`` and this package::

    from compressors import ChunkView, Compressor, dump, load, pack
"""

from compressors._chat import (
    ChatClient,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ChatUnavailableError,
)
from compressors._memory import Stream, dump, load, memory_bytes, pack, pack_positions
from compressors._protocol import (
    ArchiveCompressor,
    ChunkView,
    Compressor,
    InvalidParamsError,
)
from compressors._registry import (
    BASELINES,
    ENTRY_POINT_GROUP,
    ConditionSpec,
    UnknownCompressorError,
    available,
    baseline_conditions,
    build,
    builtins,
    deterministic_builtins,
    parse_spec,
    register,
    registered_names,
    resolve_class,
    with_label,
)

__all__ = [
    "BASELINES",
    "ENTRY_POINT_GROUP",
    "ArchiveCompressor",
    "ChatClient",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "ChatUnavailableError",
    "ChunkView",
    "Compressor",
    "ConditionSpec",
    "InvalidParamsError",
    "Stream",
    "UnknownCompressorError",
    "available",
    "baseline_conditions",
    "build",
    "builtins",
    "deterministic_builtins",
    "dump",
    "load",
    "memory_bytes",
    "pack",
    "pack_positions",
    "parse_spec",
    "register",
    "registered_names",
    "resolve_class",
    "with_label",
]
