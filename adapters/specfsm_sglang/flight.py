"""What one rank carries from one hook call to the next: the flight state of its forwards.

- The K-wide forwards launched whose results are not processed yet (with overlap scheduling one
  may still be in flight when the next forward starts): DRAINING is complete (DRAINED) when
  none is. Each is kept with the iteration and the draft shape it was launched with: a result's
  accept lengths belong to the shape it was drafted with, and the observation lines name the
  round they come from.
- The accept lengths of the newest processed K-wide verify: the next observation's.
- RESYNCING's progress: RESYNCED is due when nothing is left. Warm PLAIN counts
  ``resync_forwards`` forwards down; zero-tax PLAIN holds one until the catch-up reports every
  request caught up (`ZeroTaxPlain.resync_done`).
- The previous decode forward (start time, batch size, shape, kind): the time from its start to
  the next decode forward's start, with no prefill between, is the next observation's
  ``step_ms``, for a policy that calibrates its step costs online. With overlap scheduling the
  host runs one batch ahead of the GPU: the second decode forward after a prefill is launched
  only once the prefill's result was processed, so its interval still holds the prefill's GPU
  time, and it is not reported either (on the H200 such intervals priced a zero-tax PLAIN step
  at bs 128 at 1.3x its cost and a chain-3 step at bs 56 at 2x, and the goodput policy
  switched each time it measured the mode it was in).
  Nor is the first interval after a change of step kind or draft shape (the profile's rule,
  `ProfileSchedule`): with overlap it holds the previous kind's GPU time (the first chain-3
  interval after a catch-up priced chain 3 at 1.8x its step at 28 requests on the H200), and a
  shape's first replays are slow. Nor are a process's first `START_SKIP` intervals: SGLang's
  own warm-up request at launch measured 138 and 213 ms per step at bs 1 on the H200, and the
  shapes example, with no start-up profile, priced chain 1 at 30x and chain 2 at 1.35x from
  them and stayed in PLAIN at one request for the rest of the run.
- When the deferred-prompt store is swept of finished requests before an observation
  (`ShrinkGate`, the store's own; the serving replay keeps one to tell the debt alike).

Its owner is the controller (`Controller.flight`). The controller's hot path updates it in
place (it runs on every decode forward: no call per update); everything else changes it through
its methods: the mode actions (DRAINING's exit releases the K-wide forwards, PLAIN and
RESYNCING start and end the resync), the start-up profile (`forget_step`).
"""

from __future__ import annotations

from collections import deque

from specfsm import Mode
from specfsm.model.acceptance import DraftShape

#: decode intervals not reported after a process starts (SGLang's warm-up request runs ~5)
START_SKIP = 16


