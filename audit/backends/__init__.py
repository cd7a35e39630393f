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
    CHAT_URL,
    DEFERRED,
    OUTPUT_LINE_BYTES,
    BatchAnswer,
    OfflineClient,
    OutputFileError,
    Scrub,
    batch_line,
    batch_model,
    import_output,
    key_scrubber,
    parse_output_line,
)
from audit.backends._cache import (
    KEY_VERSION,
    CacheStats,
    CanonicalRequest,
    Explanation,
    ResponseCache,
    canonical_request,
    request_from_material,
)
from audit.backends._check import CheckResult, check_backend, check_client, check_determinism
from audit.backends._client import (
    BackendClient,
    ClientStats,
    Completion,
    completion_response,
    from_cache,
    to_cache,
)
from audit.backends._config import (
    DEFAULT_CONFIG_FILE,
    ENV_PREFIX,
    LOCAL,
    ROLES,
    BackendConfig,
    BackendsConfig,
    Role,
    default_cache_dir,
    default_cache_path,
    load_config,
)
from audit.backends._determinism import (
    PROBE_REQUESTS,
    DeterminismResult,
    measure_determinism,
    probe_requests,
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
from audit.backends._local import SMOLLM2, LocalServerSpec, ensure_local_model, local_server
from audit.backends._open import open_backend, resolve_api_key
from audit.backends._secrets import Scrubber, scrub

__all__ = [
    "CHAT_URL",
    "DEFAULT_CONFIG_FILE",
    "DEFERRED",
    "ENV_PREFIX",
    "KEY_VERSION",
    "LOCAL",
    "OUTPUT_LINE_BYTES",
    "PROBE_REQUESTS",
    "ROLES",
    "SMOLLM2",
    "BackendClient",
    "BackendConfig",
    "BackendConfigError",
    "BackendError",
    "BackendStartError",
    "BackendsConfig",
    "BatchAnswer",
    "CacheError",
    "CacheStats",
    "CanonicalRequest",
    "CheckResult",
    "ClientStats",
    "Completion",
    "DeterminismResult",
    "Explanation",
    "LocalServerSpec",
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
    "batch_model",
    "canonical_request",
    "check_backend",
    "check_client",
    "check_determinism",
    "completion_response",
    "default_cache_dir",
    "default_cache_path",
    "ensure_local_model",
    "from_cache",
    "import_output",
    "key_scrubber",
    "load_config",
    "local_server",
    "measure_determinism",
    "open_backend",
    "parse_output_line",
    "probe_requests",
    "request_from_material",
    "resolve_api_key",
    "scrub",
    "to_cache",
]
