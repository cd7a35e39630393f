"""The guard an external memory process runs under (``cmd:``): run as a script,
``python -I -S _guard.py PARENT_PID STATUS_FD COMMAND...``, never imported.

``PR_SET_PDEATHSIG`` reaches only the direct child of the audit, so a ``bash -c``
or a launcher's helpers would outlive an audit killed by SIGKILL. The guard is that
direct child instead: it leads a process group of its own (the audit starts it in a
new session) and gets SIGTERM when the audit dies (set before its exec, kept across
it); the command runs as its child, in its group, on its standard input, output and
error. On SIGTERM the guard ends the whole group: SIGTERM, a second's grace, then
SIGKILL. When the command exits the guard ends the rest of the group (helpers left
holding the output would hide the exit) and exits with the command's status, so the
audit still sees the command's exit code. A failed start is reported on STATUS_FD
(the audit's "cannot start"); a started command closes it with nothing written.
A process that calls setsid() itself leaves the group and is out of reach.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

GRACE_S = 1.0
child = 0


def end_group(signum: int, frame: object) -> None:
    """SIGTERM (the audit died, or is stopping us): end every process of the group."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while child and time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.02)
    os.killpg(0, signal.SIGKILL)  # the guard included
    os._exit(1)


def main() -> None:
    global child
    parent, status_fd, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    signal.signal(signal.SIGTERM, end_group)
    if os.getppid() != parent:  # the audit died before PR_SET_PDEATHSIG was set
        end_group(signal.SIGTERM, None)
    os.set_inheritable(status_fd, False)
    try:
        child = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as error:
        os.write(status_fd, str(error).encode("utf-8", "replace"))
        os._exit(127)
    os.close(status_fd)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the command's alone: its closing its input must be seen
        os.dup2(null, fd)
    os.close(null)
    _, status = os.waitpid(child, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGTERM)  # helpers left behind by the command
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: die of the same one
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)


if __name__ == "__main__":
    main()
