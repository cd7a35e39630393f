"""``config.json`` and ``costs.json``: typed, written whole, read back with named errors.

``config.json`` holds the run plan (what determines the results; compared on resume),
the environment it ran in and when it was created.  ``costs.json`` adds one entry per
invocation of ``audit run`` on the directory (a resumed run has several): the work
each stage did.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from audit.counters import ClientCounters
from audit.errors import RunDataError, RunDirectoryError
from audit.plan import RunPlan
from audit.rundir._layout import (
    CONFIG_FILE,
    COSTS_FILE,
    read_run_file,
    read_typed,
    write_atomically,
)
from audit.rundir._manifest import new_run_id


class _Open(BaseModel):
    """A record of the run directory: fields a later version adds are kept, not refused."""

    model_config = ConfigDict(extra="allow")


class Environment(_Open):
    """Where a run was made: package versions, Python, machine, git commit."""

    packages: dict[str, str | None] = Field(default_factory=dict)
    python: str | None = None
    machine: str | None = None
    git_commit: str | None = None


class Determinism(_Open):
    """A backend's determinism probe: the same requests, one at a time and all at once."""

    identical: int
    compared: int
    requests: int
    share: float | None = None


class BackendRecord(_Open):
    """What served one LLM role of a run, and how reproducible it measured."""

    roles: list[str] = Field(default_factory=list)
    kind: str | None = None
    model: str | None = None
    mode: str | None = None
    """``reproducible`` or ``throughput`` for the embedded backend; ``server`` for an
    OpenAI-compatible server (its own configuration decides)."""
    determinism: Determinism | None = None
    """None: not measured (``unmeasured`` says why)."""
    measured: str | None = None
    unmeasured: str | None = None
    """Why there is no measurement: ``--no-determinism``, or the probe failed."""
    measurements: int = 1
    """Invocations that measured it; ``determinism`` is the lowest of them."""


class RunConfigFile(_Open):
    """The whole of ``config.json``."""

    config: RunPlan
    environment: Environment = Field(default_factory=Environment)
    created: str | None = None
    """UTC, ``%Y-%m-%dT%H:%M:%SZ``."""
    run_id: str | None = None
    """The run's identity (``manifest.json`` and ``store.sqlite`` carry it too); None in
    a run made before run ids."""
    backends: dict[str, BackendRecord] = Field(default_factory=dict)
    """Per backend name (the ``reader`` / writer label of the results): what served it,
    its mode, and its determinism as first measured by this run."""
    scoring: int = 0
    """The scoring version the run was made under (``audit.scoring.SCORING_VERSION``):
    what its rows and scores mean.  0: a run made before it was recorded."""


def record_backends(directory: Path, records: dict[str, BackendRecord]) -> None:
    """Record each backend's determinism in ``config.json``.  A resume measures again,
    and the lowest measurement stays: a server that changed between invocations (a
    restart with other settings) makes every read's record doubtful, not only its own."""
    path = directory / CONFIG_FILE
    with _directory_lock(directory):
        payload = json.loads(path.read_text(encoding="utf-8"))
        known = payload.get("backends")
        known = dict(known) if isinstance(known, dict) else {}
        merged = dict(known)
        for name, record in records.items():
            old = known.get(name)
            merged[name] = _worse(
                BackendRecord.model_validate(old) if isinstance(old, dict) else None, record
            ).model_dump(mode="json")
        if merged == known:
            return
        payload["backends"] = merged
        write_atomically(path, json.dumps(payload, indent=2) + "\n")


def _worse(old: BackendRecord | None, new: BackendRecord) -> BackendRecord:
    """The record to keep: the lower of two measurements (an unmeasured one never
    replaces a measurement)."""
    if old is None:
        return new
    if new.determinism is None:
        return old
    count = (old.measurements if old.determinism is not None else 0) + 1
    if old.determinism is None or _share(new.determinism) < _share(old.determinism):
        return new.model_copy(update={"measurements": count})
    return old.model_copy(update={"measurements": count})


def _share(probe: Determinism) -> float:
    return probe.identical / probe.compared if probe.compared else 1.0


def environment() -> Environment:
    """Package versions, Python, machine and git commit (when available)."""
    versions: dict[str, str | None] = dict.fromkeys(
        ("memory-audit", "pydantic", "pandas", "rank-bm25", "typer")
    )
    for name in versions:
        with suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    commit = None
    with suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = out.stdout.strip() or None
    return Environment(
        packages=versions,
        python=sys.version.split()[0],
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        git_commit=commit,
    )


def read_config_file(directory: Path) -> RunConfigFile:
    """``config.json`` of a run directory, or a ``RunDataError`` naming what is wrong."""
    path = directory / CONFIG_FILE
    config = read_typed(
        path,
        RunConfigFile,
        way_out="it records what the run is: restore it from a copy, or start a new run "
        "with another --out",
    )
    if config is None:
        raise RunDataError(f"{path}: missing; not a run directory")
    return config


