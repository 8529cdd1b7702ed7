"""Draft shapes of another top-k than the server's on one SGLang 0.5.23 server (tree <-> chain).

SGLang builds everything top-k dependent for the launch top-k K (``--speculative-eagle-topk``):

* the draft input relayed from one forward to the next (``EagleDraftInput.topk_p`` /
  ``topk_index``, [bs, topk]) is produced by the previous forward's draft extend
  (``EagleDraftWorker._draft_extend_for_decode`` / ``_draft_extend_for_prefill``,
  ``eagle_worker_v2.py:1240-1276`` and ``:1077-1085``) with the draft worker's ``topk`` of that
  time, and read by the next ``draft()`` / ``draft_forward`` with the ``topk`` of THAT time;
* overlap's ``FutureMap`` allocates its relay buffers from the first payload's width
  (``managers/overlap_utils.py:379-396``);
* the scheduler reserves KV per decode step from ``get_spec().speculative_eagle_topk``
  (``mem_cache/allocation_sizing.py:28-61``, read per batch);
* draft/verify attention backends and graph runners read ``topk`` when they are built.

specfsm keeps the relay at the launch width K whatever shape drafts (the server must launch
with the widest top-k of its shapes; ``server_checks.check_engine_shapes`` refuses the rest):

* every draft extend runs with the draft worker's ``topk`` = K (wrapper below), so every relay
  is [bs, K] (FutureMap buffers, contracts and zero-tax PLAIN's catch-up agree);
* a shape of top-k k < K drafts from the first k columns (``fast_topk`` sorts descending, so
  they are the top-k of the same distribution; k = 1 gets p = 1 as SGLang's chain path);
* a shape's runtime state is built with ``topk`` = k on both workers and in ``get_spec()``
  (the attention backends and graph runners read it), and attaching it sets all three to k
  (attaching the launch or the 1-wide state: K), as ``apply_runtime_state`` sets the steps.
  The scheduler reserves KV for the next decode batch before the FSM decides (a RESHAPE), so
  one batch may draft with a shape wider than its reservation was computed for, exactly as a
  steps change (upstream's adaptive and same-top-k RESHAPE): the reserve is twice the width
  (``get_alloc_reserve_per_decode``) and never below the launch's draft-token count; a
  request's allocation only grows and is freed with the request (no slot leaks).

The wrappers are instance attributes of the draft worker, installed only when some shape's
top-k differs from K; no SGLang file is changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

#: draft-worker methods the relay wrappers shadow (SGLang 0.5.23 names)
DRAFT = "draft"
EXTEND_METHODS = ("_draft_extend_for_decode", "_draft_extend_for_prefill")
WRAPPED_ATTR = "_specfsm_relay_topk"


def set_topk(worker: Any, topk: int) -> None:
    """The top-k the next forward drafts and verifies with: both workers' and the scheduler's
    (``get_spec().speculative_eagle_topk``, from which it reserves KV per decode step)."""
    from sglang.srt.runtime_context import get_context, get_spec

    worker.topk = topk
    worker._draft_worker.topk = topk
    if get_spec().speculative_eagle_topk != topk:
        get_context().override("specfsm.topk", speculative_eagle_topk=topk)
    # SGLang 0.5.17 reads the model runners' server_args directly in places (the draft CUDA
    # graph runner's buffers, the target verify graph's capture input): keep them in step, or
    # a chain state built on a tree server captures tree-sized buffers ("out_cache_loc.shape[0]
    # =768 != batch_size * topk * num_steps = 64*1*3=192", H200)
    runners = (
        worker._target_worker.model_runner,
        getattr(worker._draft_worker, "draft_runner", None),
    )
    for r in runners:
        sa = getattr(r, "server_args", None)
        if sa is not None and getattr(sa, "speculative_eagle_topk", topk) != topk:
            _set_server_topk(sa, topk)


def _set_server_topk(sa: Any, topk: int) -> None:
    """ServerArgs.speculative_eagle_topk = topk where the version allows it: 0.5.17's is a
    plain dataclass; 0.5.23 guards its attributes (its readers go through get_spec(), which
    the override above already set), so there it stays as launched."""
    with contextlib.suppress(TypeError, AttributeError):
        object.__setattr__(sa, "speculative_eagle_topk", topk)


def spec_topk() -> int:
    """``get_spec().speculative_eagle_topk`` (what the scheduler reserves KV for)."""
    from sglang.srt.runtime_context import get_spec

    return int(get_spec().speculative_eagle_topk or 1)


@contextlib.contextmanager
def build_topk(worker: Any, topk: int, relay_topk: int) -> Iterator[None]:
    """Build a runtime state for `topk` (`build_adaptive_runtime_state` inside): both workers'
    ``topk`` and ``get_spec().speculative_eagle_topk`` are `topk` meanwhile, K afterwards.

    `_override_worker_state` calls the draft worker's `_rebuild_topk1_chain_buffers` on entry
    (with the steps of the state being built: a chain's buffers, which its graph capture reads)
    and on exit (with the launch steps restored while ``topk`` is still the chain's 1: its
    assertion ``draft_tokens == steps + 1`` would fail for a tree), so meanwhile it skips that
    inconsistent call (attaching a state rebuilds the buffers, `apply_runtime_state`)."""
    if topk == relay_topk:
        yield
        return
    dw = worker._draft_worker
    saved = int(worker.topk)
    rebuild = dw._rebuild_topk1_chain_buffers

    def guarded() -> None:
        if dw.topk == 1 and dw.speculative_num_draft_tokens != dw.speculative_num_steps + 1:
            return  # the launch tree's steps being restored, topk still the chain's
        rebuild()

    dw._rebuild_topk1_chain_buffers = guarded  # instance attribute shadows the method
    set_topk(worker, topk)
    try:
        yield
    finally:
        del dw._rebuild_topk1_chain_buffers
        set_topk(worker, saved)


def missing_methods(worker: Any) -> list[str]:
    """The draft-worker methods the relay needs that this SGLang lacks."""
    dw = worker._draft_worker
    return [m for m in (DRAFT, *EXTEND_METHODS) if not callable(getattr(dw, m, None))]


def install(worker: Any, relay_topk: int) -> None:
    """Shadow the draft worker's draft / draft-extend methods (idempotent)."""
    dw = worker._draft_worker
    if getattr(dw, WRAPPED_ATTR, None) is not None:
        return
    for name in EXTEND_METHODS:
        setattr(dw, name, _extend_at_relay_width(dw, getattr(dw, name), relay_topk))
    setattr(dw, DRAFT, _draft_from_relay(dw, getattr(dw, DRAFT), relay_topk))
    setattr(dw, WRAPPED_ATTR, relay_topk)


def _extend_at_relay_width(dw: Any, orig: Callable[..., Any], relay_topk: int) -> Any:
    def extend(*args: Any, **kwargs: Any) -> Any:
        k = dw.topk
        if k == relay_topk:
            return orig(*args, **kwargs)
        dw.topk = relay_topk
        try:
            return orig(*args, **kwargs)
        finally:
            dw.topk = k

    return extend


def _draft_from_relay(dw: Any, orig: Callable[..., Any], relay_topk: int) -> Any:
    def draft(batch: Any, *args: Any, **kwargs: Any) -> Any:
        k = int(dw.topk)
        di = batch.spec_info
        p = getattr(di, "topk_p", None)
        if p is None or p.dim() != 2 or p.shape[1] == k:
            return orig(batch, *args, **kwargs)
        if p.shape[1] < k:
            raise RuntimeError(
                f"specfsm relay: the draft input is {p.shape[1]} wide, the attached shape "
                f"drafts with top-k {k} (relay width {relay_topk})"
            )
        import torch

        idx = di.topk_index
        di.topk_index = idx[:, :k].contiguous()
        di.topk_p = torch.ones_like(p[:, :1]) if k == 1 else p[:, :k].contiguous()
        try:
            return orig(batch, *args, **kwargs)
        finally:
            di.topk_p, di.topk_index = p, idx

    return draft
