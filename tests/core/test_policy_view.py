"""The sampled observation line says what the policy believes there: the goodput policy's
prices, learned factors, prefill share and margin beside the inputs; nothing for a policy
without a view; a view that fails leaves its error in the line, not in the scheduler."""

from __future__ import annotations

import io
import json
from typing import Any

from specfsm import Mode, Observation, SpecFSM, ThresholdPolicy, TransitionLog, json_logger
from specfsm.fsm.kinds import StepKind
from specfsm.fsm.testing import RecordingActions
from specfsm.model.acceptance import DraftShape
from specfsm.policy.registry import make_policy

CHAIN3 = DraftShape.chain(3)


def _observations(policy: Any, steps: list[Observation]) -> list[dict[str, Any]]:
    buf = io.StringIO()
    fsm = SpecFSM(policy, RecordingActions(), log=TransitionLog(json_logger(buf)), observe_every=1)
    for obs in steps:
        fsm.step(obs)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    return [x for x in lines if x["event"] == "specfsm.observation"]


def test_the_goodput_policy_logs_its_prices_and_what_it_learned() -> None:
    pol = make_policy(
        {
            "name": "goodput",
            "shape": "chain3",
            "accept_len": 2.4,
            "prefill_ms_per_token": 0.02,
            "reversal_window": 64,
        }
    )
    steps = [
        Observation(
            iteration=i,
            decode_bs=8,
            accept_lens=(3,) * 8,
            accept_shape=CHAIN3,
            step_ms=20.0,
            step_bs=8,
            step_shape=CHAIN3,
            step_kind=StepKind.SPEC,
        )
        for i in range(1, 4)
    ]
    first, *_, last = _observations(pol, steps)
    view: dict[str, Any] = last["policy"]
    assert view["bs"] == 8 and view["margin"] == 0.02 and view["prefill_share"] == 0.0
    chain = view["chain3"]
    assert isinstance(chain, dict) and chain["accept_len"] > 2.4  # learned from the 3s
    # a first measured step sets the factor: the price at that batch is the step as measured
    assert view["calibration"]["chain3"] > 1.0
    assert first["policy"]["chain3"]["ms"] == chain["ms"] == 20.0
    assert abs(view["plain_tok_s"] - 8000.0 / view["plain_ms"]) < 0.5
    assert abs(chain["tok_s"] - 8000.0 * chain["accept_len"] / 20.0) < 0.5


def test_no_view_no_policy_field_and_a_failing_view_is_logged_not_raised() -> None:
    steps = [Observation(iteration=1, decode_bs=2)]
    (line,) = _observations(ThresholdPolicy(high=8, low=4), steps)
    assert "policy" not in line

    class Broken(ThresholdPolicy):
        def view(self, obs: Observation) -> dict[str, object]:
            raise RuntimeError("no prices")

    (line,) = _observations(Broken(high=8, low=4), steps)
    assert line["policy"] == {"error": "RuntimeError: no prices"}
    assert line["mode"] == Mode.SPECULATING.name
