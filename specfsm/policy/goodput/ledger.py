"""The goodput policy's record of what it is doing: hysteresis, probes and re-probes.

A decision rests on the estimate and on this ledger: the debounce and dwell of the load
decision (`Hysteresis`), the shape streak and the iteration of the last RESHAPE, and the
probes: an option entered to measure it, judged once measured at the accept lengths' upper
bound. Each change of that state is one named method, called by the rule that decided it.

* `initial`: in the first mode, before the policy's first event: that mode was not chosen
  by the policy, so it leaves without dwell or debounce.
* `probe`: SPECULATING was entered for a shape never measured; `probe_shape` is that shape
  until the machine runs it and it is measured.
* `exploring`: the current shape was chosen before it was ever measured (leaving it needs
  one iteration of agreement, no standard-error term).
* `probe_plain`: PLAIN was entered while PLAIN was never measured.
* reversals: `reversals` load switches came each within `reversal_window` iterations of the
  one before (`load_switched`), and each doubles the margin the next needs (`margin`), up to
  `max_margin`; every `reversal_window` iterations without a switch takes one back. Prices
  that sit near each other and swing with the prefill share would otherwise switch the mode
  every few dozen iterations, paying a drain and a catch-up each time for a gain inside the
  noise; a clear win (a burst, a load step) still clears the doubled margin at once.
* re-probes from PLAIN: `reprobe_n` since PLAIN was entered by a decision (not a failed
  re-probe), `reprobe_at` the iteration from which the next may fire, `reprobing` while one
  runs, `reprobe_shape` the shape it went for (until the machine runs it) and `reprobe_end`
  the iteration it is judged at (-1: not yet at the shape).
"""

from __future__ import annotations

import math

from specfsm.fsm.table import TOWARD, Event, Mode
from specfsm.model.acceptance import DraftShape
from specfsm.policy.base import Hysteresis


