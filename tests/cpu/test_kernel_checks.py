"""The CPU op ports are as strict as the GPU kernels they stand for, and the 1-wide verify fix.

Every host-side check a port mirrors (``specfsm_cpu.ops``, module docstring) is made to
fire here on one wrong input, with the kernel's message, before the port writes anything. Then
the H200 bug (SGLang 0.5.17 + sgl_kernel 0.4.5: "Expected 'candidates' to be of type long
(torch.int64)." on the first 1-wide forward) is reproduced on SGLang's own code path without an
engine, and shown fixed by specfsm's ``_build_trivial_verify_input`` hook. The same bug through
a real engine: ``tests/engine/test_int64_candidates.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")

from specfsm_cpu import ops  # noqa: E402
from specfsm_sglang import compat, hooks  # noqa: E402

Args = dict[str, Any]

# ------------------------------------------------------------ verify_tree_greedy_cpu ----


def verify_args() -> Args:
    """Valid inputs: 2 requests, chains of T=3 nodes, 3 accept slots (keyword names of the op)."""
    bs, T = 2, 3
    return {
        "predicts": torch.full((bs * T,), -3, dtype=torch.int32),
        "accept_index": torch.full((bs, T), -1, dtype=torch.int32),
        "accept_token_num": torch.full((bs,), -2, dtype=torch.int32),
        "candidates": torch.tensor([[5, 6, 7], [8, 9, 10]]),
        "retrive_index": torch.arange(bs * T).view(bs, T),
        "retrive_next_token": torch.tensor([[1, 2, -1]] * bs),
        "retrive_next_sibling": torch.full((bs, T), -1),
        "target_predict": torch.tensor([[6, 7, 11], [9, 0, 0]]),
    }


def _set(key: str, make: Callable[[Any], Any]) -> Callable[[Args], None]:
    def mutate(a: Args) -> None:
        a[key] = make(a[key])

    return mutate


def _noncontig(t: Any) -> Any:
    """Same shape and dtype, not contiguous (every other column of a wider tensor)."""
    wide = torch.stack([t, t], dim=-1).flatten(-2)
    return wide[..., ::2]


# (id, mutation, expected message: a prefix of the kernel's text)
VERIFY_CASES: list[tuple[str, Callable[[Args], None], str]] = [
    # eagle_utils.cu (AOT, sgl_kernel 0.4.5, SGLang 0.5.17 on the H200)
    (
        "candidates-int32",
        _set("candidates", lambda t: t.to(torch.int32)),
        "Expected 'candidates' to be of type long (torch.int64).",
    ),
    (
        "retrive_index-int32",
        _set("retrive_index", lambda t: t.to(torch.int32)),
        "Expected 'retrive_index' to be of type long (torch.int64).",
    ),
    (
        "retrive_next_token-int32",
        _set("retrive_next_token", lambda t: t.to(torch.int32)),
        "Expected 'retrive_next_token' to be of type long (torch.int64).",
    ),
    (
        "retrive_next_sibling-int32",
        _set("retrive_next_sibling", lambda t: t.to(torch.int32)),
        "Expected 'retrive_next_sibling' to be of type long (torch.int64).",
    ),
    (
        "target_predict-int32",
        _set("target_predict", lambda t: t.to(torch.int32)),
        "Expected 'target_predict' to be of type long (torch.int64).",
    ),
    (
        "predicts-int64",
        _set("predicts", lambda t: t.to(torch.int64)),
        "Expected 'predicts' to be of type int (torch.int32).",
    ),
    (
        "accept_index-int64",
        _set("accept_index", lambda t: t.to(torch.int64)),
        "Expected 'accept_index' to be of type int (torch.int32).",
    ),
    (
        "accept_token_num-int64",
        _set("accept_token_num", lambda t: t.to(torch.int64)),
        "Expected 'accept_token_num' to be of type int (torch.int32).",
    ),
    ("candidates-strided", _set("candidates", _noncontig), "candidates must be contiguous"),
    (
        "target_predict-strided",
        _set("target_predict", _noncontig),
        "target_predict must be contiguous",
    ),
    (
        "candidates-other-device",
        _set("candidates", lambda t: t.to("meta")),
        "CHECK_EQ(candidates.device(), device) failed. meta vs cpu",
    ),
    ("predicts-2d", _set("predicts", lambda t: t.view(2, 3)), "predicts must be a 1D tensor"),
    (
        "accept_index-1d",
        _set("accept_index", lambda t: t.flatten()),
        "accept_index must be a 2D tensor",
    ),
    (
        "accept_token_num-2d",
        _set("accept_token_num", lambda t: t.view(2, 1)),
        "accept_token_num must be a 1D tensor",
    ),
    (
        "candidates-1d",
        _set("candidates", lambda t: t.flatten()),
        "candidates must be a 2D tensor",
    ),
    (
        "accept_index-rows",
        _set("accept_index", lambda t: t[:1].clone()),
        "CHECK_EQ(batch_size, accept_index.size(0)) failed. 2 vs 1",
    ),
    (
        "accept_token_num-rows",
        _set("accept_token_num", lambda t: t[:1].clone()),
        "CHECK_EQ(batch_size, accept_token_num.size(0)) failed. 2 vs 1",
    ),
    (
        "target_predict-rows",
        _set("target_predict", lambda t: t[:1].clone()),
        "CHECK_EQ(batch_size, target_predict.size(0)) failed. 2 vs 1",
    ),
    (
        "retrive_next_token-cols",
        _set("retrive_next_token", lambda t: t[:, :2].clone()),
        "CHECK_EQ(num_draft_tokens, retrive_next_token.size(1)) failed. 3 vs 2",
    ),
    # tree.cuh (JIT, SGLang 0.5.23) only
    (
        "accept_index-strided",
        _set("accept_index", _noncontig),
        "Tensor match failed for accept_index: Tensor is not contiguous as expected",
    ),
    (
        "predicts-numel",
        _set("predicts", lambda t: t[:5].clone()),
        "Tensor match failed for predicts: Size mismatch for shape#0: expected 6 but got 5",
    ),
    (
        "accept_index-no-slots",
        _set("accept_index", lambda t: t[:, :0].clone()),
        "CHECK_HOST(draft_tokens.unwrap() > 0 && spec_tokens.unwrap() > 0) failed",
    ),
]


def test_verify_tree_greedy_valid_inputs_pass() -> None:
    """The valid baseline passes every check and accepts both chains as far as they match."""
    a = verify_args()
    ops.verify_tree_greedy_cpu(**a)
    assert a["accept_token_num"].tolist() == [2, 1]
    assert a["accept_index"].tolist() == [[0, 1, 2], [3, 4, -1]]


@pytest.mark.parametrize(
    ("mutate", "message"), [pytest.param(*c[1:], id=c[0]) for c in VERIFY_CASES]
)
def test_verify_tree_greedy_check_fires(mutate: Callable[[Args], None], message: str) -> None:
    """One wrong input: the kernel's RuntimeError, raised before any output is written."""
    a = verify_args()
    mutate(a)
    outputs = {k: a[k].clone() for k in ("predicts", "accept_index", "accept_token_num")}
    with pytest.raises(RuntimeError) as err:
        ops.verify_tree_greedy_cpu(**a)
    assert str(err.value).startswith(message), str(err.value)
    for k, before in outputs.items():
        assert torch.equal(a[k], before), k


