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

from _prefill_burst import burst, quiet

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


def _decode(it: int, bs: int, ms: float) -> Observation:
    return Observation(
        iteration=it, decode_bs=bs, running=bs, step_ms=ms, step_bs=bs, step_kind="plain"
    )


def test_a_burst_of_prefills_keeps_the_shapes_example_in_plain() -> None:
    """The example prices speculation on the GPU time prefills leave to decode (the prefill
    pressure, with the queue priced), as the serving benchmark's goodput configuration does.
    Without it, served on an H100 (2026-12-05) at a burst's height, it went from PLAIN to
    SPECULATING at 256 requests on a decode price alone ("chain3 13942 > plain 10494 tok/s")
    while the burst's prefills held the GPU."""
    pol = _policy()
    assert pol.params.prefill_ms_per_token > 0.0 and pol.params.price_queued > 0.0
    bs = next(
        b
        for b in range(64, 0, -1)
        if 1.03 < max(v for k, v in pol.predict_shapes(b).items() if k) / pol.predict(b)[0] < 1.15
    )
    ms = pol.predicted_ms(bs)
    got = burst(pol, bs, ms, _decode)
    assert all(v is None for v in got), pol.last_reason
    assert pol.est.share > 0.5
    # the burst over, decodes alone bring speculation back
    v = quiet(pol, bs, ms, _decode)
    assert v is not None and v.event is Event.LOAD_LOW, pol.last_reason
    assert "prefill share" in v.reason
