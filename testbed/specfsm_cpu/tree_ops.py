"""The two tree kernels' CPU ports and their GPU kernels' host-side input checks.

``build_tree_kernel_efficient_cpu`` and ``verify_tree_greedy_cpu`` (re-exported by
:mod:`specfsm_cpu.ops`, whose docstring says which checks each port carries and where they come
from). The check helpers raise RuntimeError with the kernel's message text, in the kernel's
order, from metadata only (no device sync).
"""

from __future__ import annotations

import torch

__all__ = ["build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu"]

# TreeMaskMode values (kernels/ops/speculative/spec_tree.py:46-49).
_FULL_MASK = 0
_QLEN_ONLY = 1
_QLEN_ONLY_BITPACKING = 2
# The kernels' (and SGLang's keyword) spelling of the three tree-link tensors.
_RETRIEVE_NAMES = ("retrive_index", "retrive_next_token", "retrive_next_sibling")


# ------------------------------------------------ kernel input checks (one place) ----------


def _check(ok: bool, msg: str) -> None:
    """A kernel's host-side check (``TORCH_CHECK``, ``throw std::runtime_error``, tvm-ffi
    ``RuntimeCheck`` / ``CHECK_HOST``): all surface in Python as RuntimeError."""
    if not ok:
        raise RuntimeError(msg)


def _check_input(name: str, t: torch.Tensor, device: torch.device) -> None:
    """``CHECK_INPUT(x)`` (``CHECK_CUDA`` + ``CHECK_CONTIGUOUS``, sgl-kernel
    ``pytorch_extension_utils.h``) followed by ``CHECK_EQ(x.device(), device)``; on CPU the
    CUDA check is the same-device check."""
    _check(t.is_contiguous(), f"{name} must be contiguous")
    _check(t.device == device, f"CHECK_EQ({name}.device(), device) failed. {t.device} vs {device}")


def _check_dim(d: int, name: str, t: torch.Tensor) -> None:
    """``CHECK_DIM(d, x)``."""
    _check(t.dim() == d, f"{name} must be a {d}D tensor")


def _check_eq(lhs: str, rhs: str, a: int, b: int) -> None:
    """``CHECK_EQ(a, b)``."""
    _check(a == b, f"CHECK_EQ({lhs}, {rhs}) failed. {a} vs {b}")


def _check_scalar_type(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    """eagle_utils.cu's ``if (x.scalar_type() != at::kLong / at::kInt) throw ...``."""
    c_name = {torch.int64: "long", torch.int32: "int"}[dtype]
    _check(t.dtype == dtype, f"Expected '{name}' to be of type {c_name} ({dtype}).")


def _match(
    name: str,
    t: torch.Tensor,
    shape: tuple[int | None, ...],
    dtype: torch.dtype | None,
    device: torch.device,
    strides: tuple[int | None, ...] | None = None,
) -> None:
    """``TensorMatcher(shape).with_strides(...).with_dtype<T>().with_device(d).verify(x)`` of the
    JIT kernels (``kernels/jit/include/sgl_kernel/tensor.h``, ``m_verify_impl``): rank, sizes
    (None: free), strides (None: free; a size-1 dimension's stride is not checked) or, without
    ``strides``, contiguity; dtype; device. Message: the kernel's root cause, naming ``name``
    (the kernel prints the tensor instead)."""
    head = f"Tensor match failed for {name}: "
    _check(
        t.dim() == len(shape),
        f"{head}Tensor dimension mismatch: expected {len(shape)} but got {t.dim()}",
    )
    for i, want in enumerate(shape):
        got = int(t.shape[i])
        _check(
            want is None or got == want,
            f"{head}Size mismatch for shape#{i}: expected {want} but got {got}",
        )
    if strides is None:
        _check(t.is_contiguous(), f"{head}Tensor is not contiguous as expected")
    else:
        for i, want in enumerate(strides):
            got = int(t.stride(i))
            _check(
                want is None or t.shape[i] == 1 or got == want,
                f"{head}Size mismatch for stride#{i}: expected {want} but got {got}",
            )
    if dtype is not None:
        _check(
            t.dtype == dtype,
            f"{head}Dtype value [{t.dtype}] not in the allowed options: [{dtype}]",
        )
    _check(t.device == device, f"{head}Device mismatch: expected {device} but got {t.device}")


def _check_build_tree(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """The host checks of the JIT ``build_tree_kernel_efficient``
    (``kernels/jit/csrc/speculative/tree.cuh``, SGLang 0.5.23), in its order: CHECK_HOST on
    topk / depth / draft_token_num / tree_mask_mode; TensorMatcher on parent_list [bs, W] int64
    (rows packed), W == topk*(depth-1)+1 unless depth == 1; selected_index [bs, T-1] int64
    (rows packed); verified_seq_len [bs], retrive_* [bs, T], positions [bs*T], all int64
    contiguous; tree_mask 1-D contiguous, any 8-bit-multiple dtype, at least the bytes its mode
    writes (QLEN_ONLY bs*T*T, QLEN_ONLY_BITPACKING bs*T*{1,2,4}, FULL_MASK unbounded)."""
    T = draft_token_num
    _check(topk > 0 and depth > 0, "CHECK_HOST(topk > 0 && depth > 0) failed")
    _check(0 < T <= 1024, "CHECK_HOST(draft_token_num > 0 && draft_token_num <= 1024) failed")
    _check(
        0 <= tree_mask_mode <= 2,
        "CHECK_HOST(tree_mask_mode >= 0 && tree_mask_mode <= 2) failed",
    )
    device = parent_list.device
    width = int(parent_list.shape[1]) if parent_list.dim() == 2 else 0
    _match("parent_list", parent_list, (None, None), torch.int64, device, (width or None, 1))
    bs = int(parent_list.shape[0])
    _check(
        depth == 1 or width == topk * (depth - 1) + 1,
        "CHECK_HOST(depth == 1 || parent_width.unwrap() == topk * (depth - 1) + 1) failed",
    )
    sel_stride = None if T == 1 else T - 1
    _match("selected_index", selected_index, (bs, T - 1), torch.int64, device, (sel_stride, 1))
    _match("verified_seq_len", verified_seq_len, (bs,), torch.int64, device)
    for name, t in zip(_RETRIEVE_NAMES, retrieve, strict=True):
        _match(name, t, (bs, T), torch.int64, device)
    _match("positions", positions, (bs * T,), torch.int64, device)
    min_mask_bytes = 0
    if tree_mask_mode == _QLEN_ONLY_BITPACKING:
        _check(T <= 32, "CHECK_HOST(draft_token_num <= 32) failed")
        min_mask_bytes = bs * T * (4 if T > 16 else 2 if T > 8 else 1)
    elif tree_mask_mode == _QLEN_ONLY:
        min_mask_bytes = bs * T * T
    _match("tree_mask", tree_mask, (None,), None, device)
    bits = tree_mask.element_size() * 8
    _check(bits % 8 == 0 and bits > 0, "CHECK_HOST(tree_mask.dtype().bits % 8 == 0) failed")
    _check(
        tree_mask.numel() * tree_mask.element_size() >= min_mask_bytes,
        "CHECK_HOST(tree_mask.numel() * mask_elem_bytes >= min_mask_bytes) failed",
    )


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Port of ``sgl_build_tree_kernel_efficient_triton``
    (``kernels/ops/speculative/spec_tree.py:52-208``), the Triton twin of the CUDA-JIT
    ``build_tree_kernel_efficient`` (``kernels/ops/speculative/tree.py:30``).

    Per request b (T = ``draft_token_num``; node 0 is the root = bonus token, node i>0 is
    draft candidate ``selected_index[b, i-1]``; a candidate's parent is found through
    ``parent_list[b, selected_index // topk]``):

    * ``retrieve_index[b, i] = b*T + i``; ``retrieve_next_token[b, parent] = i`` for the
      highest-numbered child, ``retrieve_next_sibling[b, i]`` links the other children (the
      loop runs i = T-1 .. 1, so each parent's first child ends up in ``next_token``);
    * ``positions[b*T + i] = seq_len + depth(i)``;
    * ``tree_mask``: node i sees the root, itself and its ancestors. QLEN_ONLY: a [T, T] block
      per request at ``b*T*T``; FULL_MASK: rows of ``seq_len + T`` columns at
      ``T*T*b + seq_len_prefix_sum*T`` whose first ``seq_len`` columns the caller filled with
      True (``speculative/eagle_utils.py:159-199``).

    ``retrieve_*`` must arrive filled with -1 (``eagle_utils.py:201-204``), as for the kernel.
    Called through ``build_tree_kernel_efficient_func`` (``spec_tree.py:410-424``).

    Checks: those of the JIT ``build_tree_kernel_efficient``
    (``kernels/jit/csrc/speculative/tree.cuh``), see :func:`_check_build_tree`.
    """
    _check_build_tree(
        parent_list,
        selected_index,
        verified_seq_len,
        tree_mask,
        positions,
        (retrieve_index, retrieve_next_token, retrieve_next_sibling),
        topk,
        depth,
        draft_token_num,
        tree_mask_mode,
    )
    if tree_mask_mode not in (_FULL_MASK, _QLEN_ONLY):
        raise NotImplementedError(f"tree_mask_mode={tree_mask_mode} (only FULL_MASK/QLEN_ONLY)")
    T = draft_token_num
    bs = verified_seq_len.numel()
    seq_lens = [int(x) for x in verified_seq_len.tolist()]
    sel_all = selected_index.reshape(bs, -1).tolist()
    par_all = parent_list.reshape(bs, -1).tolist() if parent_list.numel() else [[]] * bs
    mask = tree_mask.reshape(-1)
    prefix_sum = 0
    for b in range(bs):
        seq_len = seq_lens[b]
        sel = sel_all[b]
        par = par_all[b]

        def parent_pos(cand: int, sel: list[int] = sel, par: list[int] = par) -> int | None:
            """Index (0-based in ``sel``) of candidate ``cand``'s parent, -1 = root, None = lost."""
            tb = sel[cand] // topk
            if tb == 0:
                return -1
            parent_token = par[tb]
            for pp in range(T - 1):
                if sel[pp] == parent_token:
                    return pp
            return None

        base = b * T
        positions[base] = seq_len
        for i in range(T - 1, 0, -1):
            retrieve_index[b, i] = base + i
            pos = parent_pos(i - 1)
            if pos is None:
                continue
            parent = pos + 1  # node number
            nxt = int(retrieve_next_token[b, parent])
            retrieve_next_token[b, parent] = i
            if nxt != -1:
                retrieve_next_sibling[b, i] = nxt
        retrieve_index[b, 0] = base

        if tree_mask_mode == _FULL_MASK:
            row_len = seq_len + T
            first = T * T * b + prefix_sum * T + seq_len  # column of node 0 in row 0
        else:
            row_len = T
            first = T * T * b
        for x in range(T):
            row0 = first + row_len * x  # position of node 0 in this row
            mask[row0] = True
            mask[row0 + 1 : row0 + T] = False
            if x == 0:
                continue
            cur, level = x - 1, 0
            for _ in range(depth):
                level += 1
                mask[row0 + 1 + cur] = True
                nxt_pos = parent_pos(cur)
                if nxt_pos is None or nxt_pos == -1:
                    break
                cur = nxt_pos
            positions[base + x] = seq_len + level
        prefix_sum += seq_len


def _check_verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrieve: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    target_predict: torch.Tensor,
) -> None:
    """The host checks of ``verify_tree_greedy``, the union of its two GPU ops:

    * sgl-kernel's AOT op (``sgl-kernel/csrc/speculative/eagle_utils.cu``, ``verify_tree_greedy``;
      what SGLang 0.5.17 calls on CUDA, sgl_kernel 0.4.5), in its order: CHECK_INPUT and
      same-device on candidates, retrive_*, target_predict; CHECK_DIM (predicts 1, accept_index
      2, accept_token_num 1, the five [bs, T] inputs 2); CHECK_EQ of bs and T across them; then
      the dtype throws: predicts / accept_index / accept_token_num int32, candidates / retrive_* /
      target_predict int64 ("Expected 'candidates' to be of type long (torch.int64)." is the
      H200's crash of a 1-wide verify fed int32 bonus tokens);
    * then what only the JIT op of 0.5.23 adds (``kernels/jit/csrc/speculative/tree.cuh``,
      ``verify_tree_greedy``, TensorMatcher): predicts / accept_index / accept_token_num
      contiguous on the same device, ``predicts.numel() == bs * T``, T > 0 and
      ``accept_index.size(1) > 0``.
    """
    device = target_predict.device
    int64_inputs = [
        ("candidates", candidates),
        *zip(_RETRIEVE_NAMES, retrieve, strict=True),
        ("target_predict", target_predict),
    ]
    for name, t in int64_inputs:
        _check_input(name, t, device)
    _check_dim(1, "predicts", predicts)
    _check_dim(2, "accept_index", accept_index)
    _check_dim(1, "accept_token_num", accept_token_num)
    for name, t in int64_inputs:
        _check_dim(2, name, t)
    batch_size = int(candidates.shape[0])
    num_draft_tokens = int(candidates.shape[1])
    _check_eq("batch_size", "accept_index.size(0)", batch_size, int(accept_index.shape[0]))
    _check_eq("batch_size", "accept_token_num.size(0)", batch_size, int(accept_token_num.shape[0]))
    for name, t in int64_inputs[1:]:
        _check_eq("batch_size", f"{name}.size(0)", batch_size, int(t.shape[0]))
    for name, t in int64_inputs[1:]:
        _check_eq("num_draft_tokens", f"{name}.size(1)", num_draft_tokens, int(t.shape[1]))
    _check_scalar_type("predicts", predicts, torch.int32)
    _check_scalar_type("accept_index", accept_index, torch.int32)
    _check_scalar_type("accept_token_num", accept_token_num, torch.int32)
    for name, t in int64_inputs:
        _check_scalar_type(name, t, torch.int64)
    # JIT (tree.cuh) only:
    spec_tokens = int(accept_index.shape[1])
    _match("accept_index", accept_index, (batch_size, spec_tokens), torch.int32, device)
    _match("accept_token_num", accept_token_num, (batch_size,), torch.int32, device)
    _match("predicts", predicts, (batch_size * num_draft_tokens,), torch.int32, device)
    _check(
        num_draft_tokens > 0 and spec_tokens > 0,
        "CHECK_HOST(draft_tokens.unwrap() > 0 && spec_tokens.unwrap() > 0) failed",
    )


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Port of ``verify_tree_greedy_kernel_triton``
    (``kernels/ops/speculative/spec_tree.py:210-324``), the Triton twin of the CUDA-JIT
    ``verify_tree_greedy`` (``kernels/ops/speculative/tree.py:61``).

    Per request b, walk the draft tree from the root: at each level scan the children
    (``next_token`` then ``next_sibling`` links) for the first whose candidate token equals the
    target's greedy token at the last accepted node; accept it (``predicts[last] = target``,
    ``accept_index[b, n] = retrieve_index[child]``) and descend, else stop. Finally
    ``accept_token_num[b]`` = number of accepted draft tokens (bonus excluded) and the bonus
    ``predicts[last] = target_predict[last]``. ``accept_index`` arrives filled with -1
    (``speculative/eagle_utils.py``), as for the kernel. Called through
    ``verify_tree_greedy_func`` (``spec_tree.py:508-519``). Keyword names keep SGLang's
    ``retrive_*`` spelling (the call site passes them by keyword).

    Checks: those of both GPU ops SGLang calls, see :func:`_check_verify_tree_greedy`.
    """
    _check_verify_tree_greedy(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        (retrive_index, retrive_next_token, retrive_next_sibling),
        target_predict,
    )
    bs = candidates.shape[0]
    steps = accept_index.shape[1]
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sib = retrive_next_sibling.tolist()
    tgt = target_predict.reshape(-1).tolist()
    pred = predicts.reshape(-1)
    for b in range(bs):
        last = r_index[b][0]
        accept_index[b, 0] = last
        n_acc = 0
        cur = 0
        for j in range(1, steps):
            cur = r_next[b][cur]
            target_token = tgt[last]
            matched = False
            while cur != -1:
                if cand[b][cur] == target_token:
                    pred[last] = target_token
                    n_acc += 1
                    accept_index[b, n_acc] = r_index[b][cur]
                    last = r_index[b][cur]
                    matched = True
                    break
                cur = r_sib[b][cur]
            if not matched:
                break
            del j
        accept_token_num[b] = n_acc
        pred[last] = tgt[last]
