"""Pure-torch ports of the ``sgl_kernel`` CPU ops SGLang 0.5.23's EAGLE path calls on CPU.

Each function has the name and argument order of the ``sgl_kernel`` op SGLang calls under
``if _is_cpu:`` and reproduces the semantics of SGLang's GPU kernel of the same name (a Triton
kernel in the sglang package, or its Triton twin for the two CUDA-JIT tree kernels). Paths are
relative to the installed ``sglang/`` package, release 0.5.23. Outputs are written in place,
exactly like the kernels (the ops return None).

Unit tests: ``tests/cpu/test_ops.py`` compares every op with the SGLang Triton kernel run in
Triton's CPU interpreter (``TRITON_INTERPRET=1``) or, where the interpreter cannot run it (raw
pointers), with a naive reference written from the kernel's semantics.

Input checks: a port is exactly as strict as the GPU kernel it stands for, so that the CPU test
bed fails where the GPU fails (the H200 found a 1-wide verify passing int32 ``candidates`` that
the old lenient port accepted). Each port runs the host-side checks of its GPU kernel(s) before
touching data, through the helpers of :mod:`specfsm_cpu.tree_ops` (RuntimeError, the kernel's
message text; metadata only: no device sync), in the kernel's order. The CUDA device checks
become "same device". The two tree ports live in that module and are re-exported here.

===================================  ==========================================================
port                                 checks ported (``tests/cpu/test_kernel_checks.py``)
===================================  ==========================================================
verify_tree_greedy_cpu               sgl-kernel ``csrc/speculative/eagle_utils.cu``
                                     ``verify_tree_greedy`` (the AOT op of 0.5.17 / sgl_kernel
                                     0.4.5: CHECK_INPUT, CHECK_DIM, CHECK_EQ, dtype throws) +
                                     the JIT op of 0.5.23 (``kernels/jit/csrc/speculative/
                                     tree.cuh`` ``verify_tree_greedy``: TensorMatcher extras)
build_tree_kernel_efficient_cpu      JIT ``tree.cuh`` ``build_tree_kernel_efficient``
                                     (CHECK_HOST + TensorMatcher); the AOT op checks nothing
                                     ("TODO (ying) check type")
the six Triton-kernel ports          none: a Triton launch validates no dtype or shape (the
(cache locs, bonus tokens, kv copy)  wrappers' only assert, ``cache_locs.py:98``, is CPU-side);
and ``cpu/hooks.py:gather_rows``     the same for ``gather_spec_extras``' ``_gather_rows_kernel``
===================================  ==========================================================
"""

from __future__ import annotations

import ctypes

import torch

from specfsm_cpu.tree_ops import build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]


