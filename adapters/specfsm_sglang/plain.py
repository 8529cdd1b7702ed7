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
from typing import Any

import torch

from specfsm_sglang import compat, deferred_prefill, draft_extend
from specfsm_sglang.device_memory import free_bytes
from specfsm_sglang.lag import LagBuffer, LagStats, PromptStore, Stored


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

    def __init__(
        self,
        worker: Any,
        lag_tokens: int,
        catchup_tokens: int,
        defer_prefill_tokens: int | str = 0,
    ) -> None:
        self.worker = worker
        self.catchup_tokens = catchup_tokens
        tmr = worker._target_worker.model_runner
        device = tmr.device
        free0 = free_bytes(device)
        t0 = time.perf_counter()
        backup = tmr.init_new_workspace
        try:
            # the shared workspace: PLAIN's backend never runs beside the verify backends
            self.target_attn_backend = tmr._get_attention_backend(init_new_workspace=False)
        finally:
            tmr.init_new_workspace = backup
        self.target_graph_runner = _build_decode_graph(tmr, self.target_attn_backend)
        self.build_s = time.perf_counter() - t0
        self.graph_bytes = max(0, free0 - free_bytes(device))
        width, dtype = target_capture_width(worker)
        slots = int(worker.req_to_token_pool.req_to_token.shape[0])
        need = slots * lag_tokens * LagBuffer.token_bytes(width, dtype)
        free = free_bytes(device)
        if free and need > free // 2:
            from specfsm_sglang.config import ConfigError

            raise ConfigError(
                "lag_tokens",
                f"the lag buffer needs {need / 2**30:.2f} GiB ({slots} request slots x "
                f"{lag_tokens} tokens x {LagBuffer.token_bytes(width, dtype)} bytes) and only "
                f"{free / 2**30:.2f} GiB are free after SGLang's pools (at most half is used); "
                'lower lag_tokens, lower --mem-fraction-static, or use "plain": "warm"',
            )
        tb = LagBuffer.token_bytes(width, dtype)
        #: the deferred prompts' budget, lowered to what half the free memory leaves beside the
        #: lag buffer (a default that fits a large GPU must not refuse a small one's start)
        # "pool": a deferred prompt's positions are in the target's KV pool while its request
        # runs, so a store of the pool's size never turns a prefill away
        budget = (
            int(getattr(tmr, "max_total_num_tokens", 0) or 0)
            if defer_prefill_tokens == "pool"
            else int(defer_prefill_tokens)
        )
        if free:
            budget = max(0, min(budget, (free // 2 - need) // tb))
        self.lag = LagBuffer(slots, lag_tokens, width, dtype, device)
        self.stats = LagStats()
        #: prompts prefilled while PLAIN without the draft's prefill (deferred_prefill.py)
        self.store = PromptStore(budget, self.stats)
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
            # the store's budget as built ("pool" resolved, lowered to the free memory); the
            # configured value is the line's defer_prefill_tokens
            "defer_prefill_budget": self.store.budget,
            "defer_prefill_max_bytes": self.store.budget * self.lag.bytes_per_token,
        }

    def _zero(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, fill: int = 0
    ) -> torch.Tensor:
        """The first ``shape[0]`` rows of a buffer of ``fill`` that nothing writes (SGLang
        relays or copies it to the host), grown by doubling: no fill kernel per step."""
        buf = self._zeros.get(name)
        if buf is None or buf.shape[0] < shape[0]:
            cap = max(shape[0], 2 * (buf.shape[0] if buf is not None else 8))
            buf = torch.full((cap, *shape[1:]), fill, dtype=dtype, device=self.lag.tokens.device)
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
        tmr = w._target_worker.model_runner
        # a RESYNCING step's catch-up reads req_to_token after the target forward: the
        # scheduler waits for the whole step then, as SGLang's own draft-extend makes it
        hand_over = not resync and compat.clear_read_done(tmr)
        out = w._target_worker.forward_batch_generation(
            fb, capture_hidden_mode=CaptureHiddenMode.LAST
        )
        if hand_over:
            compat.hand_over_read_done(w, tmr)
        next_ids = out.next_token_ids
        hidden = out.logits_output.hidden_states
        if hidden is None or hidden.shape[-1] != self.lag.width:
            raise RuntimeError(
                "zero-tax PLAIN: the target forward returned hidden states of shape "
                f"{None if hidden is None else tuple(hidden.shape)}; the draft needs "
                f"[{bs}, {self.lag.width}]"
            )
        peak = self.lag.record(rows, hidden[:bs], next_ids)
        st = self.stats
        st.plain_forwards += 1
        st.recorded_tokens += bs
        if peak > st.peak_lag:
            st.peak_lag = peak
        # the sampler's dtype (int64), as SGLang's own prefill relays it: the future map's
        # token buffer is int64, so a cast here would cost two conversion kernels per step
        nxt = EagleDraftInput(bonus_tokens=next_ids)
        size, hdtype = self._draft_hidden
        if resync:
            dev = next_ids.device
            nxt.topk_p = torch.zeros((bs, self.topk), dtype=torch.float32, device=dev)
            nxt.topk_index = torch.zeros((bs, self.topk), dtype=torch.int64, device=dev)
            if size is not None:
                nxt.hidden_states = torch.zeros((bs, size), dtype=hdtype, device=dev)
            if seq_after_cpu is None:
                seq_after_cpu = new_seq_lens.cpu().tolist()
            self.resync_done = self._catch_up(batch, nxt, seq_after_cpu)
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
            "accept_lens": self._zero("accept_lens", (bs,), torch.int32, fill=1),
            "new_seq_lens": new_seq_lens,
            "extra_keep_alive_refs": [fb],
        }
        if _has_field(GenerationBatchResult, "accept_index"):  # 0.5.23 (not 0.5.17)
            fields["accept_index"] = torch.arange(
                bs, dtype=torch.int32, device=next_ids.device
            ).unsqueeze(1)
        return GenerationBatchResult(**fields)

    # ---------------------------------------------------------------- prefills
    def prefill(self, orig: Any, batch: Any, plain: bool, on_publish: Any) -> Any:
        """A prefill batch (``orig``: SGLang's forward of it). While PLAIN (``plain``), the
        target prefill alone when it fits the store (deferred_prefill.py); otherwise SGLang's,
        after the draft caught up with earlier chunks of its prompts."""
        if plain and deferred_prefill.defers(self, batch):
            return deferred_prefill.forward(self, batch, on_publish)
        if self.store:
            deferred_prefill.flush(self, batch)
        out = orig()
        self.note_prefill(batch)
        return out

    # ---------------------------------------------------------------- bookkeeping
    def note_prefill(self, batch: Any) -> None:
        """A prefill (or mixed) forward ran, with SGLang's draft prefill or the deferred one:
        its requests' lag starts at zero, and the stored prompts of requests that left their
        slot (a slot's earlier request among them) are dropped. Dropped here rather than when
        the store fills: SGLang hands slots out first-in first-out, so a finished request's
        entry would otherwise hold its device memory until every other slot had been used."""
        if self.store:
            self.store.reclaim()
        rows = [r for r in map(compat.req_pool_idx, batch.reqs) if r is not None]
        self.lag.reset(rows)

    # ---------------------------------------------------------------- RESYNCING
    def _prompt_part(self, row: int, req: Any, seq_after: int) -> Stored | None:
        """The row's deferred prompt positions if they join its ring's without a gap (else
        they are dropped: the ring overflowed, so the positions between are lost anyway)."""
        e = self.store.owned(row, req)
        if e is None:
            return None
        count = self.lag.count[row]
        if count <= self.lag.capacity and e.end == seq_after - count:
            return e
        self.store.drop(row)
        return None

    def _catch_up(self, batch: Any, nxt: Any, seq_after_cpu: list[int]) -> bool:
        """Batched draft-extend over what the draft has not seen of this batch's requests (the
        lag ring's positions and, for requests prefilled while PLAIN, their deferred prompt
        positions before them): all of it, or the requests that fit in the iteration's budget;
        writes their fresh draft input rows into ``nxt``. True when no request of the batch
        lags any more.

        The budget is ``catchup_tokens`` but never below ``2 x bs + lag_tokens`` nor below the
        largest single request's lag: requests are taken largest lag first while they fit, so
        one iteration clears at least one request, or ``2 x bs`` tokens, or everything, while
        its PLAIN step adds ``bs``, and RESYNCING ends."""
        rows_all = [_pool_idx(r) for r in batch.reqs]
        cap = self.lag.capacity
        prompt: dict[int, Stored] = {}
        need: dict[int, int] = {}
        for i, r in enumerate(rows_all):
            e = self._prompt_part(r, batch.reqs[i], seq_after_cpu[i]) if self.store else None
            n = min(self.lag.count[r], cap) + (e.n if e is not None else 0)
            if n:
                need[i] = n
                if e is not None:
                    prompt[i] = e
        if not need:
            return True
        budget = max(self.catchup_tokens, 2 * len(rows_all) + cap, max(need.values()))
        chosen: list[int] = []
        used = 0
        for i in sorted(need, key=lambda j: -need[j]):
            if used + need[i] <= budget:
                chosen.append(i)
                used += need[i]
        chosen.sort()  # batch order
        t0 = time.perf_counter()
        ring = [min(self.lag.count[rows_all[i]], cap) for i in chosen]
        r_tok, r_hid = self.lag.gather([rows_all[i] for i in chosen], ring)
        toks: list[torch.Tensor] = []
        hids: list[torch.Tensor] = []
        prefix: list[int] = []
        lens: list[int] = []
        at = 0
        for i, n in zip(chosen, ring, strict=True):
            e = prompt.get(i)
            if e is not None:
                self.store.take(rows_all[i])
                toks += e.tokens
                hids += e.hidden
            toks.append(r_tok[at : at + n])
            hids.append(r_hid[at : at + n])
            at += n
            lens.append(n + (e.n if e is not None else 0))
            prefix.append(int(seq_after_cpu[i]) - lens[-1])
        rows = draft_extend.Rows(
            chosen,
            [rows_all[i] for i in chosen],
            prefix,
            lens,
            torch.cat(toks) if len(toks) > 1 else toks[0],
            torch.cat(hids) if len(hids) > 1 else hids[0],
        )
        self._relay_draft_input(batch, nxt, rows)
        dt = time.perf_counter() - t0
        st = self.stats
        st.catchups += 1
        st.caught_up_rows += len(chosen)
        st.caught_up_tokens += sum(ring)
        st.prompt_caught_up_tokens += sum(prompt[i].n for i in chosen if i in prompt)
        st.catchup_s += dt
        over = sum(1 for i in chosen if self.lag.count[rows_all[i]] > cap)
        st.overflow_rows += over
        st.history.append((len(chosen), used, dt))
        #: what the last catch-up did, for the controller's specfsm.catchup log line
        self.last_catchup = (len(chosen), used, dt, over, len(chosen) == len(need))
        self.lag.reset([rows_all[i] for i in chosen])
        return len(chosen) == len(need)

    def _relay_draft_input(self, batch: Any, nxt: Any, rows: draft_extend.Rows) -> None:
        """Run the draft over ``rows`` and write the draft input a warm draft would relay
        (top-k, draft hidden state) into their rows of ``nxt``."""
        logits_output, sampling_info, idx_dev = draft_extend.run(self.worker, batch, rows)
        self.stats.draft_forwards += 1
        topk_p, topk_index = draft_extend.select_topk(logits_output, sampling_info, self.topk)
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
