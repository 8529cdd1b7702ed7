"""The hysteresis every load-driven policy shares: debounce and dwell.

A policy built on `Hysteresis` computes one boolean per iteration, "is the load past the
threshold that matters in this mode?", and lets the base decide when that has lasted long
enough: `debounce` consecutive iterations past it, and at least `min_dwell` iterations since
the policy first saw the current mode. A policy that knows an iteration took the time of
several decode steps (a long prefill chunk) counts the rest toward the dwell with `credit`:
the dwell is there so a mode runs long enough to be judged, and a prefill-bound stretch of a
few hundred-millisecond iterations would otherwise hold a mode for seconds. With
`prefill_debounce` the same credit counts toward the debounce: the debounce filters a load
that crossed for a few decode steps' time, and one 8192-token chunk past the threshold is
already ~30 of them; counted as one iteration, the debounce held SPECULATING through the first
four chunks of a burst (0.3-0.6 s on the H200), slowing the burst's prefills. The base then
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

    def __init__(self, debounce: int, min_dwell: int, prefill_debounce: bool = True) -> None:
        self.debounce = debounce
        self.min_dwell = min_dwell
        self.prefill_debounce = prefill_debounce
        self._mode: Mode | None = None
        self._since = 0  # iteration at which the policy first saw the current mode
        self._streak = 0.0  # iterations' worth of time past the threshold that matters now
        self._streak_n = 0  # observations in that streak
        self._worth = 1.0  # the current observation's worth in iterations (1 + its credit)
        self._credit = 0.0  # iterations' worth of time beyond one each, since `_since`
        #: (observations, iterations' worth) of the streak that fired at this observation
        self.fired: tuple[int, float] = (0, 0.0)
        self.last_reason = ""

    def _seen(self, mode: Mode, iteration: int) -> None:
        """Track the mode: a new mode restarts the dwell clock and the streak."""
        self._worth = 1.0
        if self.fired[0]:
            self.fired = (0, 0.0)
        if mode is not self._mode:
            self._mode = mode
            self._since = iteration
            self._streak = 0.0
            self._streak_n = 0
            self._credit = 0.0

    def credit(self, iterations: float) -> None:
        """Count `iterations` more toward the current mode's dwell (an iteration that took
        that much longer than a decode step), and with `prefill_debounce` toward the debounce
        when this observation is past the threshold."""
        self._credit += iterations
        if self.prefill_debounce:
            self._worth += iterations

    def dwelt(self, iteration: int) -> float:
        """Iterations the current mode has run, credit included."""
        return iteration - self._since + self._credit

    def _confirm(self, past: bool, mode: Mode, iteration: int) -> Event | None:
        """Count `past`; the load event toward the other side once debounce and dwell hold."""
        if not past:  # the common case: nothing to count
            self._streak = 0.0
            self._streak_n = 0
            return None
        self._streak += self._worth
        self._streak_n += 1
        if self._streak < self.debounce or self.dwelt(iteration) < self.min_dwell:
            return None
        self.fired = (self._streak_n, self._streak)
        self.reset_streak()
        return TOWARD[(mode, _SPECULATING if mode is _PLAIN else _PLAIN)]

    def reset_streak(self) -> None:
        self._streak = 0.0
        self._streak_n = 0

    def streak_text(self) -> str:
        """How the debounce was met by the streak that fired last: "4 iterations", or with
        prefill credit "1 iteration worth 24 decode steps"."""
        n, worth = self.fired
        text = f"{n} iteration{'' if n == 1 else 's'}"
        return text if worth <= n else f"{text} worth {worth:.0f} decode steps"
