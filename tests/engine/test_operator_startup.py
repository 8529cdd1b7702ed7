"""Start-up as an operator meets it: a refused configuration is one line before any SGLang
worker starts; an engine with specfsm after one without it in the same process reports
correct per-request accept lengths (each case in its own process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine
HERE = Path(__file__).parent


def run(
    script: str, arg: str | None = None, timeout: int = 420
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(HERE / script)] + ([arg] if arg is not None else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("engine", "env", "line"),
    [
        (
            {"spec": "EAGLE3"},
            {"SPECFSM_CONFIG_JSON": json.dumps({"observe_seconds": "soon"})},
            "specfsm: refusing to start: observe_seconds: expected a number >= 0, got 'soon'",
        ),
        (
            {"spec": "EAGLE3", "tree": True},
            {"SPECFSM_POLICY": "goodput:shape=chain3,accept_len=2.5"},
            "specfsm: refusing to start: policy.shape: the goodput policy is priced for chain3 "
            "(topk 1, 3 steps, 4 draft tokens) but the server drafts tree (topk 4, 2 steps, 8 "
            "draft tokens)",
        ),
    ],
    ids=["bad-value", "goodput-shape"],
)
def test_refusal_is_one_line_before_any_worker(
    engine: dict[str, Any], env: dict[str, str], line: str
) -> None:
    """The parent refuses in one stderr line before spawning a scheduler: no worker
    traceback, no SIGKILL; Python's traceback of the raising Engine() ends with the same line."""
    proc = run("_fatal_script.py", json.dumps({"engine": engine, "env": env}))
    assert proc.returncode != 0 and "ENGINE-STARTED" not in proc.stdout
    err = proc.stderr.splitlines()
    ours = [i for i, x in enumerate(err) if x.startswith("specfsm: refusing to start")]
    assert ours and err[ours[0]].startswith(line), proc.stderr[-2000:]
    before = "\n".join(err[: ours[0]])
    assert "Traceback" not in before and "Scheduler" not in before
    assert "scheduler" not in proc.stderr.lower() or "Scheduler hit an exception" not in proc.stderr
    assert "SIGKILL" not in proc.stderr and "Killed" not in proc.stderr
    assert err[-1].endswith(err[ours[0]])  # the uncaught StartRefused: the same line


def test_restart_without_then_with_specfsm_metrics() -> None:
    """Engine without specfsm, shut down, then with specfsm (flipping every 2 forwards) in one
    process: every request's spec_accept_length is 1 + correct / K-wide verifies, <= steps+1,
    without calling ensure_tokenizer_side by hand."""
    proc = run("_operator_restart.py", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("METRICS ")]
    metrics = json.loads(line.split(" ", 1)[1])
    assert len(metrics) == 6
    for m in metrics:
        assert m["spec_verify_ct"] > 0
        assert m["spec_accept_length"] == pytest.approx(
            1.0 + m["spec_num_correct_drafts"] / m["spec_verify_ct"]
        )
        assert 1.0 <= m["spec_accept_length"] <= 3 + 1  # chain: 3 steps