class Ledger(Hysteresis):
    """Hysteresis, shape streak and the probe flags of one goodput policy."""

    def __init__(
        self,
        debounce: int,
        min_dwell: int,
        *,
        margin: float = 0.0,
        max_margin: float = 0.0,
        reversal_window: int = 0,
        prefill_debounce: bool = True,
    ) -> None:
        super().__init__(debounce, min_dwell, prefill_debounce)
        self.base_margin = margin
        self.max_margin = max_margin
        self.reversal_window = reversal_window
        #: the reversals that double `margin` up to `max_margin` (more would only slow its decay)
        self.reversal_limit = (
            max(0, math.ceil(math.log2(max_margin / margin) - 1e-9)) if margin > 0.0 else 0
        )
        self.shape_streak = 0
        self.shape_since = -(10**9)  # iteration of the last RESHAPE
        self.initial = False
        self.exploring = False
        self.probe = False
        self.probe_shape: DraftShape | None = None
        self.probe_plain = False
        self.reprobe_n = 0
        self.reprobe_at = 0
        self.reprobing = False
        self.reprobe_shape: DraftShape | None = None
        self.reprobe_end = -1
        self.reversals = 0
        self._switched_at = -(10**9)  # iteration of the last load switch

    @property
    def since(self) -> int:
        """The iteration the policy first saw the current mode."""
        return self._since

    def first_seen(self, mode: Mode, iteration: int) -> None:
        """The first mode the policy sees was not chosen by it: no dwell and no debounce."""
        if self._mode is None:
            self._mode, self._since = mode, iteration - self.min_dwell
            self.initial = True

    def seen(self, mode: Mode, iteration: int) -> None:
        self._seen(mode, iteration)

    def idle(self) -> None:
        """Nothing decoded: no streak counts through it."""
        self.reset_streak()
        self.shape_streak = 0

    def confirm(self, past: bool, mode: Mode, iteration: int, measured_any: bool) -> Event | None:
        """The load event toward the other side once `past` held long enough. A probe leaves
        only once it measured what it came for (`measured_any`: any step of the kind it
        probes was measured); the first mode and a probe that measured no better leave with
        no debounce and no dwell."""
        plain = mode is Mode.PLAIN
        probing = (not plain and self.probe) or (plain and self.probe_plain)
        if probing and not measured_any:
            self.reset_streak()
            return None
        if past and (self.initial or probing):
            self.reset_streak()
            self.fired = (1, 1.0)
            return TOWARD[(mode, Mode.SPECULATING if plain else Mode.PLAIN)]
        return self._confirm(past, mode, iteration)

    def _reversals_now(self, iteration: int) -> int:
        w = self.reversal_window
        if w <= 0:
            return 0
        return max(0, self.reversals - (iteration - self._switched_at) // w)

    def margin(self, iteration: int) -> float:
        """The margin a load switch needs at `iteration`: the base margin doubled per reversal
        still counted, at most `max_margin` (the base with the window 0)."""
        n = self._reversals_now(iteration)
        return min(self.max_margin, self.base_margin * (1 << n)) if n else self.base_margin

    def load_switched(self, iteration: int) -> None:
        """A load switch (LOAD_HIGH / LOAD_LOW) decided at `iteration`: a reversal when it
        came within `reversal_window` iterations of the one before; at most `reversal_limit`
        are counted (the doublings that reach the cap)."""
        n = self._reversals_now(iteration)
        if self.reversal_window > 0 and iteration - self._switched_at < self.reversal_window:
            n = min(n + 1, self.reversal_limit)
        self.reversals = n
        self._switched_at = iteration

    # ------------------------------------------------------------------ named transitions
    def speculating_chosen(self, shape: DraftShape, never_measured: bool, reprobe: bool) -> None:
        """LOAD_LOW toward `shape`: a probe when it was never measured, else a re-probe when
        the re-probe rule chose it."""
        self.probe = never_measured
        self.probe_shape = shape if never_measured else None
        self.probe_plain = False
        self.reprobing = reprobe and not never_measured
        if self.reprobing:
            self.reprobe_n += 1
            self.reprobe_shape = shape
            self.reprobe_end = -1

    def plain_chosen(self, iteration: int, plain_never_measured: bool, reprobe_after: int) -> None:
        """LOAD_HIGH by a decision: PLAIN is a probe when it was never measured."""
        self.probe = False
        self.probe_shape = None
        self.probe_plain = plain_never_measured
        self.shape_streak = 0
        self.plain_entered(iteration, reprobe_after)

    def plain_entered(self, iteration: int, reprobe_after: int) -> None:
        """After a failed re-probe the next waits `reprobe_after` x 2^n (n re-probes so far);
        after a decision to leave SPECULATING the count starts again."""
        if self.reprobing:
            self.reprobe_at = iteration + (reprobe_after << self.reprobe_n)
        else:
            self.reprobe_n = 0
            self.reprobe_at = iteration + reprobe_after
        self.reprobing = False
        self.reprobe_shape = None
        self.reprobe_end = -1

    def reshaped(self, iteration: int, never_measured: bool) -> None:
        """A RESHAPE by the shape rule: its dwell starts; `exploring` when the new shape was
        never measured."""
        self.shape_streak = 0
        self.shape_since = iteration
        self.exploring = never_measured

    def probe_reshaped(self, iteration: int) -> None:
        """A RESHAPE to the probed shape (SPECULATING resumed at the machine's shape)."""
        self.shape_since = iteration
        self.shape_streak = 0
        self.exploring = True

    def reprobe_reshaped(self, iteration: int) -> None:
        self.shape_since = iteration

    def reprobe_at_shape(self, iteration: int, reprobe_len: int) -> None:
        """The re-probe runs its shape: judged after `reprobe_len` iterations."""
        self.reprobe_shape = None
        self.reprobe_end = iteration + reprobe_len

    def reprobe_kept(self, iteration: int) -> None:
        """The re-probe measured better: an ordinary SPECULATING from now on."""
        self.reprobing = False
        self.shape_since = iteration
