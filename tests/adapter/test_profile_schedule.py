"""The start-up profile's schedule and configuration, without an engine: the schedule walks
every shape, PLAIN and back through the real transition table and measures each target at its
batch size; its rows are a cost table that prices those steps as measured; the configuration
refuses what nothing would use or the engine cannot run."""

from __future__ import annotations

import pytest
from specfsm_sglang import config, server_checks
from specfsm_sglang.config import Config, ConfigError
from specfsm_sglang.profile_schedule import ProfileSchedule, profile_rows, rows_csv

from specfsm import Event, Mode, Observation, SpecFSM
from specfsm.fsm.testing import RecordingActions
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import CostModel, load_table, overlay_table, parse_table

C1, C3, C5 = DraftShape.chain(1), DraftShape.chain(3), DraftShape.chain(5)
GOODPUT = {
    "name": "goodput",
    "table": "h200_sglang0517_llama8b",
    "shape": "chain5",
    "accept_len": 2.5,
}


def _run(sched: ProfileSchedule, bs: int, limit: int = 400) -> tuple[SpecFSM, list[str]]:
    """Drive a real SpecFSM with `sched` as its policy, as the controller does: one decode
    forward per iteration, each measured (ms = 1 + width) at `bs`; DRAINED / RESYNCED when
    due. Returns the machine and the (mode, shape) label of each forward."""
    fsm = SpecFSM(
        sched, RecordingActions(), initial=Mode.SPECULATING, shapes=(C5, C1, C3), shape=C5
    )
    sched.start(bs)
    seen: list[str] = []
    prev: tuple[str, DraftShape | None] | None = None
    for it in range(1, limit):
        kind, shape = prev if prev else ("", None)
        ms = 0.0 if prev is None else (1.0 + (shape.draft_tokens if shape else 0))
        obs = Observation(
            iteration=it,
            decode_bs=bs,
            running=bs,
            step_ms=ms,
            step_bs=bs if prev else 0,
            step_kind=kind,
            step_shape=shape,
            shape=fsm.shape,
        )
        fsm.step(obs)
        if fsm.mode is Mode.DRAINING:
            fsm.process_event(Event.DRAINED, obs, "test")
        elif fsm.mode is Mode.RESYNCING:
            fsm.process_event(Event.RESYNCED, obs, "test")
        prev = ("spec", fsm.shape) if fsm.mode is Mode.SPECULATING else ("plain", None)
        seen.append(f"{fsm.mode.name}:{fsm.shape.label() if fsm.shape else ''}")
        if sched.phase_done:
            break
    return fsm, seen


def test_schedule_measures_every_target_and_comes_home() -> None:
    """Launch shape, each other shape, PLAIN: each measured `forwards` times at the phase's
    batch size (the first forward after a change left out); the phase ends in SPECULATING at
    the launch shape."""
    sched = ProfileSchedule(C5, [C5, C1, C3], forwards=3, plain_kind="plain")
    fsm, seen = _run(sched, bs=4)
    assert sched.phase_done
    assert fsm.mode is Mode.SPECULATING and fsm.shape == C5
    for key in (("spec", C5, 4), ("spec", C1, 4), ("spec", C3, 4), ("plain", None, 4)):
        assert len(sched.samples[key]) >= 3, (key, sched.samples)
    assert any(s.startswith("PLAIN") for s in seen)
    # a second phase at another size measures again, from the same machine
    sched.start(8)
    assert not sched.phase_done


