"""examples/: the GPU server example's shipped config is what its documented command prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfsm.cli.tune import main as tune_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu_server"
TABLES = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096+h200_sglang0517_llama8b_served"
#: the served H200 runs' accept length and mean context (the served table's header)
SERVED = ["--accept-len", "2.4", "--ctx", "1220"]


def test_gpu_server_thresholds_come_from_the_documented_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """specfsm tune on the H200 tables with the steps as served (accept length 2.4, ctx 1220)
    prints the threshold policy that examples/gpu_server/specfsm.json ships, and the README
    shows it."""
    assert tune_main(["--table", TABLES, *SERVED, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["threshold_policy"]
    shipped = json.loads((EXAMPLE / "specfsm.json").read_text())["policy"]
    assert shipped == {"name": "threshold", **printed}
    readme = (EXAMPLE / "README.md").read_text()
    assert f"specfsm tune --table {TABLES} {' '.join(SERVED)} --json" in readme
    assert json.dumps(printed) in readme


def test_gpu_server_readme_gives_the_ctx4096_thresholds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With zero-tax PLAIN the crossover moves with the context: the README states the
    thresholds the same command prints at ctx 4096 (different from the shipped ctx 1220 ones)."""
    assert tune_main(["--table", TABLES, "--accept-len", "2.4", "--json", "--ctx", "4096"]) == 0
    printed = json.loads(capsys.readouterr().out)["threshold_policy"]
    shipped = json.loads((EXAMPLE / "specfsm.json").read_text())["policy"]
    assert printed["high"] != shipped["high"]
    readme = (EXAMPLE / "README.md").read_text()
    assert f"ThresholdPolicy(high={printed['high']}, low={printed['low']}" in readme


def test_shapes_example_config_starts_on_its_launch_shape() -> None:
    """specfsm_shapes.json is a valid config whose shapes the README's launch line (chain 7,
    the widest) accepts, and whose goodput policy is priced for that launch shape."""
    pytest.importorskip("specfsm_sglang")
    from specfsm_sglang.config import Config
    from specfsm_sglang.server_checks import check_engine_shapes, check_policy_shape

    data = json.loads((EXAMPLE / "specfsm_shapes.json").read_text())
    cfg = Config.from_mapping(data)
    readme = (EXAMPLE / "README.md").read_text()
    launch = "--speculative-num-steps 7 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8"
    assert launch in readme
    check_engine_shapes(cfg, (1, 7, 8))
    check_policy_shape(cfg.policy, (1, 7, 8))
