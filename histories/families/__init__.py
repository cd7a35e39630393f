"""The family registry: one module per family, each with a docstring and worked example."""

from __future__ import annotations

from histories.families import (
    choice_switch,
    counter_reversal,
    derived_vs_literal,
    dormant_rule,
    exact_identifier,
    expiry,
    late_reference,
    missing_dependency,
    mixed_alias_expiry,
    rollback,
    scheduled_change,
    tombstone_replay,
)
from histories.families._base import Builder, Draft, Family

FAMILIES: dict[str, Family] = {
    module.FAMILY.name: module.FAMILY
    for module in (
        rollback,
        expiry,
        choice_switch,
        late_reference,
        tombstone_replay,
        mixed_alias_expiry,
        counter_reversal,
        dormant_rule,
        derived_vs_literal,
        exact_identifier,
        scheduled_change,
        missing_dependency,
    )
}
"""All families by id, the paper's six first."""

PAPER_FAMILIES: tuple[str, ...] = tuple(name for name, f in FAMILIES.items() if f.paper)

__all__ = ["FAMILIES", "PAPER_FAMILIES", "Builder", "Draft", "Family"]
