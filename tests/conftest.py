"""Session-wide harness: SGLang's engine shutdown must not kill the resource tracker
(see tests/_resource_tracker.py for the cause and the fix)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

# The test policies (every, random) are not in specfsm's production policy registry; the suite
# opts into them here, for itself and for every engine it starts (they inherit the variable).
os.environ.setdefault("SPECFSM_TEST_POLICIES", "1")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once tests/cpu or tests/engine booted the CPU test bed (their conftests do, at collection),
    make the engines they start spare the resource tracker. Core-only runs import nothing."""
    if "specfsm_cpu.boot" in sys.modules and importlib.util.find_spec("sglang"):
        import _resource_tracker

        _resource_tracker.install()
