"""LLM backends: OpenAI-compatible servers (vLLM first), the embedded local model, the cache.

The lead's entry point::

    from audit.backends import ResponseCache, load_config, open_backend

    config = load_config("audit.toml")              # TOML + MEMORY_AUDIT_* + .env
    name, _ = config.for_role("reader", "local")    # raises before any work if wrong
    with ResponseCache(config.resolved_cache_path()) as cache:
        async with open_backend(name, config, role="reader", cache=cache) as client:
            response = await client.chat(request)   # compressors.ChatRequest
        print(client.stats.summary())

See ``docs/backends.md`` for the configuration fields, the cache and ``audit backends``.
"""

from audit.backends._batch import (
    OUTPUT_LINE_BYTES,
    OfflineClient,
    OutputFileError,
    Scrub,
    batch_line,
    import_output,
    key_scrubber,
)
from audit.backends._cache import (
    CanonicalRequest,
    ResponseCache,
)
from audit.backends._check import check_backend
from audit.backends._client import BackendClient
from audit.backends._config import (
    BackendConfig,
    BackendsConfig,
    Role,
    default_cache_dir,
    load_config,
)
from audit.backends._determinism import (
    measure_determinism,
    probe_size,
)
from audit.backends._errors import (
    BackendConfigError,
    BackendError,
    BackendStartError,
    CacheError,
    ModelProvisionError,
    RoleNotConfiguredError,
    UnknownBackendError,
)
from audit.backends._local import SMOLLM2, ensure_local_model
from audit.backends._open import open_backend, resolve_api_key
from audit.backends._secrets import Scrubber, scrub
from audit.backends._wire import Completion

__all__ = [
    "OUTPUT_LINE_BYTES",
    "SMOLLM2",
    "BackendClient",
    "BackendConfig",
    "BackendConfigError",
    "BackendError",
    "BackendStartError",
    "BackendsConfig",
    "CacheError",
    "CanonicalRequest",
    "Completion",
    "ModelProvisionError",
    "OfflineClient",
    "OutputFileError",
    "ResponseCache",
    "Role",
    "RoleNotConfiguredError",
    "Scrub",
    "Scrubber",
    "UnknownBackendError",
    "batch_line",
    "check_backend",
    "default_cache_dir",
    "ensure_local_model",
    "import_output",
    "key_scrubber",
    "load_config",
    "measure_determinism",
    "open_backend",
    "probe_size",
    "resolve_api_key",
    "scrub",
]
