"""Built-in memory conditions; importing this package registers them."""

from compressors.builtin import bm25, dependency_closure, frontier, full, tail, type_pin

ORDER = (
    "tail",
    "type_pin",
    "frontier",
    "frontier_latest",
    "frontier_no_tombstone",
    "frontier_alpha",
    "full",
    "bm25",
    "dependency_closure",
)
"""How listings and default runs order the built-ins: strict first, then archives."""

__all__ = ["ORDER", "bm25", "dependency_closure", "frontier", "full", "tail", "type_pin"]
