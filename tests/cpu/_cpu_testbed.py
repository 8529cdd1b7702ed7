"""Shared helpers of the CPU engine tests (fixtures are re-exported by conftest.py).

Engine start costs ~11 s on an idle 2-core machine (more under load), so engines are shared
per MODULE (module-scoped fixtures) and the no-spec reference is computed once per session.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

#: Greedy length: 1 prefill token + 8 verifies of a tree (steps 2 -> 3 tokens) or 6 verifies of
#: a chain (steps 3 -> 4 tokens), so no verify is cut short by max_new_tokens.
MAX_NEW_TOKENS = 25


def prompts() -> list[list[int]]:
    from specfsm_testbed.engine import default_prompts

    return default_prompts(n=4, length=12, seed=0)


def hf_greedy(target: str, prompt_ids: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Independent reference: transformers' LlamaForCausalLM, full-recompute argmax loop."""
    import torch
    from specfsm_testbed import models
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(models.target_path(target)), dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for p in prompt_ids:
            ids = torch.tensor([p])
            for _ in range(max_new_tokens):
                nxt = model(ids).logits[0, -1].argmax()
                ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
            out.append(ids[0, len(p) :].tolist())
    return out


@pytest.fixture(scope="session")
def hf_reference() -> dict[str, list[list[int]]]:
    return {t: hf_greedy(t, prompts(), MAX_NEW_TOKENS) for t in ("llama", "bigram")}


def start_engine(**kwargs: Any) -> Any:
    from specfsm_testbed.engine import make_engine

    t0 = time.perf_counter()
    engine = make_engine(**kwargs)
    engine._specfsm_start_s = time.perf_counter() - t0
    return engine


@pytest.fixture(scope="session")
def nospec_outputs() -> list[dict[str, Any]]:
    """The no-spec engine's greedy outputs on :func:`prompts` (engine shut down afterwards)."""
    from specfsm_testbed.engine import generate

    engine = start_engine(target="llama")
    try:
        return generate(engine, prompts(), MAX_NEW_TOKENS)
    finally:
        engine.shutdown()


def engine_per_param(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Body of a module-scoped, parametrized engine fixture: ``request.param`` is the
    ``make_engine`` kwargs; the engine is shut down before the next param's starts."""
    engine = start_engine(**request.param)
    try:
        yield engine
    finally:
        engine.shutdown()
