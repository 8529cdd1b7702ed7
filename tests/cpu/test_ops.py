"""Unit tests of the pure-torch ``sgl_kernel`` CPU op ports (specfsm_cpu.ops).

Independent reference: SGLang 0.5.23's own Triton kernel of the same name, run in Triton's CPU
interpreter (``TRITON_INTERPRET=1``) in one subprocess per test module (the interpreter must be
on before anything imports triton; see ``_triton_reference.py``). ``copy_all_layer_kv_cache_tiled``
dereferences raw pointers, which the interpreter cannot do; its reference is a naive row-by-row
copy written from the kernel's semantics. The tree tests build their inputs with SGLang's own
draft bookkeeping (``select_top_k_tokens`` + ``organize_draft_results``).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")

from specfsm_cpu import ops  # noqa: E402

EAGLE = "sglang.kernels.ops.speculative.eagle"
CACHE_LOCS = "sglang.kernels.ops.speculative.cache_locs"
ALLOCATION = "sglang.srt.mem_cache.allocation"
SPEC_TREE = "sglang.kernels.ops.speculative.spec_tree"
GATHER = "sglang.kernels.ops.speculative.gather_spec_extras"


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _clone(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


# ---------------------------------------------------------------- inputs (deterministic) ----


def bonus_inputs(seed: int) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    bs, width = 1 + seed, 4
    accept_tokens = torch.randint(0, 1000, (bs, width), generator=g)
    accept_lens = torch.randint(1, width + 1, (bs,), generator=g, dtype=torch.int32)
    return accept_tokens, accept_lens, torch.full((bs,), -7, dtype=torch.int32), width


def accept_loc_inputs(seed: int) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    bs, width, T = 1 + seed, 3, 8
    accept_index = torch.full((bs, width), -1, dtype=torch.int32)
    for b in range(bs):
        n = int(torch.randint(1, width + 1, (1,), generator=g))
        nodes = torch.randperm(T, generator=g)[:n].sort().values + b * T
        accept_index[b, :n] = nodes.to(torch.int32)
    out_cache_loc = torch.randperm(bs * T + 50, generator=g)[: bs * T].to(torch.int64)
    return accept_index, out_cache_loc, torch.zeros(accept_index.numel(), dtype=torch.int64)


def _table(g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 10_000, (6, 64), generator=g, dtype=torch.int32)


DRAFT_LOC_PARAMS = [(0, 1, 3), (1, 4, 2), (2, 2, 5), (3, 1, 4)]  # (seed, topk, num_cols)


def draft_loc_inputs(seed: int, topk: int, num_cols: int) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    r2t = _table(g)
    bs = 3
    rpi = torch.randperm(r2t.shape[0], generator=g)[:bs].to(torch.int64)
    seq_lens = torch.randint(0, 30, (bs,), generator=g, dtype=torch.int64)
    out = torch.full((bs * topk * num_cols,), -1, dtype=torch.int64)
    return rpi, r2t, seq_lens, out, r2t.shape[1], topk, num_cols


def ragged_inputs(seed: int, *, extend: bool) -> tuple[Any, ...]:
    """(req_pool_indices, req_to_token, start, end, out_cache_loc, pool_len)."""
    g = torch.Generator().manual_seed(seed)
    r2t = _table(g)
    bs = 1 + seed
    rpi = torch.randperm(r2t.shape[0], generator=g)[:bs].to(torch.int64)
    start = torch.randint(0, 30, (bs,), generator=g, dtype=torch.int64)
    end = start + torch.randint(0, 9, (bs,), generator=g, dtype=torch.int64)
    n = int((end - start).sum())
    if extend:
        out = torch.full((n + 3,), -1, dtype=torch.int64)
    else:
        out = torch.randint(0, 10_000, (n,), generator=g)
    return rpi, r2t, start, end, out, r2t.shape[1]


def draft_tree(seed: int, bs: int, topk: int, steps: int, num_draft: int) -> tuple[Any, ...]:
    """(parent_list, top_scores_index, draft_tokens) from SGLang's own draft bookkeeping over
    random draft distributions."""
    import torch._dynamo
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    g = torch.Generator().manual_seed(seed)

    def topk_of(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(torch.randn(rows, 50, generator=g) * 3, dim=-1)
        top = torch.topk(probs, topk, dim=-1)
        return top.values, top.indices

    topk_p, topk_index = topk_of(bs)
    scores = None
    score_list, token_list, parents_list = [], [], []
    with torch._dynamo.config.patch(disable=True):
        for i in range(steps):
            _, _, scores, info = select_top_k_tokens(i, topk_p, topk_index, None, scores, topk)
            score_list.append(info[0])
            token_list.append(info[1])
            parents_list.append(info[2])
            if i < steps - 1:
                topk_p, topk_index = topk_of(bs * topk)
    return organize_draft_results(score_list, token_list, parents_list, num_draft)


TREE_SHAPES = [(1, 2, 3), (4, 2, 8), (4, 3, 10), (2, 3, 6), (1, 1, 2)]  # (topk, steps, T)
SEQ_LENS = [5, 9, 2, 7]


def build_tree_inputs(topk: int, steps: int, T: int, mode: int, bs: int = 3) -> tuple[Any, ...]:
    parent_list, top_scores_index, _ = draft_tree(topk * 10 + steps, bs, topk, steps, T)
    seq_lens = torch.tensor(SEQ_LENS[:bs], dtype=torch.long)
    n = int(seq_lens.sum()) * T + T * T * bs if mode == 0 else T * T * bs
    retrieve = torch.full((3, bs, T), -1, dtype=torch.long)
    return (
        parent_list,
        top_scores_index,
        seq_lens,
        torch.full((n,), True),
        torch.full((bs * T,), -5, dtype=torch.long),
        retrieve[0].clone(),
        retrieve[1].clone(),
        retrieve[2].clone(),
        topk,
        steps,
        T,
        mode,
    )


def verify_inputs(topk: int, steps: int, T: int, seed: int) -> tuple[Any, ...]:
    bs = 4
    parent_list, top_scores_index, draft_tokens = draft_tree(seed, bs, topk, steps, T)
    tree = list(build_tree_inputs(topk, steps, T, 1, bs))
    tree[0], tree[1] = parent_list, top_scores_index
    ops.build_tree_kernel_efficient_cpu(*tree)
    r_index, r_next, r_sib = tree[5], tree[6], tree[7]
    g = torch.Generator().manual_seed(seed)
    candidates = torch.cat([torch.randint(0, 50, (bs, 1), generator=g), draft_tokens], dim=1)
    # Targets mostly agree with some child, so that paths of several lengths get accepted.
    rng = random.Random(seed)
    target = torch.randint(0, 50, (bs, T), generator=g)
    for b in range(bs):
        for node in range(T):
            kids, child = [], int(r_next[b, node])
            while child != -1:
                kids.append(child)
                child = int(r_sib[b, child])
            if kids and rng.random() < 0.8:
                target[b, node] = candidates[b, rng.choice(kids)]
    return (
        torch.full((bs * T,), -3, dtype=torch.int32),  # predicts
        torch.full((bs, steps + 1), -1, dtype=torch.int32),  # accept_index
        torch.full((bs,), -2, dtype=torch.int32),  # accept_token_num
        candidates,
        r_index,
        r_next,
        r_sib,
        target,
    )


def gather_inputs(with_hidden: bool) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(1)
    return (
        torch.tensor([3, 0, 8, 3], dtype=torch.int64),
        torch.rand(9, 4, generator=g),
        torch.randint(0, 1000, (9, 4), generator=g),
        torch.randint(0, 1000, (9,), generator=g),
        torch.randn(9, 16, generator=g) if with_hidden else None,
    )


# ------------------------------------------------- the reference (Triton interpreter) ----


def reference_cases() -> dict[str, tuple[str, Any, tuple[Any, ...], tuple[int, ...]]]:
    """case id -> (kernel "module:attr", grid or None for a Python launcher, args, outputs)."""
    cases: dict[str, tuple[str, Any, tuple[Any, ...], tuple[int, ...]]] = {}
    for seed in range(5):
        a = bonus_inputs(seed)
        cases[f"bonus-{seed}"] = (f"{EAGLE}:fill_bonus_tokens", (a[0].shape[0],), a, (2,))
        a = accept_loc_inputs(seed)
        size = a[0].numel()
        cases[f"accept-{seed}"] = (
            f"{EAGLE}:fill_accept_out_cache_loc",
            (size,),
            (*a, _next_pow2(size)),
            (2,),
        )
    for p in DRAFT_LOC_PARAMS:
        a = draft_loc_inputs(*p)
        cases[f"draft-loc-{p}"] = (
            f"{CACHE_LOCS}:assign_draft_cache_locs_contiguous",
            (a[2].numel(),),
            a,
            (3,),
        )
    for seed in range(4):
        a = ragged_inputs(seed, extend=True)
        bs = a[0].numel()
        cases[f"extend-{seed}"] = (
            f"{CACHE_LOCS}:assign_extend_cache_locs",
            (bs,),
            (*a, _next_pow2(bs)),
            (4,),
        )
        a = ragged_inputs(seed, extend=False)
        cases[f"r2t-{seed}"] = (
            f"{ALLOCATION}:assign_req_to_token_pool",
            (bs,),
            (*a, _next_pow2(bs)),
            (1,),
        )
    for shape in TREE_SHAPES:
        for mode in (0, 1):
            a = build_tree_inputs(*shape, mode)
            cases[f"tree-{shape}-{mode}"] = (
                f"{SPEC_TREE}:sgl_build_tree_kernel_triton",
                None,
                a,
                (3, 4, 5, 6, 7),
            )
        for seed in range(3):
            a = verify_inputs(*shape, seed)
            cases[f"verify-{shape}-{seed}"] = (
                f"{SPEC_TREE}:verify_tree_greedy_triton",
                None,
                a,
                (0, 1, 2),
            )
    return cases


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Every reference case run once, in one Triton-interpreter subprocess."""
    tmp = tmp_path_factory.mktemp("triton_reference")
    torch.save(reference_cases(), tmp / "in.pt")
    env = dict(os.environ, TRITON_INTERPRET="1", TORCHDYNAMO_DISABLE="1", SPECFSM_SGLANG_CPU="1")
    script = Path(__file__).with_name("_triton_reference.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp / "in.pt"), str(tmp / "out.pt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(tmp / "out.pt", weights_only=False)  # type: ignore[no-any-return]


def _assert_equal(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b), (a, b)


# ------------------------------------------------------------------------------ tests ----


@pytest.mark.parametrize("seed", range(5))
def test_fill_bonus_tokens(seed: int, reference: dict[str, list[Any]]) -> None:
    """fill_bonus_tokens_cpu equals the Triton ``fill_bonus_tokens`` (interpreter)."""
    a = _clone(bonus_inputs(seed))
    ops.fill_bonus_tokens_cpu(*a)
    _assert_equal([a[2]], reference[f"bonus-{seed}"])


@pytest.mark.parametrize("seed", range(5))
def test_fill_accept_out_cache_loc(seed: int, reference: dict[str, list[Any]]) -> None:
    """fill_accept_out_cache_loc_cpu equals the Triton ``fill_accept_out_cache_loc``."""
    a = _clone(accept_loc_inputs(seed))
    ops.fill_accept_out_cache_loc_cpu(*a)
    _assert_equal([a[2]], reference[f"accept-{seed}"])


@pytest.mark.parametrize("params", DRAFT_LOC_PARAMS)
def test_assign_draft_cache_locs_contiguous(
    params: tuple[int, int, int], reference: dict[str, list[Any]]
) -> None:
    """assign_draft_cache_locs_contiguous_cpu equals its Triton kernel."""
    a = _clone(draft_loc_inputs(*params))
    ops.assign_draft_cache_locs_contiguous_cpu(*a)
    _assert_equal([a[3]], reference[f"draft-loc-{params}"])


@pytest.mark.parametrize("seed", range(4))
def test_assign_extend_cache_locs(seed: int, reference: dict[str, list[Any]]) -> None:
    """assign_extend_cache_locs_cpu equals the Triton ``assign_extend_cache_locs``."""
    a = _clone(ragged_inputs(seed, extend=True))
    ops.assign_extend_cache_locs_cpu(*a)
    _assert_equal([a[4]], reference[f"extend-{seed}"])


@pytest.mark.parametrize("seed", range(4))
def test_assign_req_to_token_pool(seed: int, reference: dict[str, list[Any]]) -> None:
    """assign_req_to_token_pool_cpu equals the Triton ``assign_req_to_token_pool``."""
    a = _clone(ragged_inputs(seed, extend=False))
    ops.assign_req_to_token_pool_cpu(*a)
    _assert_equal([a[1]], reference[f"r2t-{seed}"])


@pytest.mark.parametrize("mode", [0, 1], ids=["FULL_MASK", "QLEN_ONLY"])
@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_build_tree_kernel_efficient(
    shape: tuple[int, int, int], mode: int, reference: dict[str, list[Any]]
) -> None:
    """build_tree_kernel_efficient_cpu equals ``sgl_build_tree_kernel_triton``."""
    a = _clone(build_tree_inputs(*shape, mode))
    ops.build_tree_kernel_efficient_cpu(*a)
    _assert_equal([a[i] for i in (3, 4, 5, 6, 7)], reference[f"tree-{shape}-{mode}"])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_verify_tree_greedy(
    shape: tuple[int, int, int], seed: int, reference: dict[str, list[Any]]
) -> None:
    """verify_tree_greedy_cpu equals ``verify_tree_greedy_triton``."""
    a = _clone(verify_inputs(*shape, seed))
    ops.verify_tree_greedy_cpu(*a)
    _assert_equal([a[0], a[1], a[2]], reference[f"verify-{shape}-{seed}"])
    accepted = a[2]
    assert (accepted >= 0).all() and (accepted <= shape[1]).all()


def test_build_tree_of_a_chain_is_causal() -> None:
    """Independent of any kernel: a topk=1 draft is a chain; its QLEN_ONLY mask is the lower
    triangle, positions count up from the prefix length, next_token links the chain."""
    bs, steps = 2, 3
    T = steps + 1
    parent_list, top_scores_index, _ = draft_tree(7, bs, 1, steps, T)
    a = list(build_tree_inputs(1, steps, T, 1, bs))
    a[0], a[1] = parent_list, top_scores_index
    ops.build_tree_kernel_efficient_cpu(*a)
    tril = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.equal(a[3].view(bs, T, T), tril.expand(bs, T, T))
    assert a[4].view(bs, T).tolist() == [[5, 6, 7, 8], [9, 10, 11, 12]]
    assert a[6].tolist() == [[1, 2, 3, -1]] * bs
    assert (a[7] == -1).all()


def test_copy_all_layer_kv_cache_against_a_naive_row_copy() -> None:
    """copy_all_layer_kv_cache_cpu equals a naive row copy, overlapping rows included."""
    g = torch.Generator().manual_seed(0)
    buffers = [
        torch.randn(40, 2, 8, generator=g),
        torch.randn(40, 3, generator=g).to(torch.bfloat16),
        torch.randint(0, 100, (40, 5), generator=g, dtype=torch.int32),
    ]
    before = [b.clone() for b in buffers]
    # Targets overlap sources (6 and 7 swap): the kernel reads every source row first.
    src = torch.tensor([6, 7, 3, 20, 39], dtype=torch.int64)
    tgt = torch.tensor([7, 6, 25, 3, 0], dtype=torch.int64)
    data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers])
    ops.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)
    for buf, old in zip(buffers, before, strict=True):
        want = old.clone()
        for t, s in zip(tgt.tolist(), src.tolist(), strict=True):
            want[t] = old[s]
        assert torch.equal(buf, want)
    ops.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt[:0], src[:0])  # empty: no-op
    for buf, old in zip(buffers, before, strict=True):
        assert not torch.equal(buf, old)


@pytest.mark.parametrize("with_hidden", [True, False])
def test_gather_spec_extras_torch_gather(with_hidden: bool) -> None:
    """The overlap-mode row gather against a naive per-row loop (the Triton
    ``_gather_rows_kernel`` takes its row widths as runtime ints the interpreter mishandles
    for 1-D buffers, so it is not the reference here)."""
    from specfsm_cpu.hooks import gather_rows

    idx, *bufs = gather_inputs(with_hidden)
    got = gather_rows(idx, *bufs)
    for out, buf in zip(got, bufs, strict=True):
        if buf is None:
            assert out is None
            continue
        want = torch.stack([buf[i] for i in idx.tolist()])
        assert torch.equal(out, want)
        assert out.data_ptr() != buf.data_ptr()  # new tensors, like the kernel's outputs
