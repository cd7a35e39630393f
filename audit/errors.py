"""Every error ``audit`` raises on purpose, rooted in ``histories.MemoryAuditError``.

The whole tree, each class with the command line's exit status (``exit_code``: 2 for
bad input, 1 for a setup that failed; ``tests/test_architecture.py`` keeps this
drawing exact)::

    MemoryAuditError (2)              every error memory-audit raises on purpose
    ├── PairFileError (2)             histories: a pair file that does not parse
    ├── PairPropertyError (2)         histories: a pair that does not verify
    ├── TransformError (2)            histories: a transform broke a pair
    ├── RenderParseError (2)          histories: a rendering that does not parse back
    ├── ChatParseError (2)            histories: a chat-form memory that does not parse
    ├── UnknownFamilyError (2)        histories: no family of that name
    ├── GenerationError (1)           histories: a family produced a pair E_q rejects
    ├── NaturalSourceError (2)        histories.natural: a source file that cannot be used
    ├── UnknownCompressorError (2)    compressors: no condition of that name
    ├── InvalidParamsError (2)        compressors: a condition's parameters
    ├── ChatUnavailableError (2)      compressors: no chat client (the reads are NA)
    │   └── ExternalUnavailableError (2)   a cmd:/http: system that stopped answering
    │       └── ExternalProtocolError (2)  ... or answered outside the protocol
    ├── ExternalMemoryError (2)       compressors.adapters: a system's own error
    ├── AdapterNotInstalledError (1)  compressors.adapters: its extra is missing
    ├── NotRegularFileError (1)       a run file that is a FIFO, a directory, a device
    ├── UpdateRaised (2)              engine: where a compressor's update raised; the run
    │                                 records it and ends with status 5, never escapes
    ├── ImpureUpdateError (2)         engine: an update that is not pure (recorded so too)
    ├── PlanError (2)                 a run plan that does not parse: names the option
    ├── RunDirectoryError (2)         the run directory cannot hold or resume this run
    │   ├── StoreFormatError (2)      its store was written by another version
    │   └── RunStorageError (1)       its files cannot be written or its store opened
    ├── RunDataError (2)              a run directory cannot be read back for a report
    ├── PluginScaffoldError (2)       a compressor plugin cannot be scaffolded
    ├── ExecutorError (1)             Ray missing or unreachable, other code, a lost job
    ├── BatchError (2)                a batch file or export that cannot be used
    └── BackendError (2)              audit.backends
        ├── BackendConfigError (2)    a backend's configuration: names the field
        │   ├── UnknownBackendError (2)       no backend of that name
        │   └── RoleNotConfiguredError (2)    not configured for that role
        ├── BackendStartError (1)     a backend that cannot be started or reached
        │   └── ModelProvisionError (1)       the embedded model cannot be fetched
        ├── CacheError (2)            the response cache cannot be used
        └── OutputFileError (2)       a batch runner's output file

The command line prints any of these as one line (``error: ...``) and exits with the
status above; anything else that escapes is a bug, printed with its traceback and a
request to report it. A run's own outcomes have statuses of their own (3 incomplete,
4 damaged, 5 a compressor raised), and so has the gate, ``audit compare
--fail-on-regression`` (6 a later run's system is worse than the baseline's, 7 the runs
cannot be compared): docs/reliability.md, "Run states and exit statuses".
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


class ExecutorError(MemoryAuditError, RuntimeError):
    """The executor cannot run the jobs: Ray is not installed or not reachable, its
    workers run other code than the driver, or a job was lost after its retries."""

    exit_code = 1


class BatchError(MemoryAuditError, ValueError):
    """A batch export or import that cannot be done; the message names the file (and
    line) or the run directory."""


__all__ = [
    "BatchError",
    "ExecutorError",
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
