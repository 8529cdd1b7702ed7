"""One batched draft extend over positions the draft has not seen, for chosen rows of a batch.

Modelled on SGLang's ``EagleDraftWorker._draft_extend_for_prefill``: a prefill-style draft
forward with a variable length per request, fed with ``(h_p, x_{p+1})`` (the target's hidden
state of position p and the token after it), writing the draft KV of positions
``[prefix, prefix + n)`` of each row. Zero-tax PLAIN's catch-up (RESYNCING) and the deferred
prefill's flush use it.

This module imports torch and SGLang: it is adapter code.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Rows:
    """What to extend: batch indices, their request-pool rows, first position and length of
    each row's run, and the runs' inputs concatenated in row order."""

    idx: list[int]
    rows: list[int]
    prefix: list[int]
    lens: list[int]
    tokens: torch.Tensor
    hidden: torch.Tensor

    @property
    def total(self) -> int:
        return int(sum(self.lens))


def run(worker: Any, batch: Any, r: Rows) -> tuple[Any, Any, torch.Tensor]:
    """The draft forward over ``r`` (rows of ``batch``): its logits output (LAST capture: one
    hidden state and one logits row per request), the sampling info the rows were run with,
    and ``r.idx`` on the device (for writing the rows' results back)."""
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    dw = worker._draft_worker
    dev = batch.req_pool_indices.device
    idx_dev = torch.tensor(r.idx, dtype=torch.int64).to(dev, non_blocking=True)
    seq_cpu = [p + n for p, n in zip(r.prefix, r.lens, strict=True)]
    seq_now = torch.tensor(seq_cpu, dtype=torch.int64).to(dev, non_blocking=True)
    req_to_token = worker.req_to_token_pool.req_to_token
    rows_dev = batch.req_pool_indices[idx_dev]
    pos = torch.cat(
        [torch.arange(p, p + n, dtype=torch.int64) for p, n in zip(r.prefix, r.lens, strict=True)]
    ).to(dev, non_blocking=True)
    lens_dev = torch.tensor(r.lens, dtype=torch.int64).to(dev, non_blocking=True)
    # output_size given: without it repeat_interleave reads the repeats back (a wait)
    rows_rep = torch.repeat_interleave(rows_dev, lens_dev, output_size=r.total)
    out_cache_loc = req_to_token[rows_rep, pos]

    cb = copy.copy(batch)
    cb.reqs = [batch.reqs[i] for i in r.idx]
    cb.forward_mode = ForwardMode.EXTEND
    cb.input_ids = r.tokens
    cb.req_pool_indices = rows_dev
    if getattr(batch, "req_pool_indices_cpu", None) is not None:
        cb.req_pool_indices_cpu = torch.tensor(r.rows, dtype=torch.int64)
    cb.seq_lens = seq_now
    cb.seq_lens_cpu = torch.tensor(seq_cpu, dtype=torch.int64)
    cb.seq_lens_sum = int(sum(seq_cpu))
    cb.orig_seq_lens = seq_now.to(torch.int32)
    cb.out_cache_loc = out_cache_loc.to(torch.int64)
    cb.prefix_lens = list(r.prefix)
    cb.extend_lens = list(r.lens)
    cb.extend_num_tokens = r.total
    cb.extend_logprob_start_lens = [0] * len(r.idx)
    cb.extend_input_logprob_token_ids = None
    cb.return_logprob = False
    cb.top_logprobs_nums = None
    cb.token_ids_logprobs = None
    cb.multimodal_inputs = [None] * len(r.idx)
    cb.decoding_reqs = None
    cb.is_prefill_only = False
    cb.spec_info = EagleDraftExtendInput(
        hidden_states=r.hidden, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1
    )
    fwd = ForwardBatch.init_new(
        cb,
        dw.draft_runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )
    fwd.return_logprob = False
    return dw.draft_runner.forward(fwd).logits_output, cb.sampling_info, idx_dev


def select_topk(
    logits_output: Any, sampling_info: Any, topk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same selection as SGLang's ``_draft_extend_for_decode`` (the warm draft's)."""
    from sglang.srt.speculative.spec_utils import renorm_draft_probs
    from sglang.srt.utils.common import fast_topk

    logits = logits_output.next_token_logits
    if topk == 1:
        topk_index = torch.argmax(logits, dim=-1, keepdim=True)
        return torch.ones_like(topk_index, dtype=torch.float32), topk_index
    probs = renorm_draft_probs(logits, sampling_info, False)
    topk_p, topk_index = fast_topk(probs, topk, dim=-1)
    return topk_p, topk_index
