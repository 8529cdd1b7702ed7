"""The hysteresis every load-driven policy shares: debounce and dwell.

A policy built on `Hysteresis` computes one boolean per iteration, "is the load past the
threshold that matters in this mode?", and lets the base decide when that has lasted long
enough: `debounce` consecutive iterations past it, and at least `min_dwell` iterations since
the policy first saw the current mode. A policy that knows an iteration took the time of
several decode steps (a long prefill chunk) counts the rest toward the dwell with `credit`:
the dwell is there so a mode runs long enough to be judged, and a prefill-bound stretch of a
few hundred-millisecond iterations would otherwise hold a mode for seconds. The base then
names the mode to aim for (the other side: SPECULATING from PLAIN, PLAIN from SPECULATING or
RESYNCING) and the table (`TOWARD`) turns it into the load event; a policy never writes a
transition itself.
"""

from __future__ import annotations

from specfsm.fsm.table import TOWARD, Event, Mode

_PLAIN = Mode.PLAIN  # module-level aliases: one global load on the per-iteration path
_SPECULATING = Mode.SPECULATING


class Hysteresis:
    """Debounce and dwell state of one policy (subclass it; call `_seen` then `_confirm`)."""

    def __init__(self, debounce: int, min_dwell: int) -> None:
        self.debounce = debounce
        self.min_dwell = min_dwell
        self._mode: Mode | None = None
        self._since = 0  # iteration at which the policy first saw the current mode
        self._streak = 0  # consecutive iterations past the threshold that matters now
        self._credit = 0.0  # iterations' worth of time beyond one each, since `_since`
        self.last_reason = ""

    def _seen(self, mode: Mode, iteration: int) -> None:
        """Track the mode: a new mode restarts the dwell clock and the streak."""
        if mode is not self._mode:
            self._mode = mode
            self._since = iteration
            self._streak = 0
            self._credit = 0.0

    def credit(self, iterations: float) -> None:
        """Count `iterations` more toward the current mode's dwell (an iteration that took
        that much longer than a decode step)."""
        self._credit += iterations

    def dwelt(self, iteration: int) -> float:
        """Iterations the current mode has run, credit included."""
        return iteration - self._since + self._credit

    def _confirm(self, past: bool, mode: Mode, iteration: int) -> Event | None:
        """Count `past`; the load event toward the other side once debounce and dwell hold."""
        if not past:  # the common case: nothing to count
            self._streak = 0
            return None
        self._streak += 1
        if self._streak < self.debounce or self.dwelt(iteration) < self.min_dwell:
            return None
        self._streak = 0
        return TOWARD[(mode, _SPECULATING if mode is _PLAIN else _PLAIN)]
