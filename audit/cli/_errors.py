"""The terminal's word on a compressor that raised: its first error, in one short block.

A compressor that raises has not been audited: its reads are scored 0 (an error is
never a smaller n, or failing on purpose would pay), and the run exits
``EXIT_COMPRESSOR_RAISED`` so that a CI job fails.  The block names the condition, the
error, where it struck first and how often; the traceback is in run.log once.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from audit.cli._common import terminal_text

WIDTH = 80


def error_block(summary: Mapping[str, Any], run_dir: Path) -> list[str]:
    """The lines saying a compressor raised (none when none did)."""
    from audit.rundir import LOG_FILE, CompressorError

    errors = [CompressorError.model_validate(e) for e in summary.get("compressor_errors", [])]
    if not errors:
        return []
    first = errors[0]
    conditions = list(dict.fromkeys(e.condition for e in errors))
    others = len(errors) - 1
    lines = [f"error: compressor {first.condition} raised ({first.stage} stage)"]
    details = [
        first.error,
        *([f"at {_relative(first.raised_at)}"] if first.raised_at else []),
        f"first: {first.first.describe()}",
        f"{first.reads} reads failed ({first.streams} stream(s) stopped): each scored 0 and "
        "counted against it, never as a smaller n",
    ]
    if others:
        who = f" ({', '.join(conditions)})" if len(conditions) > 1 else ""
        details.append(f"and {others} other distinct error(s){who}")
    details.append(f"full traceback in {run_dir / LOG_FILE}")
    # (a resume keeps these reads: its jobs are keyed by the version that raised)
    details.append("fixed, it is audited in a new run (--out), its version raised")
    for detail in details:
        lines += textwrap.wrap(terminal_text(detail), WIDTH, initial_indent="  ",
                               subsequent_indent="    ", break_on_hyphens=False,
                               break_long_words=False)  # a path stays whole  # fmt: skip
    return [terminal_text(lines[0]), *lines[1:]]


def _relative(raised_at: str) -> str:
    """A frame's file under the working directory, as a path relative to it."""
    return raised_at.removeprefix(f"{Path.cwd()}{os.sep}")