def _segments(start: torch.Tensor, end: torch.Tensor) -> list[tuple[int, int, int]]:
    """(start, end, out_offset) per row; out_offset = sum of the previous rows' lengths."""
    starts = [int(x) for x in start.tolist()]
    ends = [int(x) for x in end.tolist()]
    out, offset = [], 0
    for s, e in zip(starts, ends, strict=True):
        out.append((s, e, offset))
        offset += max(e - s, 0)
    return out


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Port of ``copy_all_layer_kv_cache_tiled`` (``kernels/ops/kvcache/cache_move.py:146-178``).

    For every buffer ``b`` (raw base address ``data_ptrs[b]``, row size ``strides[b]`` bytes),
    copy row ``src_loc[i]`` to row ``tgt_loc[i]`` for all i. Like the kernel, all source rows
    are read before any target row is written ("safe for in-place copy"). Called by
    ``MHATokenToKVPool.move_kv_cache`` (``mem_cache/memory_pool.py:3423-3492``; topk>1 trees
    move the accepted path's KV) and its warm-up (``memory_pool.py:2420``).
    """
    n = int(tgt_loc.numel())
    if n == 0:
        return
    tgt = tgt_loc.to(torch.int64).reshape(-1)
    src = src_loc.to(torch.int64).reshape(-1)
    rows = int(torch.maximum(tgt.max(), src.max()).item()) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        stride = int(stride)
        # A uint8 view of the first `rows` rows of this buffer (no copy).
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(int(ptr))
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src]  # advanced indexing gathers (copies) the sources first


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Port of ``assign_req_to_token_pool`` (``mem_cache/allocation.py:691-723``).

    Row i: ``req_to_token[req_pool_indices[i], start[i]:end[i]] =
    out_cache_loc[o_i : o_i + end[i] - start[i]]`` with ``o_i = sum_{j<i} (end[j] - start[j])``.
    Called by ``alloc_for_spec_decode`` (``allocation.py:746``). ``pool_len`` is the row
    stride of ``req_to_token`` (its second dimension).
    """
    assert req_to_token.shape[1] == pool_len
    for i, (s, e, o) in enumerate(_segments(start_offset, end_offset)):
        if e > s:
            row = int(req_pool_indices[i])
            req_to_token[row, s:e] = out_cache_loc[o : o + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Port of ``assign_extend_cache_locs`` (``kernels/ops/speculative/cache_locs.py:499-531``).

    The inverse direction of :func:`assign_req_to_token_pool_cpu`: row i copies
    ``req_to_token[req_pool_indices[i], start[i]:end[i]]`` to the packed output
    ``out_cache_loc[o_i : o_i + end[i] - start[i]]``. Called by
    ``assign_extend_cache_locs_func`` (``cache_locs.py:763``, verify slots) and
    ``fill_front_out_cache_loc_func`` (``cache_locs.py:740``, topk>1 accepted-path targets).
    """
    assert req_to_token.shape[1] == pool_len
    for i, (s, e, o) in enumerate(_segments(start_offset, end_offset)):
        if e > s:
            row = int(req_pool_indices[i])
            out_cache_loc[o : o + e - s] = req_to_token[row, s:e].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_cols: int,
) -> None:
    """Port of ``assign_draft_cache_locs_contiguous``
    (``kernels/ops/speculative/cache_locs.py:42-82``).

    Request i copies its ``topk * num_cols`` slots from ``seq_lens[i]`` on:
    ``out_cache_loc[i*w : (i+1)*w] = req_to_token[req_pool_indices[i], L_i : L_i + w]`` with
    ``w = topk * num_cols``. (The CPU call passes no positions: ``cache_locs.py:97-108``.)
    Called by ``prepare_for_draft`` (``speculative/eagle_worker_common.py:287``).
    """
    assert req_to_token.shape[1] == pool_len
    width = topk * num_cols
    if width == 0 or seq_lens.numel() == 0:
        return
    rows = req_pool_indices.to(torch.int64)
    cols = seq_lens.to(torch.int64).view(-1, 1) + torch.arange(width, device=seq_lens.device)
    gathered = req_to_token[rows.view(-1, 1), cols]
    out_cache_loc[: rows.numel() * width] = gathered.reshape(-1).to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    """Port of ``fill_bonus_tokens`` (``kernels/ops/speculative/eagle.py:13-29``).

    ``bonus_tokens[i] = accept_tokens.flat[accept_stride * i + accept_lens[i] - 1]``: the last
    accepted token of request i (``accept_lens`` counts the bonus token). Called by
    ``run_eagle_verify`` (``speculative/eagle_worker_common.py:748``).
    """
    bs = accept_lens.numel()
    if bs == 0:
        return
    flat = accept_tokens.reshape(-1)
    idx = (
        torch.arange(bs, device=accept_lens.device) * accept_stride
        + accept_lens.to(torch.int64)
        - 1
    )
    bonus_tokens[:bs] = flat[idx].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    accept_out_cache_loc: torch.Tensor,
) -> None:
    """Port of ``fill_accept_out_cache_loc`` (``kernels/ops/speculative/eagle.py:55-70``).

    Over the flattened ``accept_index`` (``-1`` = not accepted), entry p with ``src =
    accept_index[p] > -1`` writes ``out_cache_loc[src]`` to ``accept_out_cache_loc[dst]``, where
    ``dst`` counts the entries ``!= -1`` before p (a stream compaction). Called by
    ``move_accept_tokens_to_target_kvcache`` (``speculative/spec_utils.py:901``) for topk>1.
    """
    flat = accept_index.reshape(-1).to(torch.int64)
    if flat.numel() == 0:
        return
    counted = (flat != -1).to(torch.int64)
    dst = torch.cumsum(counted, 0) - counted
    write = flat > -1
    accept_out_cache_loc[dst[write]] = out_cache_loc[flat[write]].to(accept_out_cache_loc.dtype)