def prepare_directory(out: Path, plan: RunPlan, *, scoring: int) -> tuple[bool, str]:
    """Create the run directory with its ``config.json``, or accept it for resuming.

    ``scoring`` is the scoring version recorded in a new run's ``config.json`` (the
    caller's ``audit.scoring.SCORING_VERSION``: this room does not score).
    Returns (resuming, run id).  A directory holding another run (its plan differs),
    or anything that is not a run, is refused: a run is never overwritten.  A run made
    before run ids gets one now.
    """
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"{out} exists and is not a directory")
    config_path = out / CONFIG_FILE
    if not config_path.exists():
        if out.exists() and any(not _ours_in_flight(p.name) for p in out.iterdir()):
            raise RunDirectoryError(
                f"{out} is not empty and holds no {CONFIG_FILE}: not a run directory; "
                "choose another --out"
            )
        out.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id()
        payload = {
            "config": plan.model_dump(mode="json"),
            "environment": environment().model_dump(mode="json"),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "run_id": run_id,
            "scoring": scoring,
        }
        if _create_exclusively(config_path, json.dumps(payload, indent=2) + "\n"):
            return False, run_id
        # another invocation created this run a moment ago: resume it, or refuse it
    try:
        payload = json.loads(read_run_file(config_path).decode("utf-8"))
        stored = payload["config"]
        if not isinstance(stored, dict):
            raise TypeError("'config' is not an object")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RunDirectoryError(
            f"{config_path}: damaged or unreadable ({_short(error)}); it says what this "
            "run is, so it cannot be resumed: restore the file, or run again with "
            "another --out"
        ) from None
    current = plan.model_dump(mode="json")
    differing = sorted(k for k in current.keys() | stored.keys() if current.get(k) != stored.get(k))
    if differing:
        raise RunDirectoryError(
            f"{out} holds a different run (differs in: {', '.join(differing)}); "
            "it is never overwritten: choose another --out"
        )
    run_id = payload.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        run_id = new_run_id()
        payload["run_id"] = run_id
        write_atomically(config_path, json.dumps(payload, indent=2) + "\n")
    return True, run_id


def _ours_in_flight(name: str) -> bool:
    """A temporary file of ``atomic_path`` (another invocation is creating this run)."""
    return name.startswith(".") and name.endswith(".tmp")


def _create_exclusively(path: Path, text: str) -> bool:
    """Write ``path`` whole, only if it does not exist yet (False: someone else did).

    The whole file is written to a temporary sibling and linked into place: a link
    never replaces an existing name, so two invocations racing to create one run
    directory cannot both win, and nobody reads a half-written file.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    return True


def _short(error: BaseException) -> str:
    """An exception's first line, bounded (a JSON error can quote a long line)."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


class StageCost(_Open):
    """The deterministic stage of one invocation."""

    jobs: int = 0
    seconds: float = 0.0
    executor: str | None = None
    """``local`` (a process pool) or ``ray``; None in runs made before there was a choice."""
    cpus: int | None = None
    """With ``ray``: the cluster's CPUs."""
    conditions: dict[str, float] = Field(default_factory=dict)
    """Wall seconds each condition took in the jobs this invocation ran, summed over
    them (in the workers: with several, more than ``seconds``)."""


class LLMStageCost(_Open):
    """The LLM stage of one invocation, with each backend client's counters."""

    units: int = 0
    seconds: float = 0.0
    writer: ClientCounters | None = None
    reader: ClientCounters | None = None
    writer_and_reader: ClientCounters | None = None
    """One backend serving both roles: its counters, once."""


class StepCost(_Open):
    """A step outside the two stages: opening the LLM backends (fetching a model,
    starting the embedded server), or the determinism probe."""

    seconds: float = 0.0
    requests: int = 0
    """Requests sent to a server (the probe's, both passes; none of the stage's)."""


class Invocation(_Open):
    """One invocation of ``audit run`` (or ``audit resume``) on the directory."""

    id: str | None = None
    """Random; the entry is rewritten under it as the invocation goes on."""
    started: str | None = None
    ended: str | None = None
    outcome: str | None = None
    """``finished``, or why it stopped (``interrupted``, ``failed: ...``); None while it
    runs (or when it was killed)."""
    backends_start: StepCost | None = None
    """Opening the LLM backends, before the deterministic stage."""
    deterministic: StageCost | None = None
    probe: StepCost | None = None
    """The determinism probe, between the deterministic stage and the LLM stage."""
    llm: LLMStageCost | None = None
    backends: dict[str, BackendRecord] = Field(default_factory=dict)
    """The LLM backends this invocation measured before its stage (determinism probe)."""
    dropped_jobs: list[str] = Field(default_factory=list)
    """Job records of the run's own store that its plan never made: damage, dropped."""


class CostsFile(_Open):
    """The whole of ``costs.json``: one entry per invocation of ``audit run``."""

    invocations: list[Invocation] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def read_costs(directory: Path) -> CostsFile | None:
    """``costs.json``, or None when there is none; ``RunDataError`` (one line, naming
    the file) when it cannot be read."""
    return read_typed(directory / COSTS_FILE, CostsFile)


@contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run directory: concurrent invocations update
    ``costs.json`` one at a time, so none loses another's entry."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def record_costs(directory: Path, invocation: Invocation) -> None:
    """Write this invocation's entry into ``costs.json`` (added, or updated in place by
    its id), whole.

    A ``costs.json`` that cannot be read (a disk that filled while it was written) is
    moved aside, never deleted, and a fresh file notes where it went: one bad file
    must not block every later invocation.
    """
    path = directory / COSTS_FILE
    with _directory_lock(directory):
        try:
            costs = read_costs(directory) or CostsFile()
        except RunDataError as error:
            aside = path.with_name(f"{COSTS_FILE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(path, aside)
            costs = CostsFile(
                notes=[f"{error}: moved to {aside.name}; invocations before then are there"]
            )
        for index, entry in enumerate(costs.invocations):
            if invocation.id is not None and entry.id == invocation.id:
                costs.invocations[index] = invocation
                break
        else:
            costs.invocations.append(invocation)
        data = costs.model_dump(mode="json", exclude_none=True)
        write_atomically(path, json.dumps(data, indent=2, default=str) + "\n")
