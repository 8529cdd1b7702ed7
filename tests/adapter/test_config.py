"""The SGLang plugin's configuration: env layering, policy building, clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang.config import ConfigError, make_policy, requested, resolve

from specfsm import FixedPolicy, ThresholdPolicy


def test_not_requested_without_variables() -> None:
    """The plugin stays inert unless one of the config variables is set."""
    assert not requested({})
    assert requested({"SPECFSM_POLICY": "fixed:speculate=true"})


def test_layering(tmp_path: Path) -> None:
    """File < inline JSON < policy shorthand / SPECFSM_LOG."""
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"observe_every": 5, "policy": {"name": "fixed", "speculate": True}}))
    env = {
        "SPECFSM_CONFIG": str(f),
        "SPECFSM_CONFIG_JSON": json.dumps({"observe_every": 7}),
        "SPECFSM_POLICY": "threshold:high=32,low=8",
        "SPECFSM_LOG": "-",
    }
    cfg = resolve(env)
    assert cfg["observe_every"] == 7 and cfg["log"] == "-"
    assert cfg["policy"] == {"name": "threshold", "high": 32, "low": 8}
    assert isinstance(make_policy(cfg["policy"]), ThresholdPolicy)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"SPECFSM_CONFIG_JSON": '{"polcy": 1}'}, "unknown configuration keys"),
        ({"SPECFSM_CONFIG_JSON": "{not json"}, "cannot read configuration"),
        ({"SPECFSM_CONFIG": "/nonexistent/specfsm.json"}, "cannot read configuration"),
        ({"SPECFSM_POLICY": "threshold:high=4,low=8"}, "need low < high"),
        ({"SPECFSM_POLICY": "warp:speed=9"}, "unknown policy"),
        ({"SPECFSM_CONFIG_JSON": '{"initial_mode": "DRAINING"}'}, "initial_mode"),
        ({"SPECFSM_CONFIG_JSON": '{"contracts_every": 0}'}, "contracts_every"),
        ({"SPECFSM_POLICY": "goodput:accept_len=2.5"}, "shape"),
    ],
)
def test_refusals_are_clear(env: dict[str, str], match: str) -> None:
    """Every broken configuration is a ConfigError that names the problem."""
    with pytest.raises(ConfigError, match=match):
        resolve(env)


def test_policies_from_json() -> None:
    """Each named policy builds; scripted/every/random are deterministic per iteration."""
    assert isinstance(make_policy({"name": "fixed", "speculate": False}), FixedPolicy)
    every = make_policy({"name": "every", "k": 2})
    rnd1 = make_policy({"name": "random", "seed": 3, "p": 0.5})
    rnd2 = make_policy({"name": "random", "seed": 3, "p": 0.5})
    assert [every.target(i) for i in range(6)] == [False, False, True, True, False, False]  # type: ignore[attr-defined]
    assert [rnd1.target(i) for i in range(50)] == [rnd2.target(i) for i in range(50)]  # type: ignore[attr-defined]
    scripted = make_policy({"name": "scripted", "schedule": [[5, "PLAIN"], [9, "SPECULATING"]]})
    assert scripted.describe()["policy"] == "scripted"
    goodput = make_policy(
        {
            "name": "goodput",
            "table": "h200_sglang0517_llama8b",
            "shape": "chain3",
            "accept_len": 2.5,
        }
    )
    assert goodput.describe()
