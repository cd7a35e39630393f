"""The data of a report: one module per section, listed once; built from a stored run.

``build_report(run)`` turns a loaded run into a ``reports.Document`` (its sections
are ``_report.SECTIONS``, each module building one); ``build_compare(runs)`` does the
same for ``audit compare``, ``build_transfer(synthetic, natural)`` for ``audit compare
--transfer``.  Numbers come from ``audit.scoring``; files from
``audit.rundir``; nothing here computes a score itself.
"""

from audit.reportdata._compare import (
    EXIT_NOT_COMPARABLE,
    EXIT_REGRESSION,
    SAME_GROUP,
    Gate,
    answer_text,
    build_compare,
    not_comparable,
    same_text,
    uncompared,
    unknown_names,
)
from audit.reportdata._context import Options, pair_values
from audit.reportdata._replication import build_replication
from audit.reportdata._report import SECTIONS, build_report
from audit.reportdata._transfer import build_transfer

__all__ = [
    "EXIT_NOT_COMPARABLE",
    "EXIT_REGRESSION",
    "SAME_GROUP",
    "SECTIONS",
    "Gate",
    "Options",
    "answer_text",
    "build_compare",
    "build_replication",
    "build_report",
    "build_transfer",
    "not_comparable",
    "pair_values",
    "same_text",
    "uncompared",
    "unknown_names",
]
