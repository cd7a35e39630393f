"""The data of a report: one module per section, listed once; built from a stored run."""

from audit.reportdata._build import Options, build_compare, build_report

__all__ = ["Options", "build_compare", "build_report"]
