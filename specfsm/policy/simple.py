"""The simple policies: threshold on the load signal, a fixed answer, a schedule.

A policy sees the current mode and one `Observation` per iteration and returns a `Verdict` (an
Event that is legal in that mode, with the rule that gave it and the numbers it compared), or
None. It is deterministic (same observations -> same decisions, so TP and
DP ranks agree) and keeps only small state of its own (debounce counters, EMAs). It never emits
completion events (DRAINED, RESYNCED): those come from the engine adapter. A policy names the
mode it wants; the table (`specfsm.fsm.table.TOWARD`) says which load event gets there.

Writing your own policy: see `specfsm.policy.plugins`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specfsm.fsm.decision import FixedPolicy
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import TOWARD, Mode
from specfsm.fsm.verdict import Verdict, rule_verdict
from specfsm.policy.base import Hysteresis

__all__ = ["RULE_NAMES", "FixedPolicy", "ScriptedPolicy", "ThresholdPolicy"]

#: every rule name a verdict of these policies may carry
RULE_NAMES = (
    "threshold.high_bs",
    "threshold.low_bs",
    "threshold.high_running",
    "threshold.low_running",
    "fixed.always",
    "fixed.never",
    "scripted.initial",
    "scripted.schedule",
    "scripted.callable",
)

_DRAINING = Mode.DRAINING
_PLAIN = Mode.PLAIN


class ThresholdPolicy(Hysteresis):
    """Stop speculating above `high`, resume at or below `low`, with debounce and dwell.

    The load signal is the decode batch size (or running requests with signal="running").
    A load event fires only after `debounce` consecutive iterations on the far side of a
    threshold and at least `min_dwell` iterations after the last mode change; `low < high`
    leaves a dead band between the two, so the rule cannot thrash at a single threshold.
    Its verdict (rule ``threshold.high_bs`` / ``threshold.low_bs``, ``_running`` with
    signal="running") carries the observed load, the threshold it passed and by how much.

    A prefill observation counts toward the dwell as ``prefill_tokens / prefill_step_tokens``
    iterations (0: one, like a decode step). A burst's prefill chunks take a few hundred
    milliseconds each, and counted as one iteration apiece they would hold SPECULATING
    through seconds of a burst before the dwell let the load event out; 256 prompt tokens
    is about one decode step's time for an 8B model on an H200 (23 us per prompt token, ~6 ms
    per step at the batch sizes where the thresholds sit). With `prefill_debounce` (default
    true) the same count goes toward the debounce: one chunk past the threshold worth 4 decode
    steps meets a debounce of 4 (false: one iteration).
    """

    def __init__(
        self,
        high: int,
        low: int,
        debounce: int = 4,
        min_dwell: int = 16,
        signal: str = "decode_bs",
        prefills: bool = True,
        prefill_step_tokens: int = 256,
        prefill_debounce: bool = True,
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
        if not isinstance(prefills, bool):
            raise ValueError(f"ThresholdPolicy: prefills must be true or false: {prefills!r}")
        if not isinstance(prefill_step_tokens, int) or prefill_step_tokens < 0:
            raise ValueError(
                f"ThresholdPolicy: prefill_step_tokens must be an int >= 0: {prefill_step_tokens!r}"
            )
        if not isinstance(prefill_debounce, bool):
            raise ValueError(
                f"ThresholdPolicy: prefill_debounce must be true or false: {prefill_debounce!r}"
            )
        super().__init__(debounce, min_dwell, prefill_debounce)
        #: the adapter observes before prefill forwards too (Observation.prefill_tokens > 0)
        self.sees_prefills = prefills
        self.high = high
        self.low = low
        self.signal = signal
        self.prefill_step_tokens = prefill_step_tokens
        self._use_running = signal == "running"
        short = "running" if self._use_running else "bs"
        self._rule_low = f"threshold.low_{short}"
        self._rule_high = f"threshold.high_{short}"

    def decide(self, mode: Mode, obs: Observation) -> Verdict | None:
        self._seen(mode, obs.iteration)
        if mode is _DRAINING:
            return None
        step = self.prefill_step_tokens
        if obs.prefill_tokens > step > 0:
            self.credit(obs.prefill_tokens / step - 1)
        load = obs.running if self._use_running else obs.decode_bs
        plain = mode is _PLAIN
        ev = self._confirm(load <= self.low if plain else load > self.high, mode, obs.iteration)
        if ev is None:
            return None
        if plain:
            rule, bound, past = self._rule_low, self.low, self.low - load
            reason = f"{self.signal}={load} <= low={self.low} for {self.streak_text()}"
        else:
            rule, bound, past = self._rule_high, self.high, load - self.high
            reason = f"{self.signal}={load} > high={self.high} for {self.streak_text()}"
        self.last_reason = reason
        return rule_verdict(
            ev, rule, reason, obs, signal=self.signal, observed=load, threshold=bound, margin=past
        )

    def describe(self) -> dict[str, object]:
        return {
            "policy": "threshold",
            "high": self.high,
            "low": self.low,
            "debounce": self.debounce,
            "min_dwell": self.min_dwell,
            "signal": self.signal,
            "prefills": self.sees_prefills,
            "prefill_step_tokens": self.prefill_step_tokens,
            "prefill_debounce": self.prefill_debounce,
        }


class ScriptedPolicy:
    """Follows a schedule of target modes by iteration (tests, debugging, bug reproduction).

    `schedule` is a sequence of (iteration, target) with strictly increasing iterations and
    targets SPECULATING or PLAIN; from each iteration on, the policy moves toward that target.
    Before the first entry the target is `initial`. A callable `target(iteration) -> bool`
    (True = speculate) may be given instead, e.g. for random or flapping patterns. Its verdict
    (rule ``scripted.schedule``, ``scripted.initial`` before the first entry, or
    ``scripted.callable``) carries the iteration and, for a schedule entry, the iteration the
    entry starts at. With `prefills` it is asked before prefill forwards too (`sees_prefills`),
    so a schedule can switch right before a prefill (off by default: a schedule counts the
    iterations it was written for).
    """

    def __init__(
        self,
        schedule: Sequence[tuple[int, Mode]] | Callable[[int], bool],
        initial: Mode = Mode.SPECULATING,
        prefills: bool = False,
    ) -> None:
        self.sees_prefills = prefills
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

    def decide(self, mode: Mode, obs: Observation) -> Verdict | None:
        it = obs.iteration
        want = self.target(it)
        ev = TOWARD[(mode, Mode.SPECULATING if want else Mode.PLAIN)]
        if ev is None:
            return None
        target = (Mode.SPECULATING if want else Mode.PLAIN).value
        self.last_reason = reason = f"scripted: target {target} at iteration {it}"
        start: int | None = None
        if self._fn is not None:
            rule = "scripted.callable"
        elif self._pos:
            rule, start = "scripted.schedule", self._steps[self._pos - 1][0]
        else:
            rule = "scripted.initial"
        return rule_verdict(
            ev,
            rule,
            reason,
            obs,
            signal="iteration",
            observed=it,
            threshold=start,
            margin=0.0 if start is None else it - start,
        )

    def describe(self) -> dict[str, object]:
        return {
            "policy": "scripted",
            "initial": (Mode.SPECULATING if self._initial else Mode.PLAIN).value,
            "schedule": "callable" if self._fn is not None else len(self._steps),
        }
