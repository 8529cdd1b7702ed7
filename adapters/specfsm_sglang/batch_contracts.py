"""The spec-state contracts of one scheduler rank: which speculation state may be on the batch
and on the worker in each mode, checked before every decode forward (``contracts_every``).

A violation is a one-line diagnosis naming the field, what the mode allows and what is there
(`specfsm.fsm.contracts`); the controller raises it before the forward would crash deep inside
a kernel (the seeds' "size of tensor a (160) must match ..." class).

The contracts read one rank through `ContractView` (the worker, the server's launch width, the
shapes' states, zero-tax PLAIN's decode state, the machine's current shape), nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from specfsm import Contracts, Mode
from specfsm.fsm.contracts import Violation, describe
from specfsm.model.acceptance import DraftShape
from specfsm_sglang import compat, relay


class PlainDecodeState(Protocol):
    """Zero-tax PLAIN's own target decode state (`plain.ZeroTaxPlain`), as the contracts see it."""

    @property
    def attached(self) -> bool: ...
    @property
    def target_attn_backend(self) -> Any: ...
    @property
    def target_graph_runner(self) -> Any: ...


class ShapeHolder(Protocol):
    """The machine, as the contracts see it: the draft shape it is in."""

    @property
    def shape(self) -> DraftShape | None: ...


class ContractView(Protocol):
    """What the contracts read of one rank (the controller is one)."""

    @property
    def worker(self) -> Any: ...
    @property
    def topk(self) -> int: ...
    @property
    def spec_steps(self) -> int: ...
    @property
    def spec_tokens(self) -> int: ...
    @property
    def shape_states(self) -> Mapping[DraftShape, Any]: ...
    @property
    def zero_tax(self) -> PlainDecodeState | None: ...
    @property
    def fsm(self) -> ShapeHolder: ...


class BatchSubject:
    """What the contracts look at: the rank's view and the batch about to be forwarded."""

    __slots__ = ("batch", "view")

    def __init__(self, view: ContractView) -> None:
        self.view = view
        self.batch: Any = None


def build_contracts(view: ContractView, every: int) -> Contracts[BatchSubject]:
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    def bs(s: BatchSubject) -> int:
        return compat.local_batch_size(s.batch)

    def draft_input(s: BatchSubject) -> Violation | None:
        info = s.batch.spec_info
        if info is None or isinstance(info, EagleDraftInput):
            return None
        return Violation("batch.spec_info", "EagleDraftInput | None", describe(info))

    row_fields = ("bonus_tokens", "topk_p", "topk_index", "hidden_states")
    topk_fields = ("topk_p", "topk_index")

    def rows(s: BatchSubject) -> Violation | None:
        """Every per-request tensor of the draft input has one row per request."""
        batch = s.batch
        info = batch.spec_info
        if info is None or batch.forward_mode.is_idle():
            return None
        n = bs(s)
        for field in row_fields:
            value = getattr(info, field, None)
            if value is None:
                continue
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) == 0 or shape[0] != n:
                return Violation(
                    f"batch.spec_info.{field}", f"rows == batch size ({n})", describe(value)
                )
            # the relay width is the server's top-k whatever shape drafts next (a narrower
            # shape reads its first k columns, specfsm_sglang.relay)
            if field in topk_fields and (len(shape) < 2 or shape[1] != view.topk):
                return Violation(
                    f"batch.spec_info.{field}",
                    f"[bs, topk={view.topk}] (the server's top-k: the relay width)",
                    describe(value),
                )
        return None

    def width(
        want_steps: int | None, want_tokens: int | None
    ) -> Callable[[BatchSubject], Violation | None]:
        """The worker's width is (want_steps, want_tokens); None: the machine's current shape
        (SPECULATING: the forward must be as wide as the shape the last RESHAPE attached)."""

        def check(s: BatchSubject) -> Violation | None:
            w = view.worker
            got = (w.speculative_num_steps, w.speculative_num_draft_tokens)
            if want_steps is None or want_tokens is None:
                shape = view.fsm.shape
                if shape is None:
                    want = (view.spec_steps, view.spec_tokens)
                else:
                    want = (shape.steps, shape.draft_tokens)
            else:
                want = (want_steps, want_tokens)
            if got != want:
                return Violation(
                    "worker (speculative_num_steps, speculative_num_draft_tokens)",
                    f"{want} (the attached shape)",
                    str(got),
                )
            if want_steps is None and view.fsm.shape is not None:
                state = view.shape_states.get(view.fsm.shape)
                tmr = w._target_worker.model_runner
                if state is not None and tmr.attn_backend is not state.target_attn_backend:
                    return Violation(
                        "target runner attn_backend",
                        f"the verify backend of {view.fsm.shape.label()}",
                        type(tmr.attn_backend).__name__ + " of another state",
                    )
            dw = w._draft_worker
            want_topk = view.topk
            if want_steps is None and view.fsm.shape is not None:
                want_topk = view.fsm.shape.topk
            got_topk = (w.topk, dw.topk, relay.spec_topk())
            if got_topk != (want_topk,) * 3:
                return Violation(
                    "(worker topk, draft worker topk, get_spec().speculative_eagle_topk)",
                    f"{(want_topk,) * 3} (the attached state's)",
                    str(got_topk),
                )
            if (dw.speculative_num_steps, dw.speculative_num_draft_tokens) != got:
                return Violation(
                    "draft worker width",
                    f"same as worker {got}",
                    str((dw.speculative_num_steps, dw.speculative_num_draft_tokens)),
                )
            return None

        return check

    def target_state(plain: bool) -> Any:
        def check(s: BatchSubject) -> Violation | None:
            """Zero-tax: the target runner holds PLAIN's decode state exactly in PLAIN and
            RESYNCING (a DECODE batch on a verify graph is the seeds' crash class)."""
            zt = view.zero_tax
            if zt is None:
                return None
            tmr = view.worker._target_worker.model_runner
            has = (
                zt.attached
                and tmr.attn_backend is zt.target_attn_backend
                and tmr.decode_cuda_graph_runner is zt.target_graph_runner
            )
            if has == plain:
                return None
            want = "PLAIN's decode state" if plain else "a verify state (not PLAIN's)"
            got = "PLAIN's decode state" if has else "a verify state"
            return Violation("target runner (attn_backend, decode graph)", want, got)

        return check

    common = [draft_input, rows]
    wide = [*common, width(None, None), target_state(False)]
    drain = [*common, width(0, 1), target_state(False)]
    plain = [*common, width(0, 1), target_state(True)]
    return Contracts(
        {Mode.SPECULATING: wide, Mode.DRAINING: drain, Mode.PLAIN: plain, Mode.RESYNCING: plain},
        every=every,
    )
