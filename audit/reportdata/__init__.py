"""The data of a report: one module per section, listed once; built from a stored run.

``build_report(run)`` turns a loaded run into a ``reports.Document`` (its sections
are ``_report.SECTIONS``, each module building one); ``build_compare(runs)`` does the
same for ``audit compare``.  Numbers come from ``audit.scoring``; files from
``audit.rundir``; nothing here computes a score itself.
"""

from audit.reportdata._compare import build_compare, uncompared
from audit.reportdata._context import Options, ReportContext
from audit.reportdata._replication import build_replication
from audit.reportdata._report import SECTIONS, build_report

__all__ = [
    "SECTIONS",
    "Options",
    "ReportContext",
    "build_compare",
    "build_replication",
    "build_report",
    "uncompared",
]
