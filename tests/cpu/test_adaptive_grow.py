"""The serving harness's start-up repair for SGLang's own adaptive speculation
(benchmarks/gpu/sitecustomize.py, ``SPECFSM_ADAPTIVE_GROW``): the shared CUDA-graph logits
buffer grows to a caller's rows where SGLang's assertion would stop the server, and the tensors
handed out before stay alive and unchanged. Checked on the installed SGLang's own class."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
graph_shared_output = pytest.importorskip("sglang.srt.model_executor.graph_shared_output")

SITE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "sitecustomize.py"
HOOK_ENV = (
    "SPECFSM_TIMING_FILE",
    "SPECFSM_ITER_TRACE",
    "SPECFSM_PREFILL_TIMING",
    "SPECFSM_SKIP_DRAFT_PREFILL",
    "SPECFSM_SYNC_DEBUG",
    "SPECFSM_ADAPTIVE_GROW",
    "SPECFSM_AGREE",
)


def _site(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The hook module with none of its switches set: it installs nothing on import."""
    for name in HOOK_ENV:
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("specfsm_gpu_site_under_test", SITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    before = list(sys.meta_path)
    spec.loader.exec_module(module)
    assert sys.meta_path == before
    return module


def test_unwrapped_class_refuses_more_rows() -> None:
    shared = graph_shared_output.GraphSharedOutput(device=torch.device("cpu"), max_rows=4)
    with pytest.raises(AssertionError, match="holds 4 rows but caller needs 8"):
        shared.get_logits_buffer(16, rows=8)


def test_grows_to_the_callers_rows_and_keeps_old_views(monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(monkeypatch)
    cls = type("Shared", (graph_shared_output.GraphSharedOutput,), {})
    site._adaptive_wrap(cls)
    shared = cls(device=torch.device("cpu"), max_rows=4)
    old = shared.get_logits_buffer(16, rows=4)
    old.fill_(7.0)
    new = shared.get_logits_buffer(16, rows=8)
    assert new.shape == (8, 16) and shared.max_rows == 8
    assert new.data_ptr() != old.data_ptr()
    assert bool((old == 7.0).all())  # a graph captured on the old tensor still owns it
    assert shared.get_logits_buffer(16, rows=2).data_ptr() == new.data_ptr()
    assert shared.get_logits_buffer(16, rows=8).shape == (8, 16)
