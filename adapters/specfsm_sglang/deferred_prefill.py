"""Prefills while PLAIN without the draft's prefill (zero-tax PLAIN, ``defer_prefill_tokens``).

A speculative server runs its draft over every prompt token at prefill, in every mode
(SGLang's ``_forward_prefill_batch``: the target prefill, then ``_draft_extend_for_prefill``).
While PLAIN nothing reads that draft state, and under the loads that keep a server PLAIN most
requests finish before it speculates again. So a prefill while PLAIN runs the target alone
(:func:`forward`) and keeps, per request, the (token, target hidden state) pairs of its prompt
positions in zero-tax PLAIN's :class:`~specfsm_sglang.lag.PromptStore`; RESYNCING's catch-up
extends the draft over them together with the request's lag ring, so a request prefilled while
PLAIN re-enters speculation with the draft state an eager prefill would have left. A request
that finishes while PLAIN frees its entry uncaught (counted: ``prompt_dropped_tokens``).

Bounded: the store holds at most ``defer_prefill_tokens`` positions; a prefill that does not fit
runs SGLang's eager path. A later chunk of a deferred prompt that is prefilled eagerly (the
store full, or the server no longer PLAIN) first extends the draft over the stored chunks
(:func:`flush`), so the draft never extends over positions it has not seen.

This module imports torch and SGLang: it is adapter code.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from specfsm_sglang import compat, draft_extend
from specfsm_sglang.lag import LagBuffer, LagStats, PromptStore, Stored


class ZeroTaxPlain(Protocol):
    """What of zero-tax PLAIN's state (`plain.ZeroTaxPlain`) a deferred prefill uses."""

    worker: Any
    store: PromptStore
    stats: LagStats
    lag: LagBuffer
    topk: int
    _draft_hidden: tuple[int | None, Any]

    def _zero(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def note_prefill(self, batch: Any) -> None: ...


def defers(zt: ZeroTaxPlain, batch: Any) -> bool:
    """Whether this prefill (the server PLAIN) runs without the draft: a plain extend batch
    (no decode rows mixed in, no multimodal inputs) whose tokens fit in the store."""
    if zt.store.budget <= 0:
        return False
    mode = batch.forward_mode
    if not mode.is_extend() or mode.is_mixed():
        return False
    if any(m is not None for m in (getattr(batch, "multimodal_inputs", None) or [])):
        return False
    if any(compat.req_pool_idx(r) is None for r in batch.reqs):
        return False
    if zt.store.fits(int(batch.extend_num_tokens)):
        return True
    zt.stats.eager_prefills_store_full += 1
    return False


def forward(zt: ZeroTaxPlain, batch: Any, on_publish: Any = None) -> Any:
    """SGLang's prefill of ``batch`` without its draft prefill; the draft's inputs go to the
    store. The result relays shape-valid zero drafts, as a PLAIN step's does."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    w = zt.worker
    ntok = int(batch.extend_num_tokens)
    # SGLang's convention for a prefill result: the lengths the next decode starts from, the
    # prompt lengths, known before the forward. Published first: the next iteration copies
    # them to the host behind the publish fence, and a fence after the target prefill (where
    # SGLang's own prefill publishes, before its draft prefill) makes the host wait for the
    # whole prefill before it launches the next decode, which a server without a draft
    # launches behind the prefill (docs/zero-tax.md has the measurement).
    new_seq_lens = batch.seq_lens
    if on_publish is not None:
        on_publish(new_seq_lens)
    out = w._target_worker.forward_batch_generation(
        batch, capture_hidden_mode=CaptureHiddenMode.FULL
    )
    out.new_seq_lens = new_seq_lens
    hidden = out.logits_output.hidden_states
    if hidden is None or hidden.shape[0] != ntok or hidden.shape[-1] != zt.lag.width:
        raise RuntimeError(
            "deferred prefill: the target prefill returned hidden states of shape "
            f"{None if hidden is None else tuple(hidden.shape)}; the draft needs "
            f"[{ntok}, {zt.lag.width}]"
        )
    next_ids = out.next_token_ids
    tokens = _draft_inputs(batch, next_ids)
    bs = len(batch.reqs)
    lens = [int(n) for n in batch.extend_lens]
    prefix = [int(p) for p in batch.prefix_lens]
    at = 0
    for req, p, n in zip(batch.reqs, prefix, lens, strict=True):
        row = compat.req_pool_idx(req)
        assert row is not None  # defers() checked
        zt.store.add(
            row,
            req,
            p,
            tokens[at : at + n].clone(),
            hidden[at : at + n].to(zt.lag.hidden.dtype).clone(),
        )
        at += n
    zt.note_prefill(batch)
    st = zt.stats
    st.deferred_prefills += 1
    st.deferred_rows += bs
    st.deferred_tokens += ntok
    size, hdtype = zt._draft_hidden
    nxt = EagleDraftInput(
        topk_p=zt._zero("topk_p", (bs, zt.topk), torch.float32),
        topk_index=zt._zero("topk_index", (bs, zt.topk), torch.int64),
        hidden_states=zt._zero("hidden", (bs, size), hdtype) if size is not None else None,
        bonus_tokens=next_ids,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )
    out.next_draft_input = nxt
    return out


def flush(zt: ZeroTaxPlain, batch: Any) -> None:
    """Before SGLang's eager prefill of ``batch``: extend the draft over the stored chunks of
    its requests (a later chunk of a prompt deferred earlier), so its draft prefill attends
    over written draft KV."""
    idx: list[int] = []
    stored: list[tuple[int, Stored]] = []
    for i, req in enumerate(batch.reqs):
        row = compat.req_pool_idx(req)
        if row is None:
            continue
        e = zt.store.owned(row, req)
        if e is not None:
            idx.append(i)
            stored.append((row, e))
    if not idx:
        return
    toks = [t for _, e in stored for t in e.tokens]
    hids = [h for _, e in stored for h in e.hidden]
    rows = draft_extend.Rows(
        idx,
        [row for row, _ in stored],
        [e.start for _, e in stored],
        [e.n for _, e in stored],
        torch.cat(toks),
        torch.cat(hids),
    )
    draft_extend.run(zt.worker, batch, rows)
    zt.stats.draft_forwards += 1
    zt.stats.prompt_caught_up_tokens += rows.total
    for row, _ in stored:
        zt.store.take(row)


def _draft_inputs(batch: Any, next_ids: torch.Tensor) -> torch.Tensor:
    """The draft's input token at each prompt position p: x_{p+1}; at a request's last
    position the token the target just sampled, or for a chunk that is not the prompt's last
    the next prompt token (as SGLang's ``_eagle_prefill_tail_tokens``). Written without a
    scalar assignment into a device tensor (that would wait for the prefill)."""
    ids = batch.input_ids
    new = torch.empty_like(ids)
    new[:-1] = ids[1:]
    tail = next_ids.to(ids.dtype).clone()
    nxt_prompt = getattr(batch, "chunked_req_next_prompt_token", None)
    if nxt_prompt is not None:
        for i, r in enumerate(batch.reqs):
            if r is batch.chunked_req:
                tail[i : i + 1].fill_(int(nxt_prompt))
                break
    ends: list[int] = []
    at = 0
    for n in batch.extend_lens:
        at += int(n)
        ends.append(at - 1)
    # from pinned memory on a GPU, as the lag ring's positions (`LagBuffer.record`): this copy
    # is queued right behind the target prefill, which a pageable copy may wait out
    pinned = torch.tensor(ends, dtype=torch.int64, pin_memory=ids.is_cuda)
    ends_dev = pinned.to(ids.device, non_blocking=True)
    new.index_copy_(0, ends_dev, tail)
    return new