# ---------------------------------------------------- build_tree_kernel_efficient_cpu ----


def tree_args(mode: int = 1) -> Args:
    """Valid inputs: 2 requests, a topk=1 depth=2 chain of T=3 nodes, QLEN_ONLY by default."""
    bs, T = 2, 3
    retrieve = torch.full((3, bs, T), -1)
    return {
        "parent_list": torch.tensor([[-1, 0]] * bs),
        "selected_index": torch.tensor([[0, 1]] * bs),
        "verified_seq_len": torch.tensor([4, 6]),
        "tree_mask": torch.full((bs * T * T,) if mode else (10 * T + bs * T * T,), True),
        "positions": torch.full((bs * T,), -5),
        "retrieve_index": retrieve[0].clone(),
        "retrieve_next_token": retrieve[1].clone(),
        "retrieve_next_sibling": retrieve[2].clone(),
        "topk": 1,
        "depth": 2,
        "draft_token_num": T,
        "tree_mask_mode": mode,
    }


def _put(key: str, value: Any) -> Callable[[Args], None]:
    return _set(key, lambda _: value)


def _wide_tree(a: Args, T: int) -> None:
    """A QLEN_ONLY_BITPACKING tree of T nodes whose tensors all have T's shapes."""
    bs = int(a["verified_seq_len"].shape[0])
    a.update(
        tree_mask_mode=2, draft_token_num=T, tree_mask=torch.zeros(bs * T * 4, dtype=torch.uint8)
    )
    a["selected_index"] = torch.zeros((bs, T - 1), dtype=torch.int64)
    a["positions"] = torch.zeros(bs * T, dtype=torch.int64)
    for key in ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        a[key] = torch.full((bs, T), -1)


