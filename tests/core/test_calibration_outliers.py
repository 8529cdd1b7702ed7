"""The step calibration against one interval far off its neighbours (a stall, not a step): the
H200 case where the first chain-3 interval at bs 2 read 94 ms beside profiled neighbours."""

from __future__ import annotations

import pytest

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.learn import StepCalibration
from specfsm.policy.registry import make_policy

CHAIN3 = DraftShape.chain(3)


def _profiled(clip: float) -> StepCalibration:
    """Seeded as the start-up profile seeds it: factor 1.0 at bs 1, 4, 16."""
    c = StepCalibration(clip=clip)
    for bs in (1, 4, 16):
        c.observe("spec", CHAIN3, bs, 1.0)
    return c


def test_a_new_buckets_far_first_interval_waits_for_its_second() -> None:
    c = _profiled(4.0)
    c.observe("spec", CHAIN3, 2, 11.4)  # 94 ms where the table says 8.3
    assert c.factor("spec", CHAIN3, 2) == pytest.approx(1.0)  # held: the neighbours price it
    c.observe("spec", CHAIN3, 2, 0.98)
    assert c.factor("spec", CHAIN3, 2) == pytest.approx(0.98)  # the nearer of the two
    # without the guard the first interval sets the bucket
    off = _profiled(0.0)
    off.observe("spec", CHAIN3, 2, 11.4)
    assert off.factor("spec", CHAIN3, 2) == pytest.approx(11.4)


def test_a_real_step_far_off_its_neighbours_starts_its_bucket_at_the_second() -> None:
    """Two intervals 6x the neighbours agree: the bucket starts at the nearer of them."""
    c = _profiled(4.0)
    c.observe("spec", CHAIN3, 64, 6.2)
    assert c.factor("spec", CHAIN3, 64) == pytest.approx(1.0)
    c.observe("spec", CHAIN3, 64, 6.0)
    assert c.factor("spec", CHAIN3, 64) == pytest.approx(6.0)
    # within `clip` of the neighbours a first interval counts at once
    c.observe("spec", CHAIN3, 8, 3.5)
    assert c.factor("spec", CHAIN3, 8) == pytest.approx(3.5)


def test_a_measured_bucket_moves_at_most_clip_times_its_factor_per_interval() -> None:
    c = _profiled(4.0)
    c.observe("spec", CHAIN3, 4, 50.0)
    assert c.factor("spec", CHAIN3, 4) == pytest.approx(1.0 + 0.1 * (4.0 - 1.0))
    c.observe("spec", CHAIN3, 16, 0.01)
    assert c.factor("spec", CHAIN3, 16) == pytest.approx(1.0 + 0.1 * (0.25 - 1.0))
    # a key's first interval within `clip` of the factor it is priced with sets the key
    c.observe("plain", None, 8, 3.0)
    assert c.factor("plain", None, 8) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="clip must be > 1"):
        StepCalibration(clip=1.0)


def test_a_keys_far_first_interval_waits_for_its_second() -> None:
    """The shapes example on the H200 (no start-up profile): chain 1's first interval, 213 ms
    at bs 1 in SGLang's warm-up request where the table says 7.2, set its factor to 29.6 and
    the policy never chose it again. Against the factor it was priced with (the measured
    shapes' and PLAIN's) it now waits for a second interval."""
    c = StepCalibration(clip=4.0)
    c.observe("spec", DraftShape.chain(2), 1, 0.8)
    assert c.factor("spec", DraftShape.chain(1), 1) == pytest.approx(0.8)  # interpolated
    c.observe("spec", DraftShape.chain(1), 1, 29.6)
    assert not c.measured("spec", DraftShape.chain(1))
    assert c.factor("spec", DraftShape.chain(1), 1) == pytest.approx(0.8)
    c.observe("spec", DraftShape.chain(1), 1, 0.85)
    assert c.factor("spec", DraftShape.chain(1), 1) == pytest.approx(0.85)
    # a kind never measured is priced at the table's own step (1.0): a CPU engine priced with
    # a GPU table starts its key at the second interval, with the nearer of the two
    c.observe("plain", None, 1, 300.0)
    assert not c.measured("plain", None)
    c.observe("plain", None, 1, 280.0)
    assert c.factor("plain", None, 1) == pytest.approx(280.0)


def test_the_goodput_policy_keeps_speculating_at_two_requests_after_a_stall() -> None:
    """Profiled at bs 1 / 4 (seeded), speculating at bs 2: one 94 ms interval there does not
    send it to PLAIN; with `cal_clip` 0 it does."""

    def run(clip: float) -> int:
        pol = make_policy(
            {
                "name": "goodput",
                "shape": "chain3",
                "accept_len": 2.3,
                "min_dwell": 0,
                "cal_clip": clip,
            }
        )
        assert isinstance(pol, GoodputPolicy)
        cal = pol.est.calibration
        assert cal is not None
        for bs in (1, 4, 16):
            cal.observe("spec", CHAIN3, bs, 1.0)
            cal.observe("plain", None, bs, 1.0)
        ms = pol.predicted_ms(2, CHAIN3)
        steps = [94.0] + [ms] * 30
        leaves = 0
        for i, step in enumerate(steps):
            obs = Observation(
                iteration=i,
                decode_bs=2,
                running=2,
                accept_lens=(2, 3),
                step_ms=step,
                step_bs=2,
                step_shape=CHAIN3,
                step_kind="spec",
                shape=CHAIN3,
            )
            v = pol.decide(Mode.SPECULATING, obs)
            leaves += v is not None
        return leaves

    assert run(4.0) == 0
    assert run(0.0) >= 1
    with pytest.raises(ValueError, match="cal_clip must be > 1"):
        make_policy({"name": "goodput", "shape": "chain3", "accept_len": 2.3, "cal_clip": 0.5})
