"""The Ray executor: the deterministic jobs of a run as Ray tasks, on a Ray cluster.

The job function of the local pool (``_executor._execute``) becomes a Ray task, and each
result goes through the same ``record`` callback: the driver alone writes the store, one
transaction per job.  So results are byte-identical to the local executor's, a task
whose worker died is run again (``max_retries``) and committed once, and a killed run
resumes with either executor (the executor is not part of the plan).  ``ray`` is an
optional dependency, imported only here; before any result is recorded, a worker is
checked to run the driver's memory-audit and compressor versions (a job key promises its
rows).
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from audit.errors import ExecutorError
from compressors import ConditionSpec, build

T = TypeVar("T")
Result = TypeVar("Result")

MAX_RETRIES = 3
"""Times Ray runs a task again after its worker process or node died."""
IN_FLIGHT_PER_CPU = 2
"""Tasks submitted per cluster CPU at once: enough to keep every CPU busy while the
driver commits, few enough that finished results do not pile up in the driver."""

INSTALL_HINT = "--executor ray needs Ray: pip install 'memory-audit[ray]'"


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for a machine that is no cluster: set to 0 before Ray is imported, Ray
takes 127.0.0.1 as the node's address, for the driver, the raylet, the GCS and the
workers alike.  Left alone on Linux, Ray takes the machine's outward address for the
node, and rewrites a 127.0.0.1 or localhost it is given (``--node-ip-address``,
``_node_ip_address``, the address of a head) into that address too: where the
machine has no network beyond loopback, or a head listens on loopback only, the
driver waits minutes for a GCS at an address where none answers."""


def import_ray(address: str | None = None) -> Any:
    """The ``ray`` module, or an ``ExecutorError`` saying how to install it.

    ``address``: the cluster the run will use (``--ray-address``, else ``RAY_ADDRESS``);
    none (a private Ray) or one on this machine's loopback keeps Ray on 127.0.0.1
    (``SINGLE_MACHINE``), unless the environment says otherwise.  Only the first import
    in a process can do that: the switch is read once.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a run
    if "ray" not in sys.modules and on_loopback(target_address(address)):
        os.environ.setdefault(SINGLE_MACHINE, "0")
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ExecutorError(INSTALL_HINT) from None


def target_address(address: str | None) -> str | None:
    """The cluster a run joins: ``address``, else ``RAY_ADDRESS``; ``None``: a private Ray."""
    return address or os.environ.get("RAY_ADDRESS") or None


def on_loopback(target: str | None) -> bool:
    """A private Ray (``None``), or a head at 127.0.0.1 or localhost."""
    if target is None:
        return True
    host = target.removeprefix("ray://").rpartition(":")[0]
    return host in LOOPBACK_HOSTS


@dataclass(frozen=True)
class RayCluster:
    """What the driver connected to."""

    address: str
    cpus: int
    nodes: int
    private: bool
    """A Ray instance started by this run (no address given): stopped at the end."""


def connect(address: str | None, workers: int) -> RayCluster:
    """Connect to the cluster at ``address`` (``ray start --head`` prints it), else to the
    one ``RAY_ADDRESS`` names, else start a private local Ray with ``workers`` CPUs."""
    ray = import_ray(address)
    if ray.is_initialized():
        ray.shutdown()
    target = target_address(address)
    if target is not None:
        _reachable(target)
    _authenticate(target)
    try:
        if target is None:
            # a private Ray never listens beyond the machine: on 127.0.0.1 (import_ray)
            context = ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        else:
            # no node address of the driver's own: Ray joins the raylet that runs on this
            # machine, at whatever address its head gave it (the outward one, or 127.0.0.1)
            context = ray.init(
                address=target,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as error:
        _restore_environment()
        where = target or "a private local instance"
        if _refused_token(error):
            raise ExecutorError(
                f"--executor ray: {where} refused this driver's authentication token (or "
                "its lack of one): set RAY_AUTH_MODE=token and the cluster's token in "
                "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (`ray get-auth-token` on the head)"
            ) from None
        raise ExecutorError(f"--executor ray: cannot connect to {where} ({error})") from None
    resources = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cpus = int(resources.get("CPU", 0))
    if cpus < 1:
        ray.shutdown()
        raise ExecutorError(f"--executor ray: the cluster at {target} has no CPU to run jobs on")
    gcs = getattr(context, "address_info", {}).get("gcs_address") or target or "local"
    return RayCluster(str(gcs), cpus, len(nodes), target is None)


def preflight(address: str | None) -> None:
    """Before any work: Ray is installed, and something listens at the address given
    (or at ``RAY_ADDRESS``); ``ExecutorError`` in one line otherwise."""
    import_ray(address)
    target = target_address(address)
    if target is not None:
        _reachable(target)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (one line) on an address nothing listens on: Ray itself would retry
    for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        if address == "auto":
            return
        raise ExecutorError(f"--ray-address: {address!r} is not HOST:PORT")
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except OSError as error:
        raise ExecutorError(
            f"--ray-address: nothing answers at {address} ({error.strerror or error}); "
            "start the cluster with `ray start --head` and give the address it prints"
        ) from None
    with connection:
        if not _speaks_grpc(connection, timeout_s):
            raise ExecutorError(
                f"--ray-address: {address} answers, but not as a Ray cluster does (no gRPC "
                "answer): is it the address `ray start --head` printed?"
            )


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""The HTTP/2 client preface and an empty SETTINGS frame."""


