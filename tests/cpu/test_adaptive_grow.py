"""The serving harness's start-up repair for SGLang's own adaptive speculation
(benchmarks/gpu/sitecustomize.py, ``SPECFSM_ADAPTIVE_GROW``): the shared CUDA-graph logits
buffer grows to a caller's rows where SGLang's assertion would stop the server, and the tensors
handed out before stay alive and unchanged. Checked on the installed SGLang's own class."""

from __future__ import annotations

from types import ModuleType

import pytest
from _gpu_site import load

torch = pytest.importorskip("torch")
graph_shared_output = pytest.importorskip("sglang.srt.model_executor.graph_shared_output")


def _site(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The hook module with none of its switches set: it installs nothing on import."""
    return load(monkeypatch, "specfsm_gpu_site_under_test")


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