TREE_CASES: list[tuple[str, Callable[[Args], None], str]] = [
    ("topk-0", _put("topk", 0), "CHECK_HOST(topk > 0 && depth > 0) failed"),
    ("depth-0", _put("depth", 0), "CHECK_HOST(topk > 0 && depth > 0) failed"),
    (
        "draft_token_num-1025",
        _put("draft_token_num", 1025),
        "CHECK_HOST(draft_token_num > 0 && draft_token_num <= 1024) failed",
    ),
    (
        "mode-3",
        _put("tree_mask_mode", 3),
        "CHECK_HOST(tree_mask_mode >= 0 && tree_mask_mode <= 2) failed",
    ),
    (
        "parent_list-int32",
        _set("parent_list", lambda t: t.to(torch.int32)),
        "Tensor match failed for parent_list: Dtype value [torch.int32] not in the allowed "
        "options: [torch.int64]",
    ),
    (
        "parent_list-1d",
        _set("parent_list", lambda t: t.flatten()),
        "Tensor match failed for parent_list: Tensor dimension mismatch: expected 2 but got 1",
    ),
    (
        "parent_list-rows-not-packed",
        _set("parent_list", lambda t: torch.tensor([[-1, 0, 9]] * 2)[:, :2]),
        "Tensor match failed for parent_list: Size mismatch for stride#0: expected 2 but got 3",
    ),
    (
        "parent_list-width",
        _set("parent_list", lambda t: torch.tensor([[-1, 0, 0]] * 2)),
        "CHECK_HOST(depth == 1 || parent_width.unwrap() == topk * (depth - 1) + 1) failed",
    ),
    (
        "selected_index-cols",
        _set("selected_index", lambda t: t[:, :1].clone()),
        "Tensor match failed for selected_index: Size mismatch for shape#1: expected 2 but got 1",
    ),
    (
        "selected_index-int32",
        _set("selected_index", lambda t: t.to(torch.int32)),
        "Tensor match failed for selected_index: Dtype value [torch.int32]",
    ),
    (
        "verified_seq_len-int32",
        _set("verified_seq_len", lambda t: t.to(torch.int32)),
        "Tensor match failed for verified_seq_len: Dtype value [torch.int32]",
    ),
    (
        "verified_seq_len-rows",
        _set("verified_seq_len", lambda t: t[:1].clone()),
        "Tensor match failed for verified_seq_len: Size mismatch for shape#0: expected 2 but got 1",
    ),
    (
        "retrive_index-strided",
        _set("retrieve_index", _noncontig),
        "Tensor match failed for retrive_index: Tensor is not contiguous as expected",
    ),
    (
        "retrive_next_sibling-int32",
        _set("retrieve_next_sibling", lambda t: t.to(torch.int32)),
        "Tensor match failed for retrive_next_sibling: Dtype value [torch.int32]",
    ),
    (
        "positions-length",
        _set("positions", lambda t: t[:5].clone()),
        "Tensor match failed for positions: Size mismatch for shape#0: expected 6 but got 5",
    ),
    (
        "positions-other-device",
        _set("positions", lambda t: t.to("meta")),
        "Tensor match failed for positions: Device mismatch: expected cpu but got meta",
    ),
    (
        "tree_mask-2d",
        _set("tree_mask", lambda t: t.view(2, -1)),
        "Tensor match failed for tree_mask: Tensor dimension mismatch: expected 1 but got 2",
    ),
    (
        "tree_mask-too-small",
        _set("tree_mask", lambda t: t[:17].clone()),
        "CHECK_HOST(tree_mask.numel() * mask_elem_bytes >= min_mask_bytes) failed",
    ),
    ("bitpacking-over-32", lambda a: _wide_tree(a, 33), "CHECK_HOST(draft_token_num <= 32) failed"),
]


