"""The shapes example's policy at one request, priced as the H200 served it (2026-12-05).

Served with no start-up profile, it learned its first step costs from SGLang's own warm-up
request at launch (chain 1 at 29.6x the table, chain 2 at 1.35x) and stayed in PLAIN at one
request for the rest of the run, 192 tok/s where the stock EAGLE server served 279. The adapter
no longer reports those intervals (`specfsm_sglang.flight.START_SKIP`); with nothing learned
but PLAIN's served step the policy leaves PLAIN at one request, and with the factors it had
learned it does not."""

from __future__ import annotations

import json
from pathlib import Path

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.model.acceptance import DraftShape
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.registry import make_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu_server"
#: PLAIN's served step at one request (ms; the shapes server's observation lines)
PLAIN_MS = 4.8


def _policy() -> GoodputPolicy:
    pol = make_policy(json.loads((EXAMPLE / "specfsm_shapes.json").read_text())["policy"])
    assert isinstance(pol, GoodputPolicy)
    return pol


def _first_load_low(pol: GoodputPolicy, n: int = 200) -> int | None:
    for i in range(1, n):
        obs = Observation(
            iteration=i,
            decode_bs=1,
            running=1,
            mean_ctx=1000,
            step_ms=PLAIN_MS,
            step_bs=1,
            step_kind="plain",
        )
        v = pol.decide(Mode.PLAIN, obs)
        if v is not None:
            assert v.event is Event.LOAD_LOW
            return i
    return None


def test_with_only_plain_measured_the_shapes_example_speculates_at_one_request() -> None:
    assert _first_load_low(_policy()) is not None


def test_with_the_launch_warm_up_learned_it_stayed_in_plain() -> None:
    pol = _policy()
    cal = pol.est.calibration
    assert cal is not None
    cal.clip = 0.0  # as served: a key's first interval set it
    for shape, factor in ((DraftShape.chain(2), 1.352), (DraftShape.chain(1), 29.617)):
        cal.observe("spec", shape, 1, factor)
    cal.observe("spec", DraftShape.chain(3), 28, 1.784)
    assert _first_load_low(pol) is None