def _speaks_grpc(connection: socket.socket, timeout_s: float) -> bool:
    """Does the peer answer an HTTP/2 preface with a SETTINGS frame, as Ray's gRPC
    servers do at once?  A silent listener or an HTTP/1 server would otherwise hold
    ``ray.init`` for minutes."""
    connection.settimeout(timeout_s)
    try:
        connection.sendall(HTTP2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:
        return False
    return head[3] == 0x04  # the frame type of SETTINGS


AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
_set_here: list[str] = []
"""The environment variables ``_authenticate`` set (Ray sets ``RAY_AUTH_MODE`` too):
removed again when the run disconnects."""


def _authenticate(target: str | None) -> None:
    """Set up Ray's token authentication, unless the environment already says how.

    A private Ray gets a token of its own, in this process's environment, which its
    processes inherit.  Left alone, Ray 2.5x-2.6x turns authentication on for a private
    instance and writes a token to ``~/.ray/auth_token``; every later ``ray start
    --head`` of the user finds that file and turns authentication on as well, and a
    driver given such a head's address (rather than ``auto``) sends no token and is
    refused.  A head on this machine's loopback is treated as Ray treats ``auto``: if a
    token is at hand, the driver sends it.
    """
    _restore_environment()
    if target is None:
        if not any(name in os.environ for name in AUTH_VARIABLES):
            _set_here.extend(["RAY_AUTH_TOKEN", "RAY_AUTH_MODE"])
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
            os.environ["RAY_AUTH_MODE"] = "token"  # said, so Ray does not warn it chose it
            _reload_auth_settings()
        return
    if "RAY_AUTH_MODE" not in os.environ and on_loopback(target) and _token_at_hand():
        _set_here.append("RAY_AUTH_MODE")
        os.environ["RAY_AUTH_MODE"] = "token"
        _reload_auth_settings()


def _reload_auth_settings() -> None:
    """Make Ray read the authentication variables again: it reads them once, at import
    (as ``ray.init`` itself does when it turns authentication on)."""
    raylet = sys.modules.get("ray._raylet")
    config = getattr(raylet, "Config", None)
    loader = getattr(raylet, "AuthenticationTokenLoader", None)
    if config is not None:
        config.initialize("")
    if loader is not None:
        loader.instance().reset_cache()


def _token_at_hand() -> bool:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    file = Path(path) if path else Path.home() / ".ray" / "auth_token"
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or file.is_file()


def _restore_environment() -> None:
    if _set_here:
        while _set_here:
            os.environ.pop(_set_here.pop(), None)
        _reload_auth_settings()


def _refused_token(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if type(seen).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def disconnect() -> None:
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()
    _restore_environment()


def worker_identity(specs: Sequence[ConditionSpec]) -> dict[str, Any]:
    """What a worker would run: memory-audit's version and each condition's versioned
    label (building each also proves the condition imports there)."""
    try:
        version: str | None = metadata.version("memory-audit")
    except metadata.PackageNotFoundError:
        version = None
    labels: dict[str, str] = {}
    for spec in specs:
        try:
            labels[spec.label] = build(spec).label
        except Exception as error:  # reported by the driver, in one line
            labels[spec.label] = f"cannot be built on a worker: {type(error).__name__}: {error}"
    return {"memory-audit": version, "labels": labels}


def _check_workers(answer: Any, versions: dict[str, str]) -> None:
    """Refuse a cluster whose workers would run other code than the plan names
    (``answer``: a worker's ``worker_identity``, asked before the first job)."""
    ray = import_ray()
    try:
        found = ray.get(answer, timeout=300)
    except Exception as error:
        raise ExecutorError(
            f"--executor ray: a worker could not import memory-audit ({_cause(error)}); "
            "install the same memory-audit on every node"
        ) from None
    mine = worker_identity([])["memory-audit"]
    if found["memory-audit"] != mine:
        raise ExecutorError(
            f"--executor ray: the workers run memory-audit {found['memory-audit']}, the "
            f"driver {mine}: install the same version on every node"
        )
    differing = {label: got for label, got in found["labels"].items() if versions.get(label) != got}
    if differing:
        label, got = next(iter(differing.items()))
        raise ExecutorError(
            f"--executor ray: condition {label} is {versions.get(label)} on the driver but "
            f"{got!r} on a worker: install the same compressors on every node"
        )


def _cause(error: BaseException) -> str:
    cause = getattr(error, "cause", None)
    inner = cause if isinstance(cause, BaseException) else error
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[-1] if text else ''}"


def run_on_ray(
    jobs: Sequence[T],
    function: Callable[..., Result],
    args: tuple[Any, ...],
    record: Callable[[Result], None],
    address: str | None,
    workers: int,
    specs: Sequence[ConditionSpec],
    versions: dict[str, str],
) -> int:
    """Run ``function(job, *args)`` for every job as a Ray task on the cluster
    (``connect``) and ``record`` each result on the driver as it arrives (biggest jobs
    first, a bounded window in flight); returns the cluster's CPUs.

    One task asks a worker what it would run (``worker_identity``) ahead of the jobs, so
    it imports and builds while the others start; its answer is checked before the first
    job's result is looked at: nothing is recorded from a cluster it refuses.  A task
    whose worker died is run again by Ray (``MAX_RETRIES``); an exception raised by the
    job itself is re-raised here, as the local pool would.
    """
    cluster = connect(address, workers)
    try:
        ray = import_ray()
        identity = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(worker_identity)
        answer = identity.remote(list(specs))
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(function)
        shared = [ray.put(arg) for arg in args]  # sent to the object store once, not per task
        queue = sorted(jobs, key=lambda job: getattr(job, "size", 0))  # popped from the end
        pending: dict[Any, T] = {}
        window = max(1, cluster.cpus * IN_FLIGHT_PER_CPU)
        while queue or pending:
            while queue and len(pending) < window:
                job = queue.pop()
                pending[task.remote(job, *shared)] = job
            done, _ = ray.wait(list(pending), num_returns=1)
            if answer is not None:
                _check_workers(answer, versions)
                answer = None
            for ref in done:
                job = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    cause = getattr(error, "cause", None)
                    if isinstance(cause, BaseException):
                        raise cause from None
                    raise
                except ray.exceptions.RayError as error:
                    key = getattr(job, "key", "?")
                    raise ExecutorError(
                        f"--executor ray: job {key} was lost after {MAX_RETRIES} retries "
                        f"({_cause(error)}); rerun the same command to resume"
                    ) from None
                record(result)
    finally:
        disconnect()
    return cluster.cpus
