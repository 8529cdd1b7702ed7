"""SGLang's ModeActions: the only code that attaches, detaches or releases mode-specific state.

What each mode owns in SGLang 0.5.23 (see docs/sglang.md):
- SPECULATING attaches the K-wide runtime state of its current draft shape (draft backends,
  verify graph/backend, draft-extend backend for `speculative_num_steps` / `num_draft_tokens` =
  K): the launch shape's built by SGLang at start-up, every other configured shape's (config
  ``shapes``) built by specfsm at start-up with SGLang's `build_adaptive_runtime_state`. A
  RESHAPE (SPECULATING -> SPECULATING) attaches another shape's state and nothing else; a shape
  of a narrower top-k than the server's (a chain under a tree server) also sets both workers'
  ``topk`` to its own (`specfsm_sglang.relay`: the relayed draft input stays server-wide).
- DRAINING, PLAIN and RESYNCING attach the 1-wide runtime state (steps=0, one verify token,
  built by `EAGLEWorkerV2.build_adaptive_runtime_state(0, 1)` at start-up): one target token
  per request, no draft step.
- PLAIN, zero-tax (config ``plain: "zero_tax"``, `specfsm_sglang.plain`): PLAIN also attaches
  its own target decode state (attention backend + DECODE graph, built at start-up) and the lag
  buffer records what the draft misses; RESYNCING keeps that state (its forwards are plain steps
  followed by the batched catch-up) and its exit on RESYNCED gives the target runner back the
  1-wide state's verify backend and graph. Warm PLAIN (``plain: "warm"``, upstream's steps=0)
  keeps the draft warm with a 1-token draft-extend per step; its RESYNCING has nothing to do.
- DRAINING owns the K-wide batches still in flight: it allocates nothing, and its exit drops
  specfsm's references to them once their results were processed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specfsm import TransitionInfo
from specfsm.model.acceptance import DraftShape
from specfsm_sglang import relay
from specfsm_sglang.flight import Flight
from specfsm_sglang.runtime_states import EngineStates


class SGLangModeActions:
    """Entry/exit actions for one EAGLEWorkerV2 (one scheduler rank)."""

    def __init__(
        self,
        worker: Any,
        states: EngineStates,
        flight: Flight,
        current_shape: Callable[[], DraftShape | None],
    ) -> None:
        self.worker = worker
        #: the runtime states to attach (built at start-up)
        self.states = states
        self.spec_state = states.spec_state
        self.plain_state = states.plain_state
        #: the K-wide forwards in flight (DRAINING's) and RESYNCING's progress
        self.flight = flight
        #: the machine's current draft shape (SPECULATING attaches its state)
        self.current_shape = current_shape
        #: PLAIN's own decode state and lag buffer (specfsm_sglang.plain.ZeroTaxPlain), or None
        self.zero_tax = states.zero_tax

    def _attach(self, state: Any) -> None:
        """Attach a pre-built runtime state to the worker, completely.

        `apply_runtime_state` returns early when the step count already matches; after a
        partial failure that could leave a mix of two states, so force it unless every piece
        is already the target's.
        """
        w = self.worker
        dw = w._draft_worker
        topk = self.states.topk_of(state)
        if (
            w.topk == topk
            and dw.topk == topk
            and w.speculative_num_steps == state.speculative_num_steps
            and w.speculative_num_draft_tokens == state.speculative_num_draft_tokens
            and dw.speculative_num_steps == state.speculative_num_steps
            and dw.draft_attn_backend is state.draft_attn_backend
            and w._target_worker.model_runner.attn_backend is state.target_attn_backend
        ):
            return
        # the state's top-k first: apply_runtime_state rebuilds the draft worker's topk=1 chain
        # buffers for the new steps (specfsm_sglang.relay: a chain under a tree server)
        relay.set_topk(w, topk)
        w.speculative_num_steps = -1  # defeat the early return: apply every field
        w.apply_runtime_state(state)

    def _shape_state(self) -> Any:
        """The runtime state of the machine's current shape (the launch shape's by default)."""
        shape = self.current_shape()
        if shape is None:
            return self.spec_state
        return self.states.shape_states.get(shape, self.spec_state)

    # SPECULATING -------------------------------------------------------------------------
    def enter_speculating(self, t: TransitionInfo) -> None:
        self._attach(self._shape_state())

    def reshape_speculating(self, t: TransitionInfo) -> None:
        # RESHAPE (a SPECULATING self-transition): attach the target shape's pre-built state.
        # The next forward drafts and verifies in the new width; a batch of the old shape still
        # in flight (overlap) completes with the state it was launched with (its verify
        # tensors live on that batch, the runtime state only shapes new forwards), and its
        # accept lengths are attributed to the old shape (`Flight.wide_its`).
        states = self.states.shape_states
        if t.shape is None or t.shape not in states:
            raise RuntimeError(f"RESHAPE to a shape with no runtime state: {t.shape!r}")
        self._attach(states[t.shape])

    def exit_speculating(self, t: TransitionInfo) -> None:
        # The K-wide state is NOT released here: a batch launched with it may be in flight
        # (overlap scheduling). DRAINING owns that.
        return None

    # DRAINING ----------------------------------------------------------------------------
    def enter_draining(self, t: TransitionInfo) -> None:
        # No new draft from the next forward on: attach the 1-wide state. Nothing allocated.
        self._attach(self.plain_state)

    def exit_draining(self, t: TransitionInfo) -> None:
        if t.event.name == "DRAINED" and self.flight.inflight_wide:
            raise RuntimeError(
                f"DRAINED with {self.flight.inflight_wide} K-wide batch(es) still in flight"
            )
        self.flight.release_wide()

    # PLAIN -------------------------------------------------------------------------------
    def enter_plain(self, t: TransitionInfo) -> None:
        # Total and idempotent (the FAULT path runs only this): from any partial state,
        # attach the 1-wide state (and PLAIN's own decode state) and forget any catch-up in
        # progress (a partly caught-up batch keeps its lag: nothing is half-applied).
        if self.zero_tax is not None:
            self.zero_tax.detach()
        self._attach(self.plain_state)
        if self.zero_tax is not None:
            self.zero_tax.attach()
        self.flight.end_resync()

    def exit_plain(self, t: TransitionInfo) -> None:
        return None

    # RESYNCING ---------------------------------------------------------------------------
    def enter_resyncing(self, t: TransitionInfo) -> None:
        # Zero-tax: the catch-up runs in RESYNCING's forwards until no request lags
        # (`ZeroTaxPlain.forward(resync=True)` reports it done). Warm PLAIN: the draft saw
        # every token through its 1-token draft-extend; count the configured forwards down.
        self.flight.start_resync(self.zero_tax is not None)

    def exit_resyncing(self, t: TransitionInfo) -> None:
        if self.zero_tax is not None and t.event.name == "RESYNCED":
            # the draft is warm again: the target runner gets the 1-wide verify state back
            # (SPECULATING's entry then attaches the K-wide one)
            self.zero_tax.detach()
            self._attach(self.plain_state)
        self.flight.end_resync()
