"""Prometheus metrics (only when SGLang's --enable-metrics is on), on SGLang's own /metrics.

Series (every one carries SGLang's scheduler label set, the labels of its
`SchedulerMetricsCollector`: model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, dp_rank
when DP is on, priority when priority scheduling is on, and any --extra-metric-labels), so that a
dashboard joins them with ``sglang:*`` series ``on(...)`` those labels:

  specfsm_mode{mode}                       1 for the current mode, 0 for the others
  specfsm_transitions_total{src,dst}       transitions (every legal pair exported from 0)
  specfsm_time_in_mode_seconds_total{mode} seconds spent in each mode, live: the current mode's
                                           is advanced every TICK_S by a background thread and
                                           at each transition (nothing per iteration)
  specfsm_current_mode_seconds             seconds since the current mode was entered (live)
  specfsm_policy_faults_total{policy}      policy calls that raised / returned a wrong value

Exported from the ranks that export SGLang's scheduler series (its stats-logging rank:
attn_tp_rank 0 and attn_cp_rank 0, one per DP rank; every rank with
--enable-metrics-for-all-schedulers); the other ranks create nothing. SGLang runs
prometheus_client in multiprocess mode (PROMETHEUS_MULTIPROC_DIR, set by the engine's parent
before it spawns the schedulers): the values written here in the scheduler process are read by
the HTTP server's MultiProcessCollector at scrape time. The families are created once per process
(`families`) so a second engine in one process reuses them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from specfsm import TRANSITIONS, Mode, TransitionRecord

if TYPE_CHECKING:  # imported at run time only once SGLang set PROMETHEUS_MULTIPROC_DIR
    from prometheus_client import Counter, Gauge

#: seconds between two live updates of the current mode's time (background thread)
TICK_S = 1.0


@attrs.frozen
class Families:
    """The metric families for one label set (label names)."""

    mode: Gauge
    transitions: Counter
    time_in_mode: Counter
    current_mode_seconds: Gauge
    policy_faults: Counter


_FAMILIES: dict[tuple[str, ...], Families] = {}


def families(labelnames: tuple[str, ...]) -> Families:
    """The specfsm metric families with SGLang's label names (created once per process; a
    different label set, e.g. a later engine with priority scheduling, replaces them)."""
    fam = _FAMILIES.get(labelnames)
    if fam is not None:
        return fam
    # imported here, after SGLang set PROMETHEUS_MULTIPROC_DIR (prometheus_client picks its
    # value class at import)
    from prometheus_client import REGISTRY, Counter, Gauge

    for old in _FAMILIES.values():
        for metric in attrs.astuple(old, recurse=False):
            REGISTRY.unregister(metric)
    _FAMILIES.clear()

    names = list(labelnames)
    fam = Families(
        mode=Gauge(
            "specfsm_mode",
            "1 for the current specfsm mode, 0 for the others",
            [*names, "mode"],
            multiprocess_mode="mostrecent",
        ),
        transitions=Counter(
            "specfsm_transitions",
            "specfsm transitions by source and destination mode",
            [*names, "src", "dst"],
        ),
        time_in_mode=Counter(
            "specfsm_time_in_mode_seconds",
            f"seconds spent in each specfsm mode (the current one advanced every {TICK_S:g} s)",
            [*names, "mode"],
        ),
        current_mode_seconds=Gauge(
            "specfsm_current_mode_seconds",
            f"seconds since the current specfsm mode was entered (updated every {TICK_S:g} s)",
            names,
            multiprocess_mode="mostrecent",
        ),
        policy_faults=Counter(
            "specfsm_policy_faults",
            "policy calls that raised or returned a wrong value (each faulted to PLAIN)",
            [*names, "policy"],
        ),
    )
    _FAMILIES[labelnames] = fam
    return fam


class Metrics:
    """specfsm's series for one scheduler rank, labelled like SGLang's (`labels`).

    Children are bound once here; a transition costs a few counter/gauge writes, an iteration
    nothing. `start=True` runs the daemon thread that keeps the current mode's time live.
    """

    def __init__(
        self,
        labels: Mapping[str, object],
        initial: Mode,
        policy: str | None = None,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
    ) -> None:
        self.labels = {k: str(v) for k, v in labels.items()}
        fam = families(tuple(self.labels))
        self._fam = fam
        lab = self.labels
        self._mode_g = {m: fam.mode.labels(**lab, mode=m.value) for m in Mode}
        self._time_c = {m: fam.time_in_mode.labels(**lab, mode=m.value) for m in Mode}
        self._trans = {
            (src, dst): fam.transitions.labels(**lab, src=src.value, dst=dst.value)
            for src, row in TRANSITIONS.items()
            for dst in row.values()
        }
        self._current_g = fam.current_mode_seconds.labels(**lab)
        if policy is not None:
            fam.policy_faults.labels(**lab, policy=policy)  # exported from 0
        for c in self._time_c.values():
            c.inc(0)
        self._clock = clock
        self._lock = threading.Lock()
        self.mode = initial
        self._since = self._flushed = clock()
        self._set_mode(initial)
        self._current_g.set(0.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._run, args=(tick_s,), name="specfsm-metrics", daemon=True
            )
            self._thread.start()

    def _set_mode(self, mode: Mode) -> None:
        for m, g in self._mode_g.items():
            g.set(1.0 if m is mode else 0.0)

    def _advance(self, now: float) -> None:
        """Credit the current mode with the time since the last credit (lock held)."""
        now = max(now, self._flushed)
        self._time_c[self.mode].inc(now - self._flushed)
        self._flushed = now
        self._current_g.set(now - self._since)

    def tick(self, now: float | None = None) -> None:
        """Bring the current mode's time up to `now` (the thread calls it every tick_s)."""
        with self._lock:
            self._advance(self._clock() if now is None else now)

    def _run(self, tick_s: float) -> None:
        while not self._stop.wait(tick_s):
            self.tick()

    def close(self) -> None:
        """Stop the background thread (a final tick first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * TICK_S)
        self.tick()

    def transition(self, rec: TransitionRecord) -> None:
        with self._lock:
            self._advance(rec.monotonic_s)
            child = self._trans.get((rec.src, rec.dst))
            if child is None:  # not in the table (cannot happen through SpecFSM)
                child = self._fam.transitions.labels(
                    **self.labels, src=rec.src.value, dst=rec.dst.value
                )
            child.inc()
            if rec.dst is not self.mode:
                self.mode = rec.dst
                self._since = self._flushed
                self._current_g.set(0.0)
                self._set_mode(rec.dst)

    def policy_fault(self, policy: str, n: int = 1) -> None:
        self._fam.policy_faults.labels(**self.labels, policy=policy).inc(n)


def maybe_create(
    labels: Mapping[str, object] | None, initial: Mode, policy: str | None = None
) -> Metrics | None:
    """Metrics with SGLang's labels, or None (no cost) when this rank exports nothing
    (`labels` None: metrics off, or not a rank that exports SGLang's scheduler series)."""
    if labels is None:
        return None
    return Metrics(labels, initial, policy)
