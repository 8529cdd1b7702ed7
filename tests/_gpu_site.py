"""The GPU harness's hook module (benchmarks/gpu/sitecustomize.py) loaded under test with none
of its switches set, so that it installs nothing on import; a test then calls its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "sitecustomize.py"
HOOK_ENV = (
    "SPECFSM_TIMING_FILE",
    "SPECFSM_ITER_TRACE",
    "SPECFSM_PREFILL_TIMING",
    "SPECFSM_SKIP_DRAFT_PREFILL",
    "SPECFSM_SYNC_DEBUG",
    "SPECFSM_ADAPTIVE_GROW",
    "SPECFSM_AGREE",
)


def load(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """A fresh copy of the hook module under ``name``; its import must add no import hook."""
    for var in HOOK_ENV:
        monkeypatch.delenv(var, raising=False)
    spec = importlib.util.spec_from_file_location(name, SITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    before = list(sys.meta_path)
    spec.loader.exec_module(module)
    assert sys.meta_path == before
    return module
