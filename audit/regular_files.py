"""Opening a file that must be a regular file, without waiting on anything else.

A run directory's files and a batch output file are read from paths a user (or an
adversary) controls: a FIFO in their place would block the open until a writer
came, and a device or directory would be read as data.  ``open_regular`` opens
without blocking, refuses anything but a regular file before reading a byte, and
lets its caller say, in its own error, what to do instead.  It imports nothing of
``audit``, so every room may use it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for an error message."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")


@contextmanager
def open_regular(path: Path, refusal: Callable[[Path, int], BaseException]) -> Iterator[BinaryIO]:
    """``path`` opened for binary reading; ``refusal(path, mode)`` is raised, before
    anything is read, unless it is a regular file (a symbolic link to one is fine)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refusal(path, mode)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle
