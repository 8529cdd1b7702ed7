"""Zero-tax PLAIN and the batched catch-up of RESYNCING, for EAGLEWorkerV2.

What PLAIN owns (built at start-up, attached by ``enter_plain``; RESYNCING keeps it, its exit on
RESYNCED detaches it):

- a target attention backend and, where CUDA graphs are on, a target DECODE graph runner (one
  token per request, hidden-state capture on). SGLang's speculative engine has no plain decode
  graph: its target runner is captured in TARGET_VERIFY mode at the draft width;
- the lag buffer (:class:`LagBuffer`): per request slot, the tokens decoded without the draft
  and the target hidden states the draft will need for them (EAGLE-3: the auxiliary layers'
  states, ``3 x hidden``), a ring of ``lag_tokens`` positions.

One PLAIN step (:meth:`ZeroTaxPlain.forward`) is exactly one target forward of one token per
request: input = the pending bonus token, KV slot = the slot SGLang's speculative reserve already
mapped at ``req_to_token[req, seq_len]`` (as SGLang's own mixed-chunk tails do), then SGLang's
sampler. No draft forward, no draft-extend, no verify tree, no accept kernel. The result has the
shape of a 1-token verify (accept length 1), so SGLang's speculative result processing, the
FutureMap relay and the KV accounting (``kv_committed_len += 1``) are unchanged; the draft fields
it relays are shape-valid zeros that nothing reads while PLAIN.

A RESYNCING step (``forward(resync=True)``) is a PLAIN step followed by one batched
draft-extend, prefill-style with a variable length per request, over every lagging request's
positions ``[L, L+N)`` fed with ``(h_p, x_{p+1})``, modelled on SGLang's
``_draft_extend_for_prefill``: it writes the draft KV those steps missed and relays the draft
input (top-k, draft hidden state) a draft kept warm every step would have.

This module imports torch and SGLang: it is adapter code.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from specfsm_sglang import compat

#: A request whose lag passed its ring is caught up over its newest ``lag_tokens`` positions;
#: its older draft KV stays stale (lower acceptance for a while), counted as ``overflow_rows``.
#: Recomputing the older hidden states from the target instead is not implemented.


@dataclass
class LagStats:
    """What the lag buffer and the catch-up did (counters for logs, tests, benchmarks)."""

    plain_forwards: int = 0
    recorded_tokens: int = 0
    catchups: int = 0
    caught_up_rows: int = 0
    caught_up_tokens: int = 0
    overflow_rows: int = 0
    catchup_s: float = 0.0
    peak_lag: int = 0
    draft_forwards: int = 0
    #: the newest catch-ups: (rows, tokens, seconds), bounded
    history: deque[tuple[int, int, float]] = field(default_factory=lambda: deque(maxlen=256))


class LagBuffer:
    """Per request-pool slot: a ring of ``capacity`` (token, target hidden) pairs.

    ``count[i]`` (host) is the number of positions slot ``i`` lags by (may exceed the ring's
    capacity: then only the newest ``capacity`` are kept).
    """

    def __init__(
        self, slots: int, capacity: int, width: int, dtype: torch.dtype, device: Any
    ) -> None:
        self.slots = slots
        self.capacity = capacity
        self.width = width
        self.tokens = torch.zeros((slots, capacity), dtype=torch.int64, device=device)
        self.hidden = torch.zeros((slots, capacity, width), dtype=dtype, device=device)
        self.count = [0] * slots
        self.count_dev = torch.zeros((slots,), dtype=torch.int64, device=device)

    @property
    def nbytes(self) -> int:
        return int(
            self.tokens.numel() * self.tokens.element_size()
            + self.hidden.numel() * self.hidden.element_size()
        )

    @staticmethod
    def token_bytes(width: int, dtype: torch.dtype) -> int:
        """Bytes one lagging position takes: its target hidden states and its token."""
        return width * torch.empty((), dtype=dtype).element_size() + 8

    @property
    def bytes_per_token(self) -> int:
        return self.token_bytes(self.width, self.hidden.dtype)

    def reset(self, rows: list[int], rows_dev: torch.Tensor | None = None) -> None:
        for r in rows:
            self.count[r] = 0
        if rows:
            if rows_dev is None:
                rows_dev = torch.tensor(rows, dtype=torch.int64).to(
                    self.tokens.device, non_blocking=True
                )
            # index_fill_, not ``count_dev[rows_dev] = 0``: a Python scalar assigned through an
            # index is copied host-to-device from pageable memory, which waits for every kernel
            # queued on the stream (the whole prefill this runs after; measured on the H200 by
            # benchmarks/gpu/sync_probe.py), and the scheduler's next batch waits with it
            self.count_dev.index_fill_(0, rows_dev, 0)

    def record(
        self, rows: list[int], rows_dev: torch.Tensor, hidden: torch.Tensor, tokens: torch.Tensor
    ) -> int:
        """Append one position per row: ``hidden[i]`` (h_p) and ``tokens[i]`` (x_{p+1});
        returns the largest lag among the rows.

        Device-side ring positions (no host-to-device copy, no stream sync on the hot path);
        the host mirror ``count`` plans the catch-up."""
        count = self.count
        peak = 0
        for r in rows:
            count[r] += 1
            if count[r] > peak:
                peak = count[r]
        c = self.count_dev[rows_dev]
        slot = c % self.capacity
        self.hidden[rows_dev, slot] = hidden.to(self.hidden.dtype)
        self.tokens[rows_dev, slot] = tokens.to(torch.int64)
        self.count_dev[rows_dev] = c + 1
        return peak

    def gather(self, rows: list[int], lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The newest ``lens[i]`` positions of each row, oldest first, concatenated."""
        cap = self.capacity
        flat_rows: list[int] = []
        flat_slots: list[int] = []
        for r, n in zip(rows, lens, strict=True):
            c = self.count[r]
            flat_rows.extend([r] * n)
            flat_slots.extend((c - n + j) % cap for j in range(n))
        dev = self.tokens.device
        fr = torch.tensor(flat_rows, dtype=torch.int64).to(dev, non_blocking=True)
        fs = torch.tensor(flat_slots, dtype=torch.int64).to(dev, non_blocking=True)
        return self.tokens[fr, fs], self.hidden[fr, fs]