@pytest.mark.parametrize("mode", [0, 1], ids=["FULL_MASK", "QLEN_ONLY"])
def test_build_tree_valid_inputs_pass(mode: int) -> None:
    """The valid baseline passes every check and links the chain 0 -> 1 -> 2."""
    a = tree_args(mode)
    ops.build_tree_kernel_efficient_cpu(**a)
    assert a["retrieve_next_token"].tolist() == [[1, 2, -1]] * 2
    assert a["positions"].tolist() == [4, 5, 6, 6, 7, 8]


@pytest.mark.parametrize(("mutate", "message"), [pytest.param(*c[1:], id=c[0]) for c in TREE_CASES])
def test_build_tree_check_fires(mutate: Callable[[Args], None], message: str) -> None:
    """One wrong input: the JIT kernel's RuntimeError, raised before any output is written."""
    a = tree_args()
    mutate(a)
    outputs = {k: a[k].clone() for k in ("tree_mask", "positions", "retrieve_next_token")}
    with pytest.raises(RuntimeError) as err:
        ops.build_tree_kernel_efficient_cpu(**a)
    assert str(err.value).startswith(message), str(err.value)
    for k, before in outputs.items():
        assert before.is_meta or torch.equal(a[k], before), k  # meta: holds no data


# ------------------------------------------------- the H200 bug without an engine ----


def trivial_verify_input(bonus_tokens: Any) -> Any:
    """SGLang's own ``EAGLEWorkerV2._build_trivial_verify_input`` (the unpatched function) for
    a decode batch of len(bonus_tokens) requests whose previous round left ``bonus_tokens``."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    build = EAGLEWorkerV2._build_trivial_verify_input
    build = getattr(build, "__wrapped__", build)  # the original, even if a hook is applied
    bs = int(bonus_tokens.shape[0])
    backend = SimpleNamespace(verify_mask=None, max_context_len=64)
    worker = SimpleNamespace(
        device="cpu",
        topk=1,
        _target_worker=SimpleNamespace(model_runner=SimpleNamespace(attn_backend=backend)),
    )
    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        spec_info=SimpleNamespace(bonus_tokens=bonus_tokens),
        seq_lens=torch.tensor([7, 9, 4][:bs]),
        seq_lens_sum=None,
        seq_lens_cpu=torch.tensor([7, 9, 4][:bs]),
    )
    return build(worker, batch)


def verify_like_eagle_sample(verify_input: Any, vocab: int = 16) -> Any:
    """The greedy branch of ``eagle_sample`` (``speculative/eagle_utils.py:630-661``, 0.5.23;
    0.5.17 builds the same tensors): candidates from ``draft_token``, int32 outputs, int64 argmax
    targets, then SGLang's ``verify_tree_greedy_func`` (on CPU: the port, via the stub)."""
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_func

    bs, T = int(verify_input.retrieve_index.shape[0]), verify_input.draft_token_num
    logits = torch.randn(bs * T, vocab, generator=torch.Generator().manual_seed(0))
    candidates = verify_input.draft_token.reshape(bs, T)
    predict = torch.zeros(bs * T, dtype=torch.int32)
    accept_index = torch.full((bs, verify_input.max_tree_depth), -1, dtype=torch.int32)
    num_correct = torch.empty((bs,), dtype=torch.int32)
    target_predict = torch.argmax(logits, dim=-1).reshape(bs, T)
    verify_tree_greedy_func(
        predicts=predict,
        accept_index=accept_index,
        accept_token_num=num_correct,
        candidates=candidates,
        retrieve_index=verify_input.retrieve_index,
        retrieve_next_token=verify_input.retrieve_next_token,
        retrieve_next_sibling=verify_input.retrieve_next_sibling,
        target_predict=target_predict,
        topk=verify_input.tree_topk,
    )
    return predict, target_predict


