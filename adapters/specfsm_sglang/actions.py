"""SGLang's ModeActions: the only code that attaches, detaches or releases mode-specific state.

What each mode owns in SGLang 0.5.23 (see docs/sglang.md):
- SPECULATING attaches the K-wide runtime state (draft backends, verify graph/backend,
  draft-extend backend for `speculative_num_steps` / `num_draft_tokens` = K): built by SGLang at
  start-up, registered by specfsm.
- DRAINING, PLAIN and RESYNCING attach the 1-wide runtime state (steps=0, one verify token,
  built by `EAGLEWorkerV2.build_adaptive_runtime_state(0, 1)` at start-up): one target token
  per request, no draft step. In this version PLAIN keeps the draft warm (a 1-token
  draft-extend per step, as upstream's steps=0 does); the zero-tax PLAIN replaces exactly the
  PLAIN and RESYNCING actions below (lag buffer on entry, catch-up in RESYNCING).
- DRAINING owns the K-wide batches still in flight: it allocates nothing, and its exit drops
  specfsm's references to them once their results were processed.
"""

from __future__ import annotations

from typing import Any

from specfsm import TransitionInfo


class SGLangModeActions:
    """Entry/exit actions for one EAGLEWorkerV2 (one scheduler rank)."""

    def __init__(self, worker: Any, spec_state: Any, plain_state: Any, ctl: Any) -> None:
        self.worker = worker
        self.spec_state = spec_state
        self.plain_state = plain_state
        self.ctl = ctl  # the controller: in-flight bookkeeping and resync progress

    def _attach(self, state: Any) -> None:
        """Attach a pre-built runtime state to the worker, completely.

        `apply_runtime_state` returns early when the step count already matches; after a
        partial failure that could leave a mix of two states, so force it unless every piece
        is already the target's.
        """
        w = self.worker
        dw = w._draft_worker
        if (
            w.speculative_num_steps == state.speculative_num_steps
            and w.speculative_num_draft_tokens == state.speculative_num_draft_tokens
            and dw.speculative_num_steps == state.speculative_num_steps
            and dw.draft_attn_backend is state.draft_attn_backend
            and w._target_worker.model_runner.attn_backend is state.target_attn_backend
        ):
            return
        w.speculative_num_steps = -1  # defeat the early return: apply every field
        w.apply_runtime_state(state)

    # SPECULATING -------------------------------------------------------------------------
    def enter_speculating(self, t: TransitionInfo) -> None:
        self._attach(self.spec_state)

    def exit_speculating(self, t: TransitionInfo) -> None:
        # The K-wide state is NOT released here: a batch launched with it may be in flight
        # (overlap scheduling). DRAINING owns that.
        return None

    # DRAINING ----------------------------------------------------------------------------
    def enter_draining(self, t: TransitionInfo) -> None:
        # No new draft from the next forward on: attach the 1-wide state. Nothing allocated.
        self._attach(self.plain_state)

    def exit_draining(self, t: TransitionInfo) -> None:
        if t.event.name == "DRAINED" and self.ctl.inflight_wide:
            raise RuntimeError(
                f"DRAINED with {self.ctl.inflight_wide} K-wide batch(es) still in flight"
            )
        self.ctl.inflight_wide = 0  # release: specfsm holds no reference to K-wide batches

    # PLAIN -------------------------------------------------------------------------------
    def enter_plain(self, t: TransitionInfo) -> None:
        # Total and idempotent (the FAULT path runs only this): from any partial state,
        # attach the 1-wide state and forget any catch-up in progress.
        self._attach(self.plain_state)
        self.ctl.resync_left = 0

    def exit_plain(self, t: TransitionInfo) -> None:
        return None

    # RESYNCING ---------------------------------------------------------------------------
    def enter_resyncing(self, t: TransitionInfo) -> None:
        # Warm PLAIN: the draft saw every token through its 1-token draft-extend, so the
        # catch-up is the next forward's draft-extend; count it down.
        self.ctl.resync_left = self.ctl.resync_forwards

    def exit_resyncing(self, t: TransitionInfo) -> None:
        self.ctl.resync_left = 0
