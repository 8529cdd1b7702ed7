"""Policy faults reach the Prometheus counter and the controller's observers."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("specfsm_sglang")
from prometheus_client import REGISTRY
from specfsm_sglang import metrics
from specfsm_sglang.controller import Controller, ControllerObserver

from specfsm import Event, FixedPolicy, Mode, Observation, SpecFSM
from specfsm.fsm.testing import RecordingActions, capturing_log


class Raises(FixedPolicy):
    """Raises on every decide."""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        raise RuntimeError("boom")

    def describe(self) -> dict[str, object]:
        return {"policy": "raises"}


class Seen(ControllerObserver):
    """Records each transition an observer is shown, with the policy faults at that moment."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def on_transition(self, ctl: Controller, rec: Any) -> None:
        self.seen.append((f"{rec.src.value}->{rec.dst.value}", ctl.fsm.policy_faults))


def test_policy_faults_counted_in_prometheus() -> None:
    """Each fault increments specfsm_policy_faults_total{policy} once, through the controller's
    transition listener (no per-iteration work); observers see each FAULT transition."""
    ctl: Any = Controller.__new__(Controller)
    log, _ = capturing_log()
    ctl.fsm = SpecFSM(Raises(True), RecordingActions(), log=log, max_policy_faults=2)
    ctl.fsm.listeners.append(ctl._on_transition)
    ctl._policy_faults_seen = 0
    obs = Seen()
    ctl.observers = [obs]
    labels = {"model_name": "m", "engine_type": "unified", "tp_rank": "7", "pp_rank": "0"}
    ctl.metrics = metrics.Metrics(labels, Mode.SPECULATING, start=False)

    def value(policy: str) -> float:
        v = REGISTRY.get_sample_value("specfsm_policy_faults_total", {**labels, "policy": policy})
        return v or 0.0

    for i in range(4):
        ctl.fsm.step(Observation(iteration=i, decode_bs=1))
    assert value("raises") == 2.0
    assert obs.seen == [("SPECULATING->PLAIN", 1), ("PLAIN->PLAIN", 2)]
    ctl.fsm.policy = Raises(True)
    ctl.fsm.step(Observation(iteration=9, decode_bs=1))
    assert value("raises") == 3.0 and obs.seen[-1] == ("PLAIN->PLAIN", 3)
