"""examples/: the GPU server example's shipped config is what its documented command prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfsm.cli.tune import main as tune_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu_server"
TABLES = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"


@pytest.mark.parametrize("ctx", [[], ["--ctx", "4096"]], ids=["ctx1024", "ctx4096"])
def test_gpu_server_thresholds_come_from_the_documented_command(
    ctx: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """specfsm tune on the in-engine H200 tables (alpha 0.7), at either context, prints the
    threshold policy that examples/gpu_server/specfsm.json ships, and the README shows it."""
    assert tune_main(["--table", TABLES, "--alpha", "0.7", "--json", *ctx]) == 0
    printed = json.loads(capsys.readouterr().out)["threshold_policy"]
    shipped = json.loads((EXAMPLE / "specfsm.json").read_text())["policy"]
    assert shipped == {"name": "threshold", **printed}
    readme = (EXAMPLE / "README.md").read_text()
    assert f"specfsm tune --table {TABLES} --alpha 0.7 --json" in readme
    assert json.dumps(printed) in readme
