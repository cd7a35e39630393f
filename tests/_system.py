"""Components the tests need from outside Python (a browser, a vLLM environment).

``scripts/install_test_system.sh`` installs them (``.ci/run`` calls it); a test never
installs anything itself.  When one is missing, its tests skip with the command that
installs it, except in CI (``CI=true``), where a missing component fails them: CI
must prove every test ran.
"""

from __future__ import annotations

import os

import pytest

INSTALL = "bash scripts/install_test_system.sh"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def missing(component: str) -> None:
    """Skip (or, in CI, fail) the current test: ``component`` is not installed."""
    message = f"{component} is not installed; `{INSTALL}` installs it"
    if in_ci():
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)
