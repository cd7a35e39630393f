"""Every error ``audit`` raises on purpose, rooted in ``histories.MemoryAuditError``.

::

    MemoryAuditError                 (histories) every error memory-audit raises on purpose
    ├── PairFileError, PairPropertyError, TransformError, RenderParseError,
    │   UnknownFamilyError, GenerationError                       (histories)
    ├── UnknownCompressorError, InvalidParamsError, ChatUnavailableError  (compressors)
    ├── PlanError                    a run plan that does not parse: names the option and item
    ├── RunDirectoryError            the run directory cannot hold or resume this run
    │   ├── StoreFormatError         its store was written by another version of memory-audit
    │   └── RunStorageError          its files cannot be written, or its store opened
    │                                (a full disk, a read-only medium, a damaged store)
    ├── RunDataError                 a run directory cannot be read back for a report
    ├── PluginScaffoldError          a compressor plugin cannot be scaffolded
    └── BackendError                 (audit.backends: configuration, start-up, the cache)

The command line prints any of these as one line (``error: ...``) and exits 2 (bad
input) or 1 (a failed setup); anything else that escapes is a bug, printed with its
traceback and a request to report it.
"""

from __future__ import annotations

from histories import MemoryAuditError


class PlanError(MemoryAuditError, ValueError):
    """A run plan that does not parse; the message names the option (or field) and item."""


class RunDirectoryError(MemoryAuditError, ValueError):
    """The output directory cannot hold this run (another run is there, or a file)."""


class StoreFormatError(RunDirectoryError):
    """The run directory's store was written by another version of memory-audit."""


class RunStorageError(RunDirectoryError):
    """The run directory cannot be written, or its store opened: a full disk, a
    read-only medium, a damaged store.  The message names the file and the way out."""

    exit_code = 1


class RunDataError(MemoryAuditError, ValueError):
    """The directory is not a readable run directory; the message names the file."""


class PluginScaffoldError(MemoryAuditError, ValueError):
    """A plugin cannot be scaffolded; the message names the problem."""


__all__ = [
    "MemoryAuditError",
    "PlanError",
    "PluginScaffoldError",
    "RunDataError",
    "RunDirectoryError",
    "RunStorageError",
    "StoreFormatError",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM: the command stops as Ctrl-C stops it (a run records ``stopped``).

    A ``KeyboardInterrupt``, not a ``SystemExit``: a compressor that calls ``sys.exit`` is
    a compressor that raised, and the job records it; a signal to the audit itself must
    never be mistaken for one.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.code = 128 + signum
