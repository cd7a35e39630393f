"""memory-audit: does a memory compressor keep what a future update will need?

The Python face (``audit.api``; docs/python.md), loaded on first use so that the
command line starts without it::

    import audit
    run = audit.run("runs/mine", conditions="frontier,tail,my_memory:MyMemory")
    audit.scores(run).cells        # every score, one row per system, transform, family
    audit.report(run)              # report.html, report.md and the CSV tables
    audit.load_run("runs/mine")    # a run directory, loaded back (results, plan, costs)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from audit.api import MemoryAuditError, RunData, Scores, load_run, report, run, scores

__all__ = ["MemoryAuditError", "RunData", "Scores", "load_run", "report", "run", "scores"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from audit import api

        return getattr(api, name)
    raise AttributeError(f"module 'audit' has no attribute {name!r}")