class Flight:
    """The flight state of one rank's forwards (see the module docstring)."""

    __slots__ = (
        "accept_lens",
        "accept_shape",
        "inflight_wide",
        "last_correct",
        "prev_bs",
        "prev_kind",
        "prev_shape",
        "prev_t",
        "resync_forwards",
        "resync_left",
        "stale_after_extend",
        "stale_steps",
        "wide_its",
    )

    def __init__(
        self, resync_forwards: int, overlap: bool = False, start_skip: int = START_SKIP
    ) -> None:
        #: K-wide forwards launched whose results are not processed yet
        self.inflight_wide = 0
        #: what RESYNCING has left to do (0: RESYNCED is due)
        self.resync_left = 0
        #: warm PLAIN: the decode forwards RESYNCING lasts
        self.resync_forwards = resync_forwards
        #: the newest processed K-wide verify's accept lengths, and the shape it verified
        self.accept_lens: tuple[int, ...] = ()
        self.accept_shape: DraftShape | None = None
        #: the previous decode forward: start time (0.0: none to report), bs, shape, kind
        self.prev_t = 0.0
        self.prev_bs = 0
        self.prev_shape: DraftShape | None = None
        self.prev_kind = ""
        #: decode intervals still to leave unreported (they hold other work): a process's
        #: first `start_skip`, and at least as many as a prefill makes (the next decode
        #: forward's, and with overlap the one after it) or a change of step kind or shape (1)
        self.stale_steps = start_skip
        self.stale_after_extend = 1 if overlap else 0
        #: (iteration, shape) of the K-wide forwards in flight, oldest first
        self.wide_its: deque[tuple[int, DraftShape | None]] = deque(maxlen=8)
        #: the verify SGLang just completed: correct drafts per request, until its result is
        #: processed
        self.last_correct: list[int] | None = None

    # ------------------------------------------------------------ K-wide forwards in flight
    def release_wide(self) -> None:
        """DRAINING's exit: specfsm holds no reference to a K-wide forward any more."""
        self.inflight_wide = 0

    # ------------------------------------------------------------ RESYNCING's progress
    def start_resync(self, zero_tax: bool) -> None:
        """RESYNCING entered: zero-tax waits for the catch-up (`end_resync`), warm PLAIN for
        ``resync_forwards`` forwards (counted down by the controller)."""
        self.resync_left = 1 if zero_tax else self.resync_forwards

    def end_resync(self) -> None:
        """Nothing left to catch up (or RESYNCING left): RESYNCED is due / nothing pending."""
        self.resync_left = 0

    # ------------------------------------------------------------ the previous decode forward
    def step_start(self) -> float:
        """At a decode forward: the previous decode forward's start when the interval since is
        the previous step as served, else 0.0 (none to report)."""
        if self.prev_t and self.stale_steps:
            self.stale_steps -= 1
            return 0.0
        return self.prev_t

    def forget_step(self) -> None:
        """The next decode forward's step time would include other work (a prefill, the
        start-up profile's end): it is not reported (step_ms 0), nor with overlap the one after
        it."""
        self.prev_t = 0.0
        self.stale_steps = max(self.stale_steps, self.stale_after_extend)

    def step_changed(self) -> None:
        """The decode forward just launched runs another step kind or shape than the one
        before: the interval it starts is not reported (the controller's hot path inlines the
        test and calls this only on a change)."""
        if self.prev_kind:
            self.stale_steps = max(self.stale_steps, 1)


class ShrinkGate:
    """When a figure kept per request is swept of the requests gone: once the batch has shrunk
    by a sixteenth since the last sweep, so that a pass per sixteenth of the batch bounds what
    sweeping costs. The shrink is judged one call late: under overlap a request leaves the
    batch an iteration before its result marks it finished."""

    __slots__ = ("at", "last")

    def __init__(self) -> None:
        self.at = 0  # the batch at the last sweep, or the largest seen since
        self.last = 0  # the batch the last call was given

    def due(self, running: int, pending: bool) -> int | None:
        """Called once per observation with its batch (`running`) and whether anything is
        kept (`pending`): the batch to sweep for, or None."""
        seen, self.last = self.last, running
        if seen > self.at:
            self.at = seen
        elif pending and 16 * (self.at - seen) >= self.at:
            self.at = seen
            return seen
        return None


def step_kind(mode: Mode, zero_tax: bool) -> str:
    """What a decode forward in `mode` runs, as `Observation.step_kind` names it for a policy
    that calibrates its step costs: "spec" (SPECULATING), "plain" (a zero-tax PLAIN step: one
    target decode forward), "resync" (a zero-tax RESYNCING step: a PLAIN step + the catch-up),
    "warm" (the 1-wide state's 1-token verify + 1-token draft-extend: DRAINING's forward, and
    PLAIN / RESYNCING with ``plain: "warm"``). DRAINING's forward reported as "plain" poisoned
    the policy's PLAIN price by ~2x on the H200 (the tree run at 32 requests)."""
    if mode is Mode.SPECULATING:
        return "spec"
    if mode is Mode.DRAINING or not zero_tax:
        return "warm"
    return "resync" if mode is Mode.RESYNCING else "plain"
