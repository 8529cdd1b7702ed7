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


def _rec(src: Mode, dst: Mode, event: Event, at: float) -> TransitionRecord:
    return TransitionRecord(1, src, dst, event, "test", 1.0, 1.0, at)


def test_fault_self_loop_counts_but_keeps_the_dwell() -> None:
    """PLAIN -FAULT-> PLAIN is counted as a transition; the mode and its dwell stay."""
    labels = {**LABELS, "tp_rank": "11"}
    now = [10.0]
    m = metrics.Metrics(labels, Mode.PLAIN, clock=lambda: now[0], start=False)

    def v(name: str, **extra: str) -> float | None:
        return REGISTRY.get_sample_value(name, {**labels, **extra})

    m.transition(_rec(Mode.PLAIN, Mode.PLAIN, Event.FAULT, 14.0))
    assert v("specfsm_transitions_total", src="PLAIN", dst="PLAIN") == 1.0
    assert v("specfsm_mode", mode="PLAIN") == 1.0
    assert v("specfsm_current_mode_seconds") == pytest.approx(4.0)  # not reset to 0
    m.close()


def test_time_never_runs_backwards() -> None:
    """A record stamped before the last tick credits nothing (no negative increment)."""
    labels = {**LABELS, "tp_rank": "12"}
    now = [50.0]
    m = metrics.Metrics(labels, Mode.SPECULATING, clock=lambda: now[0], start=False)
    now[0] = 53.0
    m.tick()
    m.transition(_rec(Mode.SPECULATING, Mode.DRAINING, Event.LOAD_HIGH, 52.0))
    spec = REGISTRY.get_sample_value(
        "specfsm_time_in_mode_seconds_total", {**labels, "mode": "SPECULATING"}
    )
    assert spec == pytest.approx(3.0)
    now[0] = 54.0
    m.tick()
    drain = REGISTRY.get_sample_value(
        "specfsm_time_in_mode_seconds_total", {**labels, "mode": "DRAINING"}
    )
    assert drain == pytest.approx(1.0)
    m.close()


def test_policy_faults_per_policy() -> None:
    """policy_fault(n) adds n to that policy's counter only."""
    labels = {**LABELS, "tp_rank": "13"}
    m = metrics.Metrics(labels, Mode.SPECULATING, policy="goodput", start=False)
    m.policy_fault("goodput")
    m.policy_fault("goodput", 2)
    m.policy_fault("threshold")
    get = REGISTRY.get_sample_value
    assert get("specfsm_policy_faults_total", {**labels, "policy": "goodput"}) == 3.0
    assert get("specfsm_policy_faults_total", {**labels, "policy": "threshold"}) == 1.0
    m.close()


def test_families_once_per_label_set() -> None:
    """The families are created once per label names (a second engine in the process reuses
    them); another label set (e.g. SGLang's priority label) replaces them in the registry."""
    names = tuple(LABELS)
    first = metrics.families(names)
    assert metrics.families(names) is first
    m = metrics.Metrics({**LABELS, "tp_rank": "14", "priority": "1"}, Mode.PLAIN, start=False)
    got = REGISTRY.get_sample_value(
        "specfsm_mode", {**LABELS, "tp_rank": "14", "priority": "1", "mode": "PLAIN"}
    )
    assert got == 1.0
    m.close()
    assert metrics.families(names) is not first  # replaced, then created again
    assert REGISTRY.get_sample_value("specfsm_mode", {**LABELS, "mode": "PLAIN"}) is None


def test_maybe_create_starts_and_close_stops_the_thread() -> None:
    """With labels: a Metrics whose daemon thread runs until close()."""
    m = metrics.maybe_create({**LABELS, "tp_rank": "15"}, Mode.SPECULATING, "fixed")
    assert m is not None and m._thread is not None and m._thread.is_alive()
    m.close()
    assert not m._thread.is_alive()