def test_trivial_verify_with_int32_bonus_tokens_fails_like_the_h200() -> None:
    """Without the fix: bonus tokens as a verify leaves them (int32) make the 1-wide verify
    fail in the port with the H200's message (SGLang 0.5.23 and 0.5.17 share this path)."""
    bonus = torch.tensor([3, 11, 5], dtype=torch.int32)  # eagle_worker_common.py:756 (0.5.23)
    verify_input = trivial_verify_input(bonus)
    assert verify_input.draft_token.dtype == torch.int32
    with pytest.raises(RuntimeError, match=r"^Expected 'candidates' to be of type long"):
        verify_like_eagle_sample(verify_input)


def test_trivial_verify_hook_gives_int64_candidates() -> None:
    """With specfsm's AFTER hook on ``_build_trivial_verify_input`` the same verify passes and,
    being 1-wide, commits exactly the target's token per request."""
    verify_input = trivial_verify_input(torch.tensor([3, 11, 5], dtype=torch.int32))
    hooks._after_trivial_verify(verify_input, None, None)
    assert verify_input.draft_token.dtype == torch.int64
    assert verify_input.draft_token.tolist() == [3, 11, 5]
    predict, target = verify_like_eagle_sample(verify_input)
    assert predict.tolist() == target.flatten().tolist()


def test_trivial_verify_hook_is_idempotent() -> None:
    """An int64 (e.g. prefill-born) draft_token is left as the very same tensor; None is
    tolerated."""
    draft = torch.tensor([4, 2])
    result = SimpleNamespace(draft_token=draft)
    hooks._after_trivial_verify(result, None, None)
    hooks._after_trivial_verify(result, None, None)
    assert result.draft_token is draft
    hooks._after_trivial_verify(SimpleNamespace(draft_token=None), None, None)


def test_hook_target_exists_with_the_expected_signature() -> None:
    """``Surface.worker_trivial_verify`` names a method taking (self, batch) in this SGLang."""
    import inspect
    import pkgutil

    target = compat.surface().worker_trivial_verify
    fn = pkgutil.resolve_name(target)
    fn = getattr(fn, "__wrapped__", fn)
    assert list(inspect.signature(fn).parameters) == ["self", "batch"]


def test_keep_int32_switch_undoes_the_fix_on_the_worker() -> None:
    """The test channel's switch (tests only) wraps the worker's already-hooked builder so
    that its candidates are int32 again, as SGLang builds them without the fix."""
    from specfsm_testbed import channel

    def build(batch: object) -> SimpleNamespace:
        result = SimpleNamespace(draft_token=torch.tensor([3, 11, 5], dtype=torch.int32))
        hooks._after_trivial_verify(result, None, batch)
        return result

    worker = SimpleNamespace(_build_trivial_verify_input=build)
    assert worker._build_trivial_verify_input(None).draft_token.dtype == torch.int64
    channel._keep_int32_candidates(worker)
    assert worker._build_trivial_verify_input(None).draft_token.dtype == torch.int32
