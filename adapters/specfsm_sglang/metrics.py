"""Prometheus metrics (only when SGLang's --enable-metrics is on): the current mode,
transitions by (src, dst), time in each mode, policy faults by policy. Multiprocess-safe like
SGLang's own metrics."""

from __future__ import annotations

import time
from typing import Any

from specfsm import Mode, TransitionRecord


class Metrics:
    def __init__(self, rank: int) -> None:
        from prometheus_client import Counter, Gauge

        labels = {"tp_rank": str(rank)}
        self._labels = labels
        self.mode = Gauge(
            "specfsm_mode",
            "1 for the current specfsm mode, 0 for the others",
            ["tp_rank", "mode"],
            multiprocess_mode="mostrecent",
        )
        self.transitions = Counter(
            "specfsm_transitions",
            "specfsm transitions by source and destination mode",
            ["tp_rank", "src", "dst"],
        )
        self.time_in_mode = Counter(
            "specfsm_time_in_mode_seconds",
            "seconds spent in each specfsm mode",
            ["tp_rank", "mode"],
        )
        self.policy_faults = Counter(
            "specfsm_policy_faults",
            "policy calls that raised or returned a wrong value (each faulted to PLAIN)",
            ["tp_rank", "policy"],
        )
        self._current = Mode.SPECULATING
        self._since = time.monotonic()
        self._set_mode(self._current)

    def _set_mode(self, mode: Mode) -> None:
        for m in Mode:
            self.mode.labels(mode=m.value, **self._labels).set(1.0 if m is mode else 0.0)

    def transition(self, rec: TransitionRecord) -> None:
        now = rec.monotonic_s
        self.time_in_mode.labels(mode=rec.src.value, **self._labels).inc(
            max(0.0, now - self._since)
        )
        self._since = now
        self.transitions.labels(src=rec.src.value, dst=rec.dst.value, **self._labels).inc()
        self._current = rec.dst
        self._set_mode(rec.dst)

    def policy_fault(self, policy: str, n: int = 1) -> None:
        self.policy_faults.labels(policy=policy, **self._labels).inc(n)


def maybe_create(server_args: Any, rank: int) -> Metrics | None:
    """Metrics when SGLang's metrics are enabled, else None (no cost)."""
    if not getattr(server_args, "enable_metrics", False):
        return None
    return Metrics(rank)
