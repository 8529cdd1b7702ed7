"""The GPU harness's prefill timing (benchmarks/gpu/sitecustomize.py,
``SPECFSM_PREFILL_TIMING``) writes a run's last prefill pieces before the serving driver reads
the run's window: the buffer is written once it holds a second of launches, and, when no piece
was launched for a quarter of a second, by the idle flusher (a buffer that waited for 64
records would leave up to 63 pieces of a window's end to be read with the next run). The
records here are finished ones (launch time, stage, tokens, bs, GPU ms, mode): the CUDA events
that time a piece on the GPU do not exist on this CPU box."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType

import pytest
from _gpu_site import load


def _site(monkeypatch: pytest.MonkeyPatch, folder: Path) -> ModuleType:
    """The hook module, its prefill folder pointed at ``folder``."""
    module = load(monkeypatch, "specfsm_gpu_site_prefill")
    module._PREFILL = str(folder)
    return module


def _written(folder: Path) -> list[list[object]]:
    return [
        json.loads(x) for f in folder.glob("prefill-*.jsonl") for x in f.read_text().splitlines()
    ]


def test_a_short_buffer_waits_and_a_quiet_one_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = _site(monkeypatch, tmp_path)
    now = time.time()
    recs = [[now - 0.5 + 0.01 * i, "target", 1024, 1, 2.5, None] for i in range(5)]
    site._PF_BUF.extend(recs)
    site._pf_flush()
    assert _written(tmp_path) == []  # five pieces within a second: not yet due
    assert not site._pf_quiet(recs[-1][0] + 0.1)  # the scheduler still launching
    assert site._pf_quiet(recs[-1][0] + 0.3)  # quiet: the idle flusher drains it
    site._pf_flush(drain=True)
    assert _written(tmp_path) == recs and site._PF_BUF == []
    assert not site._pf_quiet(time.time() + 10)  # nothing held, nothing to write


def test_a_second_of_launches_is_written_without_waiting_for_64(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = _site(monkeypatch, tmp_path)
    recs = [[100.0 + 0.3 * i, "draft", 512, 2, 1.0, "PLAIN"] for i in range(5)]  # 1.2 s
    site._PF_BUF.extend(recs)
    site._pf_flush()
    assert _written(tmp_path) == recs
