"""What a policy sees each iteration: one small frozen record."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from specfsm.model.acceptance import DraftShape


@attrs.frozen(slots=True)
class Observation:
    """Policy inputs for one scheduler iteration; identical on every TP/DP rank.

    accept_lens are tokens committed per verify *including the bonus token* (1 .. K), for the
    most recent verify whose result was processed (one batch late under overlap scheduling).
    Under DP attention `decode_bs` is the *global* decode batch size (sum over DP ranks), so every
    rank decides alike; `rank` is informational and never an input to a decision.
    `mean_ctx` is the mean KV length (tokens) of the decode requests, global like `decode_bs`;
    0 when unknown.

    Shapes and measured step costs (all defaulted; an adapter that does not know leaves them):
    `accept_shape` is the draft shape of the verify whose accept_lens these are; `step_ms` the
    measured duration of the last completed decode forward (0.0 = unknown; a wall clock, so
    each rank's own, except for a policy with ``uses_step_ms = True``, which the SGLang adapter
    gives the ranks' mean so that they learn alike), `step_bs` its decode
    batch size, `step_shape` its draft shape (None: a non-speculative step, PLAIN / DRAINING /
    RESYNCING), `step_kind` a `specfsm.fsm.kinds.StepKind` (a str: "spec", "plain", "resync",
    "warm", "" unknown). `shape` is the machine's current speculation shape (`SpecFSM.shape`;
    kept across PLAIN), None when unknown: a policy that may RESHAPE compares its choice with it.

    Prefill observations: an adapter may also observe before a prefill forward, for a policy
    that asks for it (``sees_prefills = True``): `prefill_tokens` > 0 is the prompt tokens that
    forward carries, `decode_bs` the requests decoding once it is done (the running ones plus
    the prefill's own), `accept_lens` empty and `step_ms` 0 (nothing was verified or measured
    since the last observation). 0 on a decode observation.

    `draft_debt` is the prompt tokens the draft has not seen of requests prefilled while
    zero-tax PLAIN (their draft prefill deferred): a RESYNCING catch-up extends the draft over
    them besides each request's decode lag. It is the adapter's deferred-prompt store, whose
    entries of requests gone drop at the next prefill or once the batch has shrunk by a
    sixteenth since they were last swept, identical on TP ranks; 0 when there is none or the
    adapter cannot say alike on every rank (DP attention), and then a policy prices the decode
    lag alone.
    """

    iteration: int
    decode_bs: int
    running: int = 0
    accept_lens: tuple[int, ...] = ()
    queued: int = 0
    rank: int = 0
    mean_ctx: int = 0
    accept_shape: DraftShape | None = None
    step_ms: float = 0.0
    step_bs: int = 0
    step_shape: DraftShape | None = None
    step_kind: str = ""
    shape: DraftShape | None = None
    prefill_tokens: int = 0
    draft_debt: int = 0

    def mean_accept_len(self) -> float | None:
        """Mean accept length of the last verify, or None when there was none."""
        if not self.accept_lens:
            return None
        return sum(self.accept_lens) / len(self.accept_lens)
