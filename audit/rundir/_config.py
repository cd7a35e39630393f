"""``config.json`` and ``costs.json``: typed, written whole, read back with named errors.

``config.json`` holds the run plan (what determines the results; compared on resume),
the environment it ran in and when it was created.  ``costs.json`` adds one entry per
invocation of ``audit run`` on the directory (a resumed run has several): the work
each stage did.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from audit.errors import RunDataError, RunDirectoryError
from audit.plan import RunPlan
from audit.rundir._layout import CONFIG_FILE, COSTS_FILE, write_atomically


class Environment(BaseModel):
    """Where a run was made: package versions, Python, machine, git commit."""

    model_config = ConfigDict(extra="allow")

    packages: dict[str, str | None] = Field(default_factory=dict)
    python: str | None = None
    machine: str | None = None
    git_commit: str | None = None


class RunConfigFile(BaseModel):
    """The whole of ``config.json``."""

    model_config = ConfigDict(extra="allow")

    config: RunPlan
    environment: Environment = Field(default_factory=Environment)
    created: str | None = None
    """UTC, ``%Y-%m-%dT%H:%M:%SZ``."""


def environment() -> Environment:
    """Package versions, Python, machine and git commit (when available)."""
    versions: dict[str, str | None] = {}
    for name in ("memory-audit", "pydantic", "pandas", "rank-bm25", "typer"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return Environment(
        packages=versions,
        python=sys.version.split()[0],
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        git_commit=commit,
    )


def read_config_file(directory: Path) -> RunConfigFile:
    """``config.json`` of a run directory, or a ``RunDataError`` naming what is wrong."""
    path = directory / CONFIG_FILE
    try:
        return RunConfigFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise RunDataError(f"{path}: missing; not a run directory") from None
    except OSError as error:
        raise RunDataError(f"{path}: unreadable ({error.strerror or error})") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(the file)"
        raise RunDataError(f"{path}: {where}: {first['msg']}") from None


def prepare_directory(out: Path, plan: RunPlan) -> bool:
    """Create the run directory with its ``config.json``, or accept it for resuming.

    Returns True when resuming.  A directory holding another run (its plan differs),
    or anything that is not a run, is refused: a run is never overwritten.
    """
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"{out} exists and is not a directory")
    config_path = out / CONFIG_FILE
    if out.exists() and any(out.iterdir()):
        if not config_path.exists():
            raise RunDirectoryError(
                f"{out} is not empty and holds no {CONFIG_FILE}: not a run directory; "
                "choose another --out"
            )
        try:
            stored = json.loads(config_path.read_text(encoding="utf-8"))["config"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise RunDirectoryError(f"{config_path}: unreadable ({error})") from None
        current = plan.model_dump(mode="json")
        differing = sorted(
            k for k in current.keys() | stored.keys() if current.get(k) != stored.get(k)
        )
        if differing:
            raise RunDirectoryError(
                f"{out} holds a different run (differs in: {', '.join(differing)}); "
                "it is never overwritten: choose another --out"
            )
        return True
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": plan.model_dump(mode="json"),
        "environment": environment().model_dump(mode="json"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomically(config_path, json.dumps(payload, indent=2) + "\n")
    return False


class StageCost(BaseModel):
    """The deterministic stage of one invocation."""

    model_config = ConfigDict(extra="allow")

    jobs: int = 0
    seconds: float = 0.0
    executor: str | None = None
    """``local`` (a process pool) or ``ray``; None in runs made before there was a choice."""
    cpus: int | None = None
    """With ``ray``: the cluster's CPUs."""


class ClientCounters(BaseModel):
    """One backend client's counters (``audit.backends.ClientStats``)."""

    model_config = ConfigDict(extra="allow")

    requests: int = 0
    """Chat calls made by the stage."""
    sent: int = 0
    """Distinct requests that went to a server."""
    cache_hits: int = 0
    """Answered from the response cache: not sent."""
    deduplicated: int = 0
    """Answered by an identical request of this run: not sent."""
    attempts: int = 0
    retries: int = 0
    failed: int = 0
    """Infrastructure failures after retries (NA)."""
    rejected: int = 0
    length_cutoffs: int = 0
    reasoning_only: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_chars: int = 0
    status_counts: dict[str, int] = Field(default_factory=dict)


class LLMStageCost(BaseModel):
    """The LLM stage of one invocation, with each backend client's counters."""

    model_config = ConfigDict(extra="allow")

    units: int = 0
    seconds: float = 0.0
    writer: ClientCounters | None = None
    reader: ClientCounters | None = None
    writer_and_reader: ClientCounters | None = None
    """One backend serving both roles: its counters, once."""


class Invocation(BaseModel):
    model_config = ConfigDict(extra="allow")

    deterministic: StageCost | None = None
    llm: LLMStageCost | None = None


class CostsFile(BaseModel):
    """The whole of ``costs.json``: one entry per invocation of ``audit run``."""

    model_config = ConfigDict(extra="allow")

    invocations: list[Invocation] = Field(default_factory=list)


def read_costs(directory: Path) -> CostsFile | None:
    """``costs.json``, or None when there is none; ``RunDataError`` when unreadable."""
    path = directory / COSTS_FILE
    if not path.exists():
        return None
    try:
        return CostsFile.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as error:
        raise RunDataError(f"{path}: unreadable ({error})") from None


def append_costs(directory: Path, invocation: Invocation) -> None:
    """Add this invocation's costs to ``costs.json`` (written whole)."""
    path = directory / COSTS_FILE
    costs = read_costs(directory) or CostsFile()
    costs.invocations.append(invocation)
    data = costs.model_dump(mode="json", exclude_none=True)
    write_atomically(path, json.dumps(data, indent=2, default=str) + "\n")
