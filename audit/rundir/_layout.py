"""The files of a run directory: their names, how they are written, where runs go.

Every file of a run directory is named here.  A file is written whole (a temporary
sibling, then a rename; a killed writer's sibling is removed by the next invocation,
``remove_stale_temps``), and read only when it is a regular file (a FIFO in its place
would block the reader forever).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from audit.errors import RunDataError, RunDirectoryError
from audit.regular_files import file_kind
from audit.regular_files import open_regular as open_regular_file
from histories import MemoryAuditError

M = TypeVar("M", bound=BaseModel)

FORMATS: dict[int, str] = {
    1: "one JSON row per read in the store, a zlib blob per memory (before release)",
    4: "a job's memories as one compressed block; results.csv and .parquet both whole",
    5: "results.parquet (zstd, a row group per job) the one copy of the rows; a memory "
    "is an integer id into the store's memory table; results.csv only on request",
    6: "results.parquet's row groups gather whole jobs, about 65,536 rows each",
}
"""Every run-directory format, append-only: add a number and what changed when a
file's layout changes (2 and 3 were never written by a release), and the store's
migration (``_store.MIGRATIONS``).  A run of format 5 is read as it is and resumed into
this format; one of format 4 is read by `audit report` when its result files are whole,
never resumed; a store older than 4 is refused with its format named."""
RUN_FORMAT = max(FORMATS)
"""The format of a run directory, one number for all its files: ``manifest.json``
records it, ``store.sqlite`` and results.parquet's metadata carry it."""


def newer_format(where: Path, version: int | None) -> str | None:
    """The one text for a run directory (or file of one) written by a newer
    memory-audit, whose layout this version cannot know: what it is and the way out.
    None when this version knows ``version``."""
    if version is None or version <= RUN_FORMAT:
        return None
    return (
        f"{where} was written by a newer memory-audit (run directory format {version}; "
        f"this one knows formats up to {RUN_FORMAT}): read, resume or export it with "
        "that version (pip install -U memory-audit)"
    )


CONFIG_FILE = "config.json"
"""The resolved run plan, the environment and the creation time."""
RESULTS_CSV = "results.csv"
"""The rows as CSV, only on request (``audit run --csv``, ``audit export RUN --csv``)."""
RESULTS_PARQUET = "results.parquet"
"""One row per read, typed (``rundir.STORED_SCHEMA``), in plan order: the run's results."""
SUMMARY_FILE = "summary.json"
"""Every score of the run (``audit.scoring``)."""
STORE_FILE = "store.sqlite"
"""Finished jobs (done marks, memories, rows not yet in results.parquet), one job per
transaction."""
COSTS_FILE = "costs.json"
"""Per-stage work of every invocation (jobs, requests, tokens, seconds)."""
LOG_FILE = "run.log"
"""Each distinct compressor error once, with its count and traceback, then the jobs'
other lines (rewritten from the store at the end, ``_errors.log_text``)."""
MANIFEST_FILE = "manifest.json"
"""Planned and finished units, the run id, the result files' checksums (``_manifest``)."""
REPORT_DIR = "report"
"""Where ``audit report`` writes by default."""
REPLICATION_FILE = "replication.json"
"""In the parent of a replication (``audit run --seeds``): per seed and pooled scores."""


def seed_run_dir(parent: Path, seed: int) -> Path:
    """The run directory of one generation seed of a replication."""
    return parent / f"seed-{seed}"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``path`` to write; renamed over ``path`` when the
    block ends normally, removed when it raises.

    The name is unique per call, so concurrent invocations on one run directory never
    write into each other's temporary file; it is created with the process's umask,
    like any file the user makes.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.tmp$")
"""What ``atomic_path`` names a temporary sibling: ``.NAME.PID.HEX8.tmp``."""


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's included); a pid that cannot
    exist is not alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False  # gone, or past any pid the system can give
    except OSError:
        return True  # someone else's (PermissionError), or cannot tell: keep its file
    return True


def remove_stale_temps(directory: Path) -> list[Path]:
    """Remove the temporary siblings (``atomic_path``) that a killed process left in
    ``directory``: those whose writer's pid is no longer alive.  A live process's file
    (another invocation writing now) is never touched.  Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        found = _TEMP_NAME.match(entry.name)
        if found is None or _alive(int(found["pid"])):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove
        removed.append(Path(entry.path))
    return removed


class NotRegularFileError(MemoryAuditError, OSError):
    """A run file that is a directory, a FIFO, a socket or a device: never read (a FIFO
    would block the reader forever).  An ``OSError`` too, so every reader that names an
    unreadable file names this one the same way."""

    exit_code = 1

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def not_regular(path: Path, mode: int) -> NotRegularFileError:
    """The error for a run file that is not a regular file (``mode`` from a stat)."""
    return NotRegularFileError(
        0,
        f"not a regular file ({file_kind(mode)}), so it is not read: put the run's own file back",
        str(path),
    )


def check_regular(path: Path) -> None:
    """Raise ``NotRegularFileError`` when ``path`` exists and is not a regular file (a
    symbolic link to one is fine); ``FileNotFoundError`` when it does not exist."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode)


@contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for binary reading, refused (``NotRegularFileError``) unless it
    is a regular file: opening does not wait for a FIFO's writer, and nothing is read
    from anything but a file."""
    with open_regular_file(path, not_regular) as handle:
        yield handle


def read_run_file(path: Path) -> bytes:
    """A run file's bytes (see ``open_regular``)."""
    with open_regular(path) as handle:
        return handle.read()


def read_typed(path: Path, model: type[M], *, way_out: str = "") -> M | None:
    """A run file parsed into ``model``; None when it does not exist.  A file that cannot
    be read or does not validate is a ``RunDataError`` naming it (and the first bad
    field), followed by ``way_out`` when given."""
    try:
        raw = read_run_file(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RunDataError(f"{path}: unreadable ({error.strerror or error})") from None
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(the file)"
        raise RunDataError(
            f"{path}: damaged ({where}: {first['msg'][:160]})" + (f"; {way_out}" if way_out else "")
        ) from None


def write_atomically(path: Path, data: bytes | str) -> None:
    """Write ``path`` whole or not at all (temporary sibling, then rename)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_path(path) as temp, temp.open("xb") as handle:
        handle.write(data)


def default_run_dir(root: Path = Path("runs")) -> Path:
    """A new timestamped run directory under ``runs/``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / stamp
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"{stamp}-{suffix}"
    return path


_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def named_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """``runs/NAME`` for ``--name``; a name is one plain path segment, so it can never
    reach outside ``runs/`` (no separators, no ``..``, no leading dot)."""
    if not _RUN_NAME.match(name) or ".." in name:
        raise RunDirectoryError(
            f"--name {name!r}: a run name is 1-100 letters, digits, '_', '.', '-', "
            "starting with a letter or digit, and never contains '..' or '/'"
        )
    return root / name
