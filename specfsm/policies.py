"""Policies: cheap, deterministic rules that turn an observation into a load event.

A policy sees the current mode and one `Observation` per iteration and returns an Event that is
legal in that mode, or None. It is deterministic (same observations -> same decisions, so TP and
DP ranks agree) and keeps only small state of its own (debounce counters, EMAs). It never emits
completion events (DRAINED, RESYNCED): those come from the engine adapter.

All policies reduce to one question, "should the engine speculate?", answered by `toward()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from specfsm.observation import Observation
from specfsm.table import Event, Mode

_PLAIN = Mode.PLAIN  # module-level aliases: one global load on the per-iteration path
_DRAINING = Mode.DRAINING


def toward(mode: Mode, speculate: bool) -> Event | None:
    """The load event that moves `mode` toward speculating (True) or not (False), if any.

    DRAINING has no load event: the drain always completes first.
    """
    if speculate:
        return Event.LOAD_LOW if mode is Mode.PLAIN else None
    if mode is Mode.SPECULATING or mode is Mode.RESYNCING:
        return Event.LOAD_HIGH
    return None


@runtime_checkable
class Policy(Protocol):
    """What the machine asks once per iteration."""

    #: A short human-readable reason for the last non-None decision (read only on transitions).
    last_reason: str

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        """An event legal in `mode`, or None (the common case)."""
        ...

    def describe(self) -> dict[str, object]:
        """The policy's name and parameters, for the `specfsm.config` log line."""
        ...


class FixedPolicy:
    """Always (speculate=True) or never (False) speculate: the static baselines."""

    def __init__(self, speculate: bool) -> None:
        self.speculate = bool(speculate)
        self.last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        ev = toward(mode, self.speculate)
        if ev is not None:
            self.last_reason = "fixed: always speculate" if self.speculate else "fixed: never"
        return ev

    def describe(self) -> dict[str, object]:
        return {"policy": "fixed", "speculate": self.speculate}


class ThresholdPolicy:
    """Stop speculating above `high`, resume at or below `low`, with debounce and dwell.

    The load signal is the decode batch size (or running requests with signal="running").
    A load event fires only after `debounce` consecutive iterations on the far side of a
    threshold and at least `min_dwell` iterations after the last mode change; `low < high`
    leaves a dead band between the two, so the rule cannot thrash at a single threshold.
    """

    def __init__(
        self,
        high: int,
        low: int,
        debounce: int = 4,
        min_dwell: int = 16,
        signal: str = "decode_bs",
    ) -> None:
        if not (isinstance(high, int) and isinstance(low, int)):
            raise ValueError(f"ThresholdPolicy: high and low must be ints, got {high!r}, {low!r}")
        if low < 0:
            raise ValueError(f"ThresholdPolicy: low must be >= 0, got {low}")
        if not low < high:
            raise ValueError(f"ThresholdPolicy: need low < high, got low={low}, high={high}")
        if debounce < 1:
            raise ValueError(f"ThresholdPolicy: debounce must be >= 1, got {debounce}")
        if min_dwell < 0:
            raise ValueError(f"ThresholdPolicy: min_dwell must be >= 0, got {min_dwell}")
        if signal not in ("decode_bs", "running"):
            raise ValueError(f"ThresholdPolicy: signal must be decode_bs or running: {signal!r}")
        self.high = high
        self.low = low
        self.debounce = debounce
        self.min_dwell = min_dwell
        self.signal = signal
        self._use_running = signal == "running"
        self._streak = 0  # consecutive iterations past the threshold that matters now
        self._mode: Mode | None = None
        self._since = 0  # iteration at which the policy first saw the current mode
        self.last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        if mode is not self._mode:
            self._mode = mode
            self._since = obs.iteration
            self._streak = 0
        load = obs.running if self._use_running else obs.decode_bs
        if mode is _PLAIN:
            past = load <= self.low
        elif mode is _DRAINING:
            return None
        else:
            past = load > self.high
        if not past:  # the common case: nothing to count
            self._streak = 0
            return None
        self._streak += 1
        if self._streak < self.debounce or obs.iteration - self._since < self.min_dwell:
            return None
        self._streak = 0
        if mode is Mode.PLAIN:
            self.last_reason = (
                f"{self.signal}={load} <= low={self.low} for {self.debounce} iterations"
            )
            return Event.LOAD_LOW
        self.last_reason = f"{self.signal}={load} > high={self.high} for {self.debounce} iterations"
        return Event.LOAD_HIGH

    def describe(self) -> dict[str, object]:
        return {
            "policy": "threshold",
            "high": self.high,
            "low": self.low,
            "debounce": self.debounce,
            "min_dwell": self.min_dwell,
            "signal": self.signal,
        }


class ScriptedPolicy:
    """Follows a schedule of target modes by iteration (tests, debugging, bug reproduction).

    `schedule` is a sequence of (iteration, target) with strictly increasing iterations and
    targets SPECULATING or PLAIN; from each iteration on, the policy moves toward that target.
    Before the first entry the target is `initial`. A callable `target(iteration) -> bool`
    (True = speculate) may be given instead, e.g. for random or flapping patterns.
    """

    def __init__(
        self,
        schedule: Sequence[tuple[int, Mode]] | Callable[[int], bool],
        initial: Mode = Mode.SPECULATING,
    ) -> None:
        if initial not in (Mode.SPECULATING, Mode.PLAIN):
            raise ValueError(f"ScriptedPolicy: initial must be SPECULATING or PLAIN: {initial!r}")
        self._fn: Callable[[int], bool] | None = None
        self._steps: list[tuple[int, bool]] = []
        if callable(schedule):
            self._fn = schedule
        else:
            last = -1
            for it, target in schedule:
                if target not in (Mode.SPECULATING, Mode.PLAIN):
                    raise ValueError(
                        f"ScriptedPolicy: targets must be SPECULATING or PLAIN, got {target!r}"
                    )
                if it <= last:
                    raise ValueError(f"ScriptedPolicy: iterations must increase: {it} <= {last}")
                last = it
                self._steps.append((it, target is Mode.SPECULATING))
        self._initial = initial is Mode.SPECULATING
        self._pos = 0
        self._want = self._initial
        self.last_reason = ""

    def target(self, iteration: int) -> bool:
        """True when the schedule wants speculation at `iteration`."""
        if self._fn is not None:
            return bool(self._fn(iteration))
        steps = self._steps
        while self._pos < len(steps) and steps[self._pos][0] <= iteration:
            self._want = steps[self._pos][1]
            self._pos += 1
        return self._want

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        want = self.target(obs.iteration)
        ev = toward(mode, want)
        if ev is not None:
            target = "SPECULATING" if want else "PLAIN"
            self.last_reason = f"scripted: target {target} at iteration {obs.iteration}"
        return ev

    def describe(self) -> dict[str, object]:
        return {
            "policy": "scripted",
            "initial": "SPECULATING" if self._initial else "PLAIN",
            "schedule": "callable" if self._fn is not None else len(self._steps),
        }
