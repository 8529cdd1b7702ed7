"""torch_native attention for EAGLE draft decode and target verify (SGLang 0.5.23, CPU).

SGLang's ``torch_native`` backend (``srt/layers/attention/torch_native_backend.py``) has no
speculative support: ``DraftBackendFactory`` refuses it for the multi-step draft decode
(``srt/speculative/draft_utils.py:63-64``: "EAGLE is not supported in decode attention backend
torch_native") and for draft extend, and its ``forward_extend`` (line 279) needs
``extend_prefix_lens`` / ``extend_seq_lens``, which TARGET_VERIFY batches do not carry. This
module adds, without copying SGLang code:

* :class:`TorchNativeMultiStepDraftBackend`: one backend per draft step (the container shape of
  ``IntelAMXMultiStepDraftBackend``, ``intel_amx_backend.py:426-487``). Draft step ``s`` (0-based),
  query row ``(b, j)`` (request b, branch j of ``topk``) attends to the committed prefix
  ``req_to_token[r_b, :L_b]`` plus its own branch slots
  ``req_to_token[r_b, L_b + j*steps : L_b + j*steps + s + 1]``: the layout Triton's
  ``generate_draft_decode_kv_indices`` builds for page size 1
  (``kernels/ops/speculative/cache_locs.py:160-290``; writes follow
  ``per_step_draft_out_cache_loc``, ``speculative/eagle_utils.py:57-78``).
* :func:`spec_forward_extend`: TARGET_VERIFY (T = ``draft_token_num`` tokens per request on top
  of ``seq_lens``) honouring ``spec_info.custom_mask``, which on CPU is a QLEN_ONLY [T, T] bool
  block per request (``eagle_utils.default_tree_mask_mode``, line 132-135): query t sees the
  whole prefix and the tree nodes its mask row allows (as ``intel_amx_backend.py:70-123`` passes
  it). A chain's mask is lower-triangular, a tree's is its ancestor relation.
* Draft extend (DRAFT_EXTEND / DRAFT_EXTEND_V2) runs through the stock causal ``forward_extend``
  with the prefix/extend lengths the batch carries.

Only page size 1 is supported (the test bed's setting); anything else raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention


def _save_kv(
    backend: TorchNativeAttnBackend,
    layer: Any,
    forward_batch: Any,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    save_kv_cache: bool,
) -> None:
    if save_kv_cache and k is not None and v is not None:
        backend.token_to_kv_pool.set_kv_buffer(
            layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v
        )


def _check_layer(layer: Any) -> None:
    if layer.is_cross_attention or (
        layer.sliding_window_size is not None and layer.sliding_window_size > -1
    ):
        raise NotImplementedError(
            "specfsm CPU test bed: speculative torch_native attention supports plain causal "
            "self-attention only (no cross attention, no sliding window)"
        )


def _attend(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_idx: torch.Tensor,
    mask: torch.Tensor | None,
    layer: Any,
) -> torch.Tensor:
    """q: [n, Hq, D] attends to kv rows ``kv_idx`` ([n, S] or [S]); mask: [n, S] bool (True = see).

    Returns [n, Hq, Dv]. Rows of a [n, S] ``kv_idx`` are independent batches of one query each
    when ``kv_idx`` is 2-D; with a 1-D ``kv_idx`` all n queries share the keys.
    """
    use_gqa = layer.tp_q_head_num != layer.tp_k_head_num
    if kv_idx.dim() == 1:
        key = k_cache[kv_idx].movedim(0, 1).unsqueeze(0)  # [1, Hkv, S, D]
        value = v_cache[kv_idx].movedim(0, 1).unsqueeze(0)
        query = q.movedim(0, 1).unsqueeze(0)  # [1, Hq, n, D]
        attn_mask = None if mask is None else mask.view(1, 1, *mask.shape)
        out = scaled_dot_product_attention(
            query.to(key.dtype) if query.dtype != key.dtype else query,
            key,
            value,
            attn_mask=attn_mask,
            scale=layer.scaling,
            enable_gqa=use_gqa,
        )
        return out.squeeze(0).movedim(0, 1)  # [n, Hq, Dv]
    key = k_cache[kv_idx].movedim(1, 2)  # [n, Hkv, S, D]
    value = v_cache[kv_idx].movedim(1, 2)
    query = q.unsqueeze(2)  # [n, Hq, 1, D]
    attn_mask = None if mask is None else mask.view(mask.shape[0], 1, 1, mask.shape[1])
    out = scaled_dot_product_attention(
        query.to(key.dtype) if query.dtype != key.dtype else query,
        key,
        value,
        attn_mask=attn_mask,
        scale=layer.scaling,
        enable_gqa=use_gqa,
    )
    return out.squeeze(2)  # [n, Hq, Dv]


def target_verify_attention(
    backend: TorchNativeAttnBackend,
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    layer: Any,
    forward_batch: Any,
    save_kv_cache: bool = True,
) -> torch.Tensor:
    """TARGET_VERIFY attention: per request, T queries over ``req_to_token[r, :L+T]`` with mask
    ``[ones(T, L) | custom_mask block]`` (causal when the batch carries no custom mask)."""
    _check_layer(layer)
    _save_kv(backend, layer, forward_batch, k, v, save_kv_cache)
    spec_info = forward_batch.spec_info
    T = int(spec_info.draft_token_num)
    seq_lens = forward_batch.seq_lens.tolist()
    bs = len(seq_lens)
    custom = getattr(spec_info, "custom_mask", None)
    if custom is not None and custom.numel() > 0:
        if custom.numel() < bs * T * T or custom.dtype != torch.bool:
            raise NotImplementedError(
                f"verify mask of {custom.numel()} {custom.dtype} entries for bs={bs}, T={T}: "
                "only the QLEN_ONLY bool layout (CPU default) is supported"
            )
        blocks = custom[: bs * T * T].view(bs, T, T)
    else:
        blocks = torch.ones(T, T, dtype=torch.bool, device=q.device).tril().expand(bs, T, T)
    q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
    o = q.new_empty((q_.shape[0], layer.tp_q_head_num, layer.v_head_dim))
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    v_cache = backend.token_to_kv_pool.get_value_buffer(layer.layer_id)
    req_to_token = backend.req_to_token_pool.req_to_token
    rows = forward_batch.req_pool_indices.tolist()
    for b in range(bs):
        L = int(seq_lens[b])
        kv_idx = req_to_token[rows[b], : L + T].to(torch.int64)
        mask = torch.cat([torch.ones(T, L, dtype=torch.bool, device=q.device), blocks[b]], dim=1)
        o[b * T : (b + 1) * T] = _attend(
            q_[b * T : (b + 1) * T], k_cache, v_cache, kv_idx, mask, layer
        )
    return o.view(q_.shape[0], -1)


def spec_forward_extend(
    original: Callable[..., torch.Tensor],
    backend: TorchNativeAttnBackend,
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    layer: Any,
    forward_batch: Any,
    save_kv_cache: bool = True,
    **kwargs: Any,
) -> torch.Tensor:
    """AROUND hook body for ``TorchNativeAttnBackend.forward_extend``: TARGET_VERIFY goes to
    :func:`target_verify_attention`, every other mode to the stock implementation."""
    if forward_batch.forward_mode.is_target_verify():
        return target_verify_attention(backend, q, k, v, layer, forward_batch, save_kv_cache)
    return original(backend, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)


class TorchNativeDraftStepBackend(TorchNativeAttnBackend):  # type: ignore[misc]  # sglang: untyped
    """Draft decode step ``step`` of a ``topk`` x ``num_steps`` EAGLE draft (see module doc)."""

    def __init__(self, model_runner: Any, topk: int, num_steps: int, step: int) -> None:
        super().__init__(model_runner)
        self.topk = topk
        self.num_steps = num_steps
        self.step = step
        page_size = getattr(model_runner, "page_size", 1)
        if page_size != 1:
            raise NotImplementedError(
                "specfsm CPU test bed: torch_native draft decode needs page_size 1, "
                f"got {page_size}"
            )

    def draft_kv_indices(self, forward_batch: Any) -> list[torch.Tensor]:
        """Per request b: [topk, L_b + step + 1] KV slot indices (row j = branch j)."""
        req_to_token = self.req_to_token_pool.req_to_token
        out = []
        rows = forward_batch.req_pool_indices.tolist()
        for r, L in zip(rows, forward_batch.seq_lens.tolist(), strict=True):
            row = req_to_token[r].to(torch.int64)
            prefix = row[:L].expand(self.topk, L)
            starts = L + torch.arange(self.topk, device=row.device) * self.num_steps
            branch = starts.view(-1, 1) + torch.arange(self.step + 1, device=row.device)
            out.append(torch.cat([prefix, row[branch]], dim=1))
        return out

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        layer: Any,
        forward_batch: Any,
        save_kv_cache: bool = True,
        **kwargs: Any,
    ) -> torch.Tensor:
        _check_layer(layer)
        q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)
        _save_kv(self, layer, forward_batch, k, v, save_kv_cache)
        q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
        o = q.new_empty((q_.shape[0], layer.tp_q_head_num, layer.v_head_dim))
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        v_cache = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
        n = self.topk
        for b, kv_idx in enumerate(self.draft_kv_indices(forward_batch)):
            o[b * n : (b + 1) * n] = _attend(
                q_[b * n : (b + 1) * n], k_cache, v_cache, kv_idx, None, layer
            )
        return o.view(q_.shape[0], -1)

    def forward_extend(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError("a draft decode step backend only runs decode")


class TorchNativeMultiStepDraftBackend:
    """The multi-step draft decode container SGLang expects (``attn_backends[i]`` is used for
    draft step i by ``EAGLEWorkerV2.draft_forward``, ``eagle_worker_v2.py:829-836``)."""

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.attn_backends: list[TorchNativeDraftStepBackend] = [
            TorchNativeDraftStepBackend(model_runner, topk, speculative_num_steps, step)
            for step in range(speculative_num_steps - 1)
        ]

    def init_forward_metadata(self, forward_batch: Any) -> None:
        for backend in self.attn_backends:
            backend.init_forward_metadata(forward_batch)

    def init_cuda_graph_state(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("no CUDA graphs on the CPU test bed (disable_cuda_graph=True)")
