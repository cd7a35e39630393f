"""The one root of every exception memory-audit raises on purpose.

It lives in ``histories``, the lowest package, so that every package can derive its
own exceptions from it (imports flow one way).  The command line turns a
``MemoryAuditError`` into one clean line naming the file, field or value at fault;
anything else that escapes is a bug, shown with its traceback and a request to
report it.  ``docs/architecture.md`` lists the whole tree.
"""

from __future__ import annotations

from typing import ClassVar


class MemoryAuditError(Exception):
    """Base class of every error memory-audit raises for bad input or a failed setup."""

    exit_code: ClassVar[int] = 2
    """The command line's exit status: 2 for bad input, 1 for a setup that failed."""
