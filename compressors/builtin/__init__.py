"""Built-in memory conditions; importing this package registers them."""

from compressors.builtin import (
    bm25,
    dependency_closure,
    direct_prose,
    frontier,
    full,
    llm_writers,
    probes,
    tail,
    type_pin,
)

ORDER = (
    "tail",
    "type_pin",
    "frontier",
    "frontier_latest",
    "frontier_no_tombstone",
    "frontier_alpha",
    "prose_high",
    "prose_off",
    "structured_high",
    "full",
    "bm25",
    "dependency_closure",
    "direct_prose",
    "probe_shortest",
    "probe_lexicographic",
    "probe_newest",
    "probe_random",
    "probe_lowrev",
    "probe_rare_op_or_value",
    "probe_component",
    "probe_one_hop",
    "probe_degree",
    "probe_named",
)
"""How listings and default runs order the built-ins: strict first, then archives,
then the shortcut probes (the floor)."""

__all__ = [
    "ORDER",
    "bm25",
    "dependency_closure",
    "direct_prose",
    "frontier",
    "full",
    "llm_writers",
    "probes",
    "tail",
    "type_pin",
]
