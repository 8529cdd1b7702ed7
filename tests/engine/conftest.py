"""Real SGLang 0.5.23 engines on CPU running specfsm (the adapter's test bed).

Engines are expensive (~11 s to start on an idle 2-core machine, ~2 GB each), so they are
shared: one no-speculation reference engine per session and one specfsm engine per module
and configuration. Tests steer the specfsm engine's policy through the test channel.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if not (importlib.util.find_spec("torch") and importlib.util.find_spec("sglang")):
    pytest.skip("needs the project environment (torch + sglang)", allow_module_level=True)

os.environ["SPECFSM_SGLANG_CPU"] = "1"
from specfsm_cpu import boot as cpu_boot

cpu_boot.boot()


@pytest.fixture(scope="session")
def reference() -> Iterator[Any]:
    """Greedy no-speculation outputs from the session's reference engine (a child process:
    SGLang's config is process-global, so it cannot live beside a speculative engine)."""
    from specfsm_testbed.refserver import ReferenceServer

    ref = ReferenceServer()
    try:
        yield ref
    finally:
        ref.close()


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
