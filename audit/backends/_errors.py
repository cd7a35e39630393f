"""Every exception the backend layer raises, in one place.

::

    BackendError                    anything raised by ``audit.backends``
    ├── BackendConfigError          the configuration is wrong (names the file / variable and field)
    │   ├── UnknownBackendError     no backend of that name is configured
    │   └── RoleNotConfiguredError  the backend exists but does not serve that role
    ├── BackendStartError           a backend could not be brought up (e.g. the local server)
    │   └── ModelProvisionError     the local model file could not be obtained or verified
    └── CacheError                  the response cache file is unusable

What is *not* an exception: a request that failed for infrastructure reasons after its
retries (connection refused, 5xx, timeout) comes back as a ``ChatResponse`` with ``error``
set (the audit scores it NA), and a request the server refused as invalid (HTTP 400) comes
back with ``rejected`` set (an outcome of the read).  A running audit never sees a backend
exception mid-run; every one of these is raised before work starts, or by the CLI.

No message here ever contains an API key: keys are read from the environment when a client
is created and kept out of every ``repr``, log line and error text.
"""

from __future__ import annotations

from histories import MemoryAuditError


class BackendError(MemoryAuditError):
    """Base class of every exception raised by ``audit.backends``."""


class BackendConfigError(BackendError):
    """The backend configuration is invalid; the message names where (file or variable)
    and which field."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        parts = [p for p in (source, field) if p]
        super().__init__(": ".join([*parts, message]))


class UnknownBackendError(BackendConfigError):
    """No backend of this name is configured."""


class RoleNotConfiguredError(BackendConfigError):
    """The backend exists but is not configured for the requested role."""


class BackendStartError(BackendError):
    """A backend could not be started or reached before any request was made."""

    exit_code = 1


class ModelProvisionError(BackendStartError):
    """The embedded model file could not be downloaded, extracted or verified."""


class CacheError(BackendError):
    """The response cache database cannot be opened or has an unknown layout."""