def target_capture_width(worker: Any) -> tuple[int, torch.dtype]:
    """Width and dtype of the target hidden states the draft consumes per token (EAGLE: the
    target's hidden size; EAGLE-3: the auxiliary layers' states concatenated)."""
    tmr = worker._target_worker.model_runner
    hf = tmr.model_config.hf_config
    hidden = int(hf.hidden_size)
    dtype = tmr.model_config.dtype if hasattr(tmr.model_config, "dtype") else torch.float32
    model = tmr.model
    n_aux = 1
    if getattr(model, "capture_aux_hidden_states", False):
        layers = getattr(model.model, "layers_to_capture", None)
        n_aux = len(layers) if layers else 3
    return hidden * n_aux, dtype


def _build_decode_graph(model_runner: Any, backend: Any) -> Any:
    """A target DECODE graph runner (1 token per request, hidden-state capture on), or None
    where CUDA graphs are off (the CPU test bed)."""
    if getattr(model_runner, "decode_cuda_graph_runner", None) is None:
        return None
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.runner import base_runner
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import (
        DecodeCudaGraphRunner,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    saved_algo = model_runner.spec_algorithm
    saved_mode = base_runner.get_server_return_hidden_states_mode
    model_runner.spec_algorithm = SpeculativeAlgorithm.NONE
    base_runner.get_server_return_hidden_states_mode = lambda *a, **k: CaptureHiddenMode.FULL
    try:
        return DecodeCudaGraphRunner(model_runner, attn_backend=backend)
    finally:
        model_runner.spec_algorithm = saved_algo
        base_runner.get_server_return_hidden_states_mode = saved_mode


class ZeroTaxPlain:
    """PLAIN's decode state and lag buffer for one EAGLEWorkerV2 (one scheduler rank)."""

    def __init__(self, worker: Any, lag_tokens: int, catchup_tokens: int) -> None:
        self.worker = worker
        self.catchup_tokens = catchup_tokens
        tmr = worker._target_worker.model_runner
        device = tmr.device
        free0 = _free_bytes(device)
        t0 = time.perf_counter()
        backup = tmr.init_new_workspace
        try:
            # the shared workspace: PLAIN's backend never runs beside the verify backends
            self.target_attn_backend = tmr._get_attention_backend(init_new_workspace=False)
        finally:
            tmr.init_new_workspace = backup
        self.target_graph_runner = _build_decode_graph(tmr, self.target_attn_backend)
        self.build_s = time.perf_counter() - t0
        self.graph_bytes = max(0, free0 - _free_bytes(device))
        width, dtype = target_capture_width(worker)
        slots = int(worker.req_to_token_pool.req_to_token.shape[0])
        need = slots * lag_tokens * LagBuffer.token_bytes(width, dtype)
        free = _free_bytes(device)
        if free and need > free // 2:
            from specfsm_sglang.config import ConfigError

            raise ConfigError(
                "lag_tokens",
                f"the lag buffer needs {need / 2**30:.2f} GiB ({slots} request slots x "
                f"{lag_tokens} tokens x {LagBuffer.token_bytes(width, dtype)} bytes) and only "
                f"{free / 2**30:.2f} GiB are free after SGLang's pools (at most half is used); "
                'lower lag_tokens, lower --mem-fraction-static, or use "plain": "warm"',
            )
        self.lag = LagBuffer(slots, lag_tokens, width, dtype, device)
        self.stats = LagStats()
        self.topk = int(worker.topk)
        dw = worker._draft_worker
        from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec

        self._draft_hidden = get_draft_recurrent_hidden_state_spec(dw.draft_runner)
        self._zeros: dict[str, torch.Tensor] = {}
        self.attached = False
        self._saved: tuple[Any, Any] | None = None
        self.resync_done = False
        self.last_catchup: tuple[int, int, float, int, bool] | None = None

    # ---------------------------------------------------------------- PLAIN's own state
    def attach(self) -> None:
        """Point the target runner at PLAIN's decode backend and graph (entry action)."""
        tmr = self.worker._target_worker.model_runner
        if not self.attached:
            self._saved = (tmr.attn_backend, tmr.decode_cuda_graph_runner)
        tmr.attn_backend = self.target_attn_backend
        tmr.decode_cuda_graph_runner = self.target_graph_runner
        self.attached = True

    def detach(self) -> None:
        """Give the target runner back the 1-wide state's backend and graph (exit action)."""
        if self.attached and self._saved is not None:
            tmr = self.worker._target_worker.model_runner
            tmr.attn_backend, tmr.decode_cuda_graph_runner = self._saved
        self._saved = None
        self.attached = False

    def describe(self) -> dict[str, Any]:
        return {
            "plain": "zero-tax (target decode forward only; draft caught up in RESYNCING)",
            "plain_decode_graph": self.target_graph_runner is not None,
            "plain_state_build_s": round(self.build_s, 3),
            "plain_state_bytes": self.graph_bytes,
            "lag_tokens": self.lag.capacity,
            "lag_bytes_per_token": self.lag.bytes_per_token,
            "lag_buffer_bytes": self.lag.nbytes,
            "catchup_tokens": self.catchup_tokens,
        }

    def _zero(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        buf = self._zeros.get(name)
        if buf is None or buf.shape[0] < shape[0]:
            cap = max(shape[0], 2 * (buf.shape[0] if buf is not None else 8))
            buf = torch.zeros((cap, *shape[1:]), dtype=dtype, device=self.lag.tokens.device)
            self._zeros[name] = buf
        return buf[: shape[0]]

    # ---------------------------------------------------------------- one PLAIN step
    def forward(self, batch: Any, on_publish: Any = None, resync: bool = False, **_: Any) -> Any:
        """One target decode forward of one token per request; records the lag.

        With ``resync`` (a RESYNCING iteration) the batched catch-up follows in the same
        iteration, over each chosen request's whole lag including this step's token, and the
        result carries the caught-up draft input (top-k, draft hidden state) for those rows:
        the next iteration can draft from them. ``self.resync_done`` says whether every
        request of the batch is caught up.
        """
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        w = self.worker
        draft_input = batch.spec_info
        bs = int(batch.seq_lens.shape[0])
        seq_lens = batch.seq_lens
        rows = [_pool_idx(r) for r in batch.reqs]
        rows_dev = batch.req_pool_indices
        req_to_token = w.req_to_token_pool.req_to_token
        fb = copy.copy(batch)
        fb.forward_mode = ForwardMode.DECODE
        fb.spec_algorithm = SpeculativeAlgorithm.NONE
        fb.spec_info = None
        fb.input_ids = draft_input.bonus_tokens.to(torch.int64)
        # the slot SGLang's speculative reserve mapped at the pending position
        fb.out_cache_loc = req_to_token[rows_dev, seq_lens.to(torch.int64)].to(torch.int64)
        fb.seq_lens = seq_lens + 1
        seq_after_cpu: list[int] | None = None
        if batch.seq_lens_cpu is not None:
            fb.seq_lens_cpu = batch.seq_lens_cpu + 1
            fb.seq_lens_sum = int(fb.seq_lens_cpu.sum())
            seq_after_cpu = fb.seq_lens_cpu.tolist()
        elif batch.seq_lens_sum is not None:
            fb.seq_lens_sum = int(batch.seq_lens_sum) + bs
        new_seq_lens = fb.seq_lens
        if on_publish is not None:
            # a PLAIN step commits exactly one token per request: its new lengths are known
            # before the forward, so publish them first and let the overlapped scheduler plan
            # the next batch while this one decodes (a verify can publish only after it ran)
            on_publish(new_seq_lens)
        out = w._target_worker.forward_batch_generation(
            fb, capture_hidden_mode=CaptureHiddenMode.LAST
        )
        next_ids = out.next_token_ids
        hidden = out.logits_output.hidden_states
        if hidden is None or hidden.shape[-1] != self.lag.width:
            raise RuntimeError(
                "zero-tax PLAIN: the target forward returned hidden states of shape "
                f"{None if hidden is None else tuple(hidden.shape)}; the draft needs "
                f"[{bs}, {self.lag.width}]"
            )
        peak = self.lag.record(rows, rows_dev, hidden[:bs], next_ids)
        st = self.stats
        st.plain_forwards += 1
        st.recorded_tokens += bs
        if peak > st.peak_lag:
            st.peak_lag = peak
        nxt = EagleDraftInput(bonus_tokens=next_ids.to(torch.int32))
        size, hdtype = self._draft_hidden
        if resync:
            dev = next_ids.device
            nxt.topk_p = torch.zeros((bs, self.topk), dtype=torch.float32, device=dev)
            nxt.topk_index = torch.zeros((bs, self.topk), dtype=torch.int64, device=dev)
            if size is not None:
                nxt.hidden_states = torch.zeros((bs, size), dtype=hdtype, device=dev)
            if seq_after_cpu is None:
                seq_after_cpu = new_seq_lens.cpu().tolist()
            self.resync_done = self._catch_up(batch, nxt, new_seq_lens, seq_after_cpu)
        else:
            nxt.topk_p = self._zero("topk_p", (bs, self.topk), torch.float32)
            nxt.topk_index = self._zero("topk_index", (bs, self.topk), torch.int64)
            if size is not None:
                nxt.hidden_states = self._zero("hidden", (bs, size), hdtype)
        fields: dict[str, Any] = {
            "logits_output": out.logits_output,
            "next_token_ids": next_ids,
            "can_run_cuda_graph": out.can_run_cuda_graph,
            "speculative_num_draft_tokens": 1,
            "next_draft_input": nxt,
            "accept_lens": torch.ones((bs,), dtype=torch.int32, device=next_ids.device),
            "new_seq_lens": new_seq_lens,
            "extra_keep_alive_refs": [fb],
        }
        if _has_field(GenerationBatchResult, "accept_index"):  # 0.5.23 (not 0.5.17)
            fields["accept_index"] = torch.arange(
                bs, dtype=torch.int32, device=next_ids.device
            ).unsqueeze(1)
        return GenerationBatchResult(**fields)

    # ---------------------------------------------------------------- bookkeeping
    def note_prefill(self, batch: Any) -> None:
        """A prefill (or mixed) forward ran SGLang's draft-extend over its new requests: their
        draft is warm, their lag starts at zero."""
        rows = [i for i in map(compat.req_pool_idx, batch.reqs) if i is not None]
        if len(rows) == len(batch.reqs) and batch.req_pool_indices is not None:
            self.lag.reset(rows, batch.req_pool_indices)
        else:
            self.lag.reset(rows)

    # ---------------------------------------------------------------- RESYNCING
    def _catch_up(
        self, batch: Any, nxt: Any, seq_after: torch.Tensor, seq_after_cpu: list[int]
    ) -> bool:
        """Batched draft-extend over the lag of this batch's requests (all of it, or the
        requests whose lag fits in the iteration's budget); writes their fresh draft input rows
        into ``nxt``. True when no request of the batch lags any more.

        The budget is ``catchup_tokens`` but never below ``2 x bs + lag_tokens``: requests are
        taken largest lag first while they fit, so one iteration clears at least ``2 x bs``
        tokens (or everything) while its PLAIN step adds ``bs``, and RESYNCING ends."""
        rows_all = [_pool_idx(r) for r in batch.reqs]
        cap = self.lag.capacity
        pending = [(i, r) for i, r in enumerate(rows_all) if self.lag.count[r] > 0]
        if not pending:
            return True
        budget = max(self.catchup_tokens, 2 * len(rows_all) + cap)
        chosen: list[tuple[int, int]] = []
        used = 0
        for i, r in sorted(pending, key=lambda p: -min(self.lag.count[p[1]], cap)):
            n = min(self.lag.count[r], cap)
            if used + n <= budget:
                chosen.append((i, r))
                used += n
        chosen.sort()  # batch order
        t0 = time.perf_counter()
        self._draft_extend(batch, nxt, chosen, seq_after, seq_after_cpu)
        dt = time.perf_counter() - t0
        st = self.stats
        st.catchups += 1
        st.caught_up_rows += len(chosen)
        st.caught_up_tokens += used
        st.catchup_s += dt
        over = sum(1 for _, r in chosen if self.lag.count[r] > cap)
        st.overflow_rows += over
        st.history.append((len(chosen), used, dt))
        #: what the last catch-up did, for the controller's specfsm.catchup log line
        self.last_catchup = (len(chosen), used, dt, over, len(chosen) == len(pending))
        self.lag.reset([r for _, r in chosen])
        return len(chosen) == len(pending)

    def _draft_extend(
        self,
        batch: Any,
        nxt: Any,
        chosen: list[tuple[int, int]],
        seq_after: torch.Tensor,
        seq_after_cpu: list[int],
    ) -> None:
        from sglang.srt.model_executor.forward_batch_info import (
            CaptureHiddenMode,
            ForwardBatch,
            ForwardMode,
        )
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
        from sglang.srt.speculative.spec_utils import renorm_draft_probs
        from sglang.srt.utils.common import fast_topk

        w = self.worker
        dw = w._draft_worker
        cap = self.lag.capacity
        idx = [i for i, _ in chosen]
        rows = [r for _, r in chosen]
        lens = [min(self.lag.count[r], cap) for r in rows]
        dev = seq_after.device
        idx_dev = torch.tensor(idx, dtype=torch.int64).to(dev, non_blocking=True)
        seq_now = seq_after[idx_dev].to(torch.int64)  # committed length L + N
        seq_cpu = [int(seq_after_cpu[i]) for i in idx]
        prefix = [s - n for s, n in zip(seq_cpu, lens, strict=True)]
        tokens, hidden = self.lag.gather(rows, lens)
        req_to_token = w.req_to_token_pool.req_to_token
        rows_dev = batch.req_pool_indices[idx_dev]
        pos = torch.cat(
            [torch.arange(p, p + n, dtype=torch.int64) for p, n in zip(prefix, lens, strict=True)]
        ).to(dev, non_blocking=True)
        lens_dev = torch.tensor(lens, dtype=torch.int64).to(dev, non_blocking=True)
        out_cache_loc = req_to_token[torch.repeat_interleave(rows_dev, lens_dev), pos]

        cb = copy.copy(batch)
        cb.reqs = [batch.reqs[i] for i in idx]
        cb.forward_mode = ForwardMode.EXTEND
        cb.input_ids = tokens
        cb.req_pool_indices = rows_dev
        if getattr(batch, "req_pool_indices_cpu", None) is not None:
            cb.req_pool_indices_cpu = torch.tensor(rows, dtype=torch.int64)
        cb.seq_lens = seq_now
        cb.seq_lens_cpu = torch.tensor(seq_cpu, dtype=torch.int64)
        cb.seq_lens_sum = int(sum(seq_cpu))
        cb.orig_seq_lens = seq_now.to(torch.int32)
        cb.out_cache_loc = out_cache_loc.to(torch.int64)
        cb.prefix_lens = prefix
        cb.extend_lens = lens
        cb.extend_num_tokens = int(sum(lens))
        cb.extend_logprob_start_lens = [0] * len(idx)
        cb.extend_input_logprob_token_ids = None
        cb.return_logprob = False
        cb.top_logprobs_nums = None
        cb.token_ids_logprobs = None
        cb.multimodal_inputs = [None] * len(idx)
        cb.decoding_reqs = None
        cb.is_prefill_only = False
        cb.spec_info = EagleDraftExtendInput(
            hidden_states=hidden, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1
        )
        fwd = ForwardBatch.init_new(
            cb,
            dw.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        fwd.return_logprob = False
        logits_output = dw.draft_runner.forward(fwd).logits_output
        self.stats.draft_forwards += 1
        logits = logits_output.next_token_logits
        # the same selection as SGLang's _draft_extend_for_decode (the warm draft's)
        if self.topk == 1:
            topk_index = torch.argmax(logits, dim=-1, keepdim=True)
            topk_p = torch.ones_like(topk_index, dtype=torch.float32)
        else:
            probs = renorm_draft_probs(logits, cb.sampling_info, False)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt.topk_p[idx_dev] = topk_p.to(nxt.topk_p.dtype)
        nxt.topk_index[idx_dev] = topk_index.to(nxt.topk_index.dtype)
        if nxt.hidden_states is not None and logits_output.hidden_states is not None:
            nxt.hidden_states[idx_dev] = logits_output.hidden_states.to(nxt.hidden_states.dtype)


@functools.cache
def _has_field(cls: type, name: str) -> bool:
    """Whether SGLang's dataclass ``cls`` has field ``name`` (fields differ between versions)."""
    return name in {f.name for f in dataclasses.fields(cls)}


def _pool_idx(req: Any) -> int:
    idx = compat.req_pool_idx(req)
    if idx is None:
        raise RuntimeError(f"request {getattr(req, 'rid', '?')} has no req_to_token row")
    return idx


def _free_bytes(device: Any) -> int:
    if str(device).startswith("cuda"):
        free, _ = torch.cuda.mem_get_info()
        return int(free)
    return 0
