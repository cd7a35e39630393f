"""Fixtures every room's tests share."""

from __future__ import annotations

import pytest

from histories import PRESETS, Pair, generate


@pytest.fixture(scope="session")
def pilot() -> tuple[Pair, ...]:
    """The default pilot's pairs (``cca-pilot``), generated once for the session: pairs
    are frozen, and a tuple, so no test can change what the next one reads."""
    return tuple(generate(PRESETS["cca-pilot"]))
