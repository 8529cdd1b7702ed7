"""The sync-free prefill tail tokens (`compat.sync_free_prefill_tail`): where the installed
SGLang assigns the next prompt token through a scalar index (0.5.17, a waiting host-to-device
copy on CUDA), the EAGLE worker gets a ``fill_`` write with the same values; where it already
writes with ``fill_`` (0.5.23, this test bed), nothing is replaced, and its values are the
replacement's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
sglang = pytest.importorskip("sglang")
from specfsm_sglang import compat  # noqa: E402


def _assigning_tail_tokens(batch: Any, next_token_ids: Any) -> Any:
    """0.5.17's function, verbatim in its logic."""
    tail_tokens = next_token_ids.to(batch.input_ids.dtype)
    next_prompt_token = batch.chunked_req_next_prompt_token
    if next_prompt_token is not None:
        for i, r in enumerate(batch.reqs):
            if r is batch.chunked_req:
                tail_tokens = tail_tokens.clone()
                tail_tokens[i] = next_prompt_token
                break
    return tail_tokens


def _batch(chunked: int | None) -> SimpleNamespace:
    reqs = [object(), object(), object()]
    return SimpleNamespace(
        input_ids=torch.arange(12, dtype=torch.int64),
        reqs=reqs,
        chunked_req=reqs[chunked] if chunked is not None else None,
        chunked_req_next_prompt_token=41 if chunked is not None else None,
    )


def test_installed_sglang_already_sync_free() -> None:
    """This test bed's SGLang writes with fill_: its worker keeps its own function."""
    from sglang.srt.speculative import eagle_worker_v2

    orig = eagle_worker_v2._eagle_prefill_tail_tokens
    src = (Path(sglang.__file__).parent / "srt" / "speculative" / "eagle_utils.py").read_text()
    assert "tail_tokens[i] = next_prompt_token" not in src
    assert "fill_(next_prompt_token)" in src
    assert compat.sync_free_prefill_tail() is False
    assert eagle_worker_v2._eagle_prefill_tail_tokens is orig


def test_assigning_write_replaced_with_same_values() -> None:
    worker_module = SimpleNamespace(_eagle_prefill_tail_tokens=_assigning_tail_tokens)
    assert compat.sync_free_prefill_tail(worker_module) is True
    new = worker_module._eagle_prefill_tail_tokens
    assert new is not _assigning_tail_tokens
    assert compat.sync_free_prefill_tail(worker_module) is True  # a second worker
    from sglang.srt.speculative.eagle_utils import _eagle_prefill_tail_tokens as installed

    nxt = torch.tensor([7, 8, 9], dtype=torch.int32)
    for chunked in (None, 0, 2):
        want = _assigning_tail_tokens(_batch(chunked), nxt)
        for got in (new(_batch(chunked), nxt), installed(_batch(chunked), nxt)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    assert torch.equal(nxt, torch.tensor([7, 8, 9], dtype=torch.int32))  # input untouched
