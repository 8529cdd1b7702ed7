"""specfsm's Prometheus series: SGLang's labels, the configured initial mode, live time."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("specfsm_sglang")
from prometheus_client import REGISTRY
from specfsm_sglang import compat, metrics

from specfsm import Event, Mode, TransitionRecord

LABELS = {
    "model_name": "unit",
    "engine_type": "unified",
    "tp_rank": "3",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}


def _v(name: str, **extra: str) -> float | None:
    return REGISTRY.get_sample_value(name, {**LABELS, **extra})


def test_initial_mode_and_live_time_without_transition() -> None:
    """Starting in PLAIN: mode gauge PLAIN, time in PLAIN grows on ticks with no transition,
    every legal (src, dst) pair is exported at 0, the policy's fault counter at 0."""
    now = [100.0]
    m = metrics.Metrics(LABELS, Mode.PLAIN, policy="fixed", clock=lambda: now[0], start=False)
    assert _v("specfsm_mode", mode="PLAIN") == 1.0
    assert _v("specfsm_mode", mode="SPECULATING") == 0.0
    assert _v("specfsm_transitions_total", src="PLAIN", dst="RESYNCING") == 0.0
    assert _v("specfsm_policy_faults_total", policy="fixed") == 0.0
    base = _v("specfsm_time_in_mode_seconds_total", mode="PLAIN") or 0.0
    now[0] = 102.5
    m.tick()
    assert _v("specfsm_time_in_mode_seconds_total", mode="PLAIN") == pytest.approx(base + 2.5)
    assert _v("specfsm_current_mode_seconds") == pytest.approx(2.5)
    rec = TransitionRecord(7, Mode.PLAIN, Mode.RESYNCING, Event.LOAD_LOW, "r", 1.0, 1.0, 103.0)
    m.transition(rec)
    assert _v("specfsm_mode", mode="RESYNCING") == 1.0 and _v("specfsm_mode", mode="PLAIN") == 0
    assert _v("specfsm_transitions_total", src="PLAIN", dst="RESYNCING") == 1.0
    assert _v("specfsm_time_in_mode_seconds_total", mode="PLAIN") == pytest.approx(base + 3.0)
    now[0] = 104.0
    m.tick()
    assert _v("specfsm_current_mode_seconds") == pytest.approx(1.0)
    m.close()


def test_thread_ticks() -> None:
    """The background thread advances the current mode's time with no call from the hot path."""
    labels = {**LABELS, "tp_rank": "4"}
    m = metrics.Metrics(labels, Mode.SPECULATING, tick_s=0.02)
    try:
        import time

        time.sleep(0.2)
        got = REGISTRY.get_sample_value(
            "specfsm_time_in_mode_seconds_total", {**labels, "mode": "SPECULATING"}
        )
        assert got is not None and got > 0.05
    finally:
        m.close()


class _Ctx:
    def __init__(self, enabled: bool, labels: dict[str, object] | None) -> None:
        self.current_scheduler_metrics_enabled = enabled
        self.collector = None if labels is None else type("C", (), {"labels": labels})()


class _Sched:
    def __init__(self, ctx: _Ctx | None) -> None:
        self.metrics_collector_context = ctx


def test_metrics_labels_from_sglang_collector() -> None:
    """Labels are the scheduler collector's (stringified) on the exporting rank, else None."""
    lab: dict[str, object] = {"model_name": "m", "tp_rank": 0, "pp_rank": 0, "dp_rank": 1}
    assert compat.metrics_labels(_Sched(_Ctx(True, lab))) == {
        "model_name": "m",
        "tp_rank": "0",
        "pp_rank": "0",
        "dp_rank": "1",
    }
    assert compat.metrics_labels(_Sched(_Ctx(False, lab))) is None
    assert compat.metrics_labels(_Sched(_Ctx(True, None))) is None
    assert compat.metrics_labels(_Sched(None)) is None
    assert metrics.maybe_create(None, Mode.SPECULATING) is None
