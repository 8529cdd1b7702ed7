"""examples/: the GPU server example's shipped config is what its documented command prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfsm.cli.tune import main as tune_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu_server"
TABLES = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"


def test_gpu_server_thresholds_come_from_the_documented_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """specfsm tune on the in-engine H200 tables (alpha 0.7, ctx 1024) prints the threshold
    policy that examples/gpu_server/specfsm.json ships, and the README shows it."""
    assert tune_main(["--table", TABLES, "--alpha", "0.7", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["threshold_policy"]
    shipped = json.loads((EXAMPLE / "specfsm.json").read_text())["policy"]
    assert shipped == {"name": "threshold", **printed}
    readme = (EXAMPLE / "README.md").read_text()
    assert f"specfsm tune --table {TABLES} --alpha 0.7 --json" in readme
    assert json.dumps(printed) in readme


def test_gpu_server_readme_gives_the_ctx4096_thresholds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With zero-tax PLAIN the crossover moves with the context: the README states the
    thresholds the same command prints at ctx 4096 (different from the shipped ctx 1024 ones)."""
    assert tune_main(["--table", TABLES, "--alpha", "0.7", "--json", "--ctx", "4096"]) == 0
    printed = json.loads(capsys.readouterr().out)["threshold_policy"]
    shipped = json.loads((EXAMPLE / "specfsm.json").read_text())["policy"]
    assert printed["high"] != shipped["high"]
    readme = (EXAMPLE / "README.md").read_text()
    assert f"ThresholdPolicy(high={printed['high']}, low={printed['low']}" in readme
