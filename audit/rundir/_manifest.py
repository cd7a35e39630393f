"""``manifest.json``: what a run planned, what it finished, and its result files' checksums.

Each invocation writes it whole at its start (``running``) and at its end (``complete``,
``incomplete``, or ``stopped`` and why), so a killed run still says ``running``: the
report (``_integrity``) can then never take a partial or damaged run for a whole one.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from audit.rundir._layout import (
    MANIFEST_FILE,
    RUN_FORMAT,
    open_regular,
    read_typed,
    write_atomically,
)

MANIFEST_FORMAT = RUN_FORMAT
"""The run directory's one format number, as ``manifest.json`` records it (a manifest
of format 1 is a run of the layout before format 5)."""
RunState = Literal["running", "stopped", "complete", "incomplete"]
"""``running``: an invocation started and has not ended (or was killed); ``stopped``:
it ended on an error (``stopped`` says which); ``complete``: every planned unit is
finished and no read is NA for want of a server; ``incomplete``: the invocation ended,
but some LLM reads are NA (an outage): resuming retries them."""


class FileRecord(BaseModel):
    """A result file as the run wrote it."""

    model_config = ConfigDict(extra="forbid")

    sha256: str
    bytes: int


class RunManifest(BaseModel):
    """The whole of ``manifest.json``."""

    model_config = ConfigDict(extra="allow")

    format: int = MANIFEST_FORMAT
    run_id: str
    """The run's identity, also in ``config.json`` and ``store.sqlite``."""
    state: RunState
    planned_jobs: list[str] = Field(default_factory=list)
    """Keys of the deterministic jobs (one per source pair), in plan order."""
    planned_units: list[str] = Field(default_factory=list)
    """Keys of the LLM stage's units (pair x condition x budget x repeat), in plan order."""
    finished_jobs: int = 0
    finished_units: int = 0
    na_units: int = 0
    """Finished LLM units holding a read that is NA for want of a server."""
    na_jobs: int = 0
    """Finished deterministic jobs holding a read that is NA: an external memory system
    (``cmd:``, ``http:``) that did not answer.  Run again by a resume, like NA units."""
    rows: int | None = None
    """Rows of results.csv as written by the last finished invocation."""
    files: dict[str, FileRecord] = Field(default_factory=dict)
    """sha256 and size of results.parquet and summary.json (and results.csv when the run
    wrote one)."""
    stopped: str | None = None
    """Why the last invocation stopped early (state ``stopped``)."""
    updated: str = ""
    """UTC, ``%Y-%m-%dT%H:%M:%SZ``."""

    @property
    def planned(self) -> list[str]:
        return [*self.planned_jobs, *self.planned_units]


def new_run_id() -> str:
    """A fresh run identity (random: two runs never share one)."""
    return uuid.uuid4().hex


def file_record(path: Path) -> FileRecord:
    """sha256 and size of a file, read in chunks (``NotRegularFileError`` for anything
    but a regular file)."""
    digest = hashlib.sha256()
    size = 0
    with open_regular(path) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return FileRecord(sha256=digest.hexdigest(), bytes=size)


def read_manifest(directory: Path) -> RunManifest | None:
    """``manifest.json``, None when there is none (a run made before manifests);
    ``RunDataError`` naming the file when it cannot be read (or is not a regular file)."""
    return read_typed(directory / MANIFEST_FILE, RunManifest)


def write_manifest(directory: Path, manifest: RunManifest) -> None:
    """Write ``manifest.json`` whole, stamped with the time."""
    manifest.updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = manifest.model_dump(mode="json")
    write_atomically(directory / MANIFEST_FILE, json.dumps(data, indent=1) + "\n")
