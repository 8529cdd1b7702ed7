"""Configurations specfsm must refuse at start-up, and spec state it must refuse mid-serving:
both fail loudly with a one-line reason (each engine runs in its own process, because a
failing SGLang scheduler kills its parent's process tree)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine
SCRIPT = Path(__file__).with_name("_fatal_script.py")


def run(spec: dict[str, Any], timeout: int = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cfg(**extra: Any) -> str:
    return json.dumps({"policy": {"name": "fixed", "speculate": True}, **extra})


@pytest.mark.parametrize(
    ("engine", "env", "reason"),
    [
        (
            {"spec": "STANDALONE"},
            {"SPECFSM_CONFIG_JSON": cfg()},
            "speculative_algorithm=STANDALONE",
        ),
        (
            {"spec": "EAGLE3", "speculative_adaptive": True},
            {"SPECFSM_CONFIG_JSON": cfg()},
            "speculative_adaptive=True",
        ),
        ({"spec": "EAGLE3"}, {"SPECFSM_POLICY": "threshold:high=4,low=8"}, "need low < high"),
        (
            {"spec": "EAGLE3"},
            {"SPECFSM_CONFIG_JSON": '{"polcy": {}}'},
            "unknown configuration keys",
        ),
    ],
    ids=["standalone", "adaptive", "bad-threshold", "typo-key"],
)
def test_refused_at_startup(engine: dict[str, Any], env: dict[str, str], reason: str) -> None:
    """An unsupported or broken configuration stops the engine at start, naming the reason."""
    proc = run({"engine": engine, "env": env})
    assert "ENGINE-STARTED" not in proc.stdout
    assert proc.returncode != 0
    assert "specfsm refused to start" in proc.stderr or "specfsm: refusing to start" in proc.stderr
    assert reason in proc.stderr


def run_stale(tmp_path: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    """A PLAIN engine whose next decode forward gets a stale bs x K bonus_tokens tensor."""
    env = {
        "SPECFSM_CONFIG_JSON": cfg(policy={"name": "fixed", "speculate": False}, **extra),
        "SPECFSM_TEST_DIR": str(tmp_path),
    }
    return run(
        {
            "engine": {"spec": "EAGLE3"},
            "env": env,
            "generate": True,
            "inject": {"stale_spec_info": 1},
        }
    )


def test_stale_spec_state_is_a_one_line_diagnosis(tmp_path: Path) -> None:
    """The seeds' bug class (a bs x K tensor reaching a 1-token step) is stopped by the
    contracts before the forward, with mode, field, expected and actual in one line."""
    proc = run_stale(tmp_path)
    assert "ENGINE-STARTED" in proc.stdout and "GENERATED" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "SpecStateError" in ln]
    assert lines, proc.stderr[-3000:]
    assert (
        "spec state violates mode PLAIN: batch.spec_info.bonus_tokens: "
        "expected rows == batch size (4), got Tensor[16]" in lines[-1]
    )


def test_without_contracts_the_same_bug_is_a_deep_crash(tmp_path: Path) -> None:
    """Control: with the contract check sampled away, the same injected state crashes deep in
    the forward with a size mismatch (the seeds' symptom), not with specfsm's diagnosis."""
    proc = run_stale(tmp_path, contracts_every=1_000_000)
    assert "GENERATED" not in proc.stdout
    assert "SpecStateError" not in proc.stderr
    # observed: "The size of tensor a (16) must match the size of tensor b (4) at non-singleton
    # dimension 0" (4 requests x 4 draft tokens): the seeds' "(160) ... (2)" class
    assert "The size of tensor a (16) must match the size of tensor b (4)" in proc.stderr
