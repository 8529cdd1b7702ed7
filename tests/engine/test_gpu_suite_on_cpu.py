"""The H200 acceptance suite's scripts, run on the CPU bed so they cannot rot between GPU sessions.

benchmarks/gpu/specfsm_suite.py drives a real engine (here SGLang 0.5.23 on CPU, ``--cpu``), and
summarize_specfsm.py / sim_vs_engine.py read what it and the committed H200 run wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"
H200_RUN = GPU / "results" / "2026-11-30_specfsm"


def _suite(out: Path, *args: str) -> None:
    env = dict(os.environ)
    env.pop("SPECFSM_CONFIG", None)
    cmd = [sys.executable, str(GPU / "specfsm_suite.py"), "--cpu", "--out", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.engine
def test_suite_runs_on_the_cpu_bed(tmp_path: Path) -> None:
    """specfsm_suite.py on CPU: the no-spec reference and specfsm under 7 schedules give equal
    greedy outputs, no action failure, no contract violation; the summary says so."""
    small = ["--greedy-sets", "small", "--phases", "greedy"]
    _suite(tmp_path, "--tag", "none", "--spec", "none", *small)
    _suite(tmp_path, "--tag", "chain_fsm", "--spec", "chain", "--fsm", *small)
    summary = tmp_path / "specfsm_summary.txt"
    proc = subprocess.run(
        [sys.executable, str(GPU / "summarize_specfsm.py"), "--dir", str(tmp_path),
         "--summary", str(summary), "--csv", str(tmp_path / "modes.csv")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = dict(ln.split(": ", 1) for ln in summary.read_text().splitlines() if ": " in ln)
    assert lines["engines_started"] == "2/2"
    assert lines["greedy_sequences_compared"] == str(7 * 8)
    assert lines["greedy_mismatches"] == "0"
    assert lines["action_failures"] == "0"
    assert lines["contract_violations"] == "0"
    assert int(lines["contract_checks"]) > 0
    assert "SPECULATING->DRAINING" in lines["transitions_chain_fsm"]


def test_sim_vs_engine_on_the_committed_h200_run(tmp_path: Path) -> None:
    """sim_vs_engine.py prices every committed H200 sweep cell (2 engines x 9 levels x 4 columns)
    and reports the ratio range."""
    md = tmp_path / "sim.md"
    cmd = [sys.executable, str(GPU / "sim_vs_engine.py"), "--dir", str(H200_RUN)]
    proc = subprocess.run(
        [*cmd, "--markdown", str(md)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "sim/measured over 72 cells" in md.read_text()
