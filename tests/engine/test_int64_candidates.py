"""The H200 bug on the CPU test bed: a 1-wide verify fed int32 candidates.

SGLang 0.5.17 on the H200 (sgl_kernel 0.4.5) crashed on the first PLAIN forward after
speculating: ``_build_trivial_verify_input`` passes the previous verify's int32 ``bonus_tokens``
as ``draft_token``, and ``verify_tree_greedy`` takes int64 candidates only ("Expected
'candidates' to be of type long (torch.int64)."). SGLang 0.5.23, the version of this test bed,
builds the same int32 bonus tokens (``speculative/eagle_worker_common.py:756``) and the same
trivial input (``eagle_worker_v2.py:1678-1731``), so a real engine reproduces it once the CPU
port is as strict as the kernel. Each engine runs in its own process (a failing scheduler kills
its parent's process tree); the fix is undone through the test channel's switch
``channel.KEEP_INT32_CANDIDATES_ENV`` (the test bed's test-only plugin).

The engines run warm PLAIN (``"plain": "warm"``, SGLang's steps=0): its every step is that
1-wide verify. Zero-tax PLAIN (the default) runs no verify at all; the fix still guards
DRAINING's 1-wide verifies (overlap) and warm PLAIN.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine
SCRIPT = Path(__file__).with_name("_fatal_script.py")
KERNEL_MESSAGE = "Expected 'candidates' to be of type long (torch.int64)."


def run_switch_to_plain(tmp_path: Path, keep_int32: bool) -> subprocess.CompletedProcess[str]:
    """An EAGLE3 chain engine that speculates for two decode iterations, then goes (warm)
    PLAIN, and generates 16 tokens for 4 prompts."""
    from specfsm_testbed import channel

    cfg = {
        "plain": "warm",
        "policy": {"name": "scripted", "schedule": [[2, "PLAIN"]]},
        "log": str(tmp_path / "transitions-{rank}.jsonl"),
    }
    env = {"SPECFSM_CONFIG_JSON": json.dumps(cfg), "SPECFSM_TEST_DIR": str(tmp_path)}
    if keep_int32:
        env[channel.KEEP_INT32_CANDIDATES_ENV] = "1"
    spec = {"engine": {"spec": "EAGLE3"}, "env": env, "generate": True}
    return subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=420,
    )


def counters(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "counters-rank0.json").read_text()))


def test_without_the_fix_the_first_plain_forward_fails_like_the_h200(tmp_path: Path) -> None:
    """Fix off: the first PLAIN forward after K-wide verifies dies with the kernel's message."""
    proc = run_switch_to_plain(tmp_path, keep_int32=True)
    assert "ENGINE-STARTED" in proc.stdout and "GENERATED" not in proc.stdout
    assert KERNEL_MESSAGE in proc.stderr, proc.stderr[-4000:]
    c = counters(tmp_path)
    assert c["wide_forwards"] >= 1  # the bonus tokens came from K-wide verifies
    assert c["transitions"].get("DRAINING->PLAIN") == 1
    # the last write was the switch to PLAIN: no PLAIN forward completed (after_process_result
    # writes the counters after each one)
    assert c["mode_forwards"]["PLAIN"] == 0


def test_with_the_fix_the_same_switch_serves(tmp_path: Path) -> None:
    """Fix on (production): the same engine and schedule generate every token in PLAIN."""
    proc = run_switch_to_plain(tmp_path, keep_int32=False)
    assert "GENERATED" in proc.stdout, proc.stderr[-4000:]
    outputs = json.loads(proc.stdout.split("GENERATED", 1)[1].splitlines()[0])
    assert [len(o) for o in outputs] == [16] * 4
    assert KERNEL_MESSAGE not in proc.stderr
    c = counters(tmp_path)
    assert c["wide_forwards"] >= 1 and c["mode_forwards"]["PLAIN"] >= 1