def test_rows_price_the_measured_steps() -> None:
    """The rows are a cost table: overlaid on a shipped table they price each measured shape's
    iteration and the zero-tax PLAIN step as measured, and those shapes are no longer flagged
    as interpolated; a shape not measured keeps the shipped table's price."""
    samples = {
        ("spec", C1, 8): [3.0, 3.2, 3.1],
        ("spec", C3, 8): [5.0, 5.0, 5.4],
        ("plain", None, 8): [2.0, 2.1, 2.2],
        ("resync", None, 8): [9.0],
    }
    rows = profile_rows(samples, ctx=300)
    assert ("plain_step", 8, 1, 300, 2.1) in rows and len(rows) == 3
    table = parse_table(rows_csv(rows, ["test"]), "profile.csv")
    prior = load_table("h200_sglang0517_llama8b")
    m = CostModel(overlay_table(prior, table), C3)
    assert m.spec_ms(8, C1) == pytest.approx(3.1)
    assert m.spec_ms(8, C3) == pytest.approx(5.0)
    assert m.zero_tax_ms(8) == pytest.approx(2.1)
    assert m.unmeasured(C1) == [] and m.zero_tax_measured
    plain = CostModel(prior, C3)
    assert m.spec_ms(8, C5) == pytest.approx(plain.spec_ms(8, C5))


def test_profile_config_refusals() -> None:
    """profile: refused with a threshold policy, beside a policy's own profile table, with DP
    attention, and with malformed values; true and an object are read."""
    assert Config.from_mapping({"profile": True}).profile_spec is not None
    spec = Config.from_mapping({"profile": {"bs": [8, 1, 8], "forwards": 2}}).profile_spec
    assert spec is not None and spec.bs == (1, 8) and spec.forwards == 2
    with pytest.raises(ConfigError, match="goodput"):
        server_checks.check_engine_shapes(Config.from_mapping({"profile": True}), (1, 5, 6))
    both = {"profile": True, "policy": {**GOODPUT, "profile": "h200_sglang0517_llama8b"}}
    with pytest.raises(ConfigError, match="give one of them"):
        server_checks.check_engine_shapes(Config.from_mapping(both), (1, 5, 6))
    ok = Config.from_mapping({"profile": True, "policy": GOODPUT})
    server_checks.check_engine_shapes(ok, (1, 5, 6))
    with pytest.raises(ConfigError, match="DP attention"):
        server_checks.check_engine_shapes(ok, (1, 5, 6), dp_attention=True)
    unwritable = {"profile": {"save": "/proc/specfsm-no/profile.csv"}, "policy": GOODPUT}
    with pytest.raises(ConfigError) as exc:
        server_checks.check_engine_shapes(Config.from_mapping(unwritable), (1, 5, 6))
    assert exc.value.key == "profile.save" and "cannot create directory" in exc.value.reason
    for bad, key in (
        ({"bs": []}, "profile.bs"),
        ({"bs": [0]}, "profile.bs"),
        ({"forwards": 0}, "profile.forwards"),
        ({"sve": 1}, "profile.sve"),
        ({"max_seconds": -1}, "profile.max_seconds"),
        ("yes", "profile"),
    ):
        with pytest.raises(ConfigError) as exc:
            Config.from_mapping({"profile": bad})
        assert exc.value.key == key, (bad, exc.value)


def test_profiled_points_count_as_measured() -> None:
    """A calibrating goodput policy priced with the profile does not probe what the profile
    measured: every profiled (kind, shape) is marked measured, at factor 1."""
    from specfsm_sglang.profile_schedule import seed_calibration

    from specfsm.policy.goodput import GoodputPolicy

    samples = {("spec", C1, 8): [3.0], ("spec", C5, 8): [6.0], ("plain", None, 8): [2.0]}
    rows = profile_rows(samples, ctx=300)
    pol = config.make_policy({**GOODPUT, "shapes": ["chain1", "chain3", "chain5"]})
    assert isinstance(pol, GoodputPolicy) and pol.calibration is not None
    assert not pol.calibration.measured("spec", C1)
    assert seed_calibration(pol, rows) == 3
    cal = pol.calibration
    assert cal.measured("spec", C1) and cal.measured("spec", C5) and cal.measured("plain", None)
    assert not cal.measured("spec", C3)
    assert cal.factor("spec", C1, 8) == 1.0
