"""Start real SGLang 0.5.23 engines on CPU with the tiny test-bed models.

``make_engine`` switches the CPU test bed on for this process and the engine's spawned
processes (``SPECFSM_SGLANG_CPU=1`` in ``os.environ`` before the spawn, so the
``specfsm_cpu_boot.pth`` hook boots each child), applies the hooks in this process too
(``ServerArgs`` is resolved here: the overlap switch), and returns a started ``sglang.Engine``.

The calling script needs an ``if __name__ == "__main__":`` guard (SGLang spawns).
Always ``engine.shutdown()`` (or use :func:`engine_session`): engines hold ~2 GB.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

from specfsm_testbed import models

#: Chain drafting: 3 steps, topk 1, 4 verify tokens (bonus + 3 drafts).
CHAIN: dict[str, int] = {
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
#: Tree drafting: 2 steps, topk 4, 8 verify tokens (root + 7 of the 4 + 16 candidates).
TREE: dict[str, int] = {
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 8,
}
SPEC_ALGORITHMS = ("EAGLE3", "EAGLE", "STANDALONE")

#: Engine settings of the test bed (all overridable through ``make_engine(**overrides)``).
BASE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "dtype": "float32",
    "attention_backend": "torch_native",
    "sampling_backend": "pytorch",
    "disable_cuda_graph": True,
    "skip_tokenizer_init": True,
    "mem_fraction_static": 0.3,
    "max_total_tokens": 4096,
    "max_running_requests": 8,
    "chunked_prefill_size": 512,
    "random_seed": 0,
    "log_level": "error",
    # An idle scheduler otherwise polls its sockets in a busy loop (~75% of a core here),
    # which halves the speed of every other engine on a 2-core machine.
    "sleep_on_idle": True,
}


def enable_cpu_testbed() -> None:
    """Switch the CPU test bed on in this process and in every process it spawns from now on."""
    os.environ["SPECFSM_SGLANG_CPU"] = "1"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local paths only: never the hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import specfsm_cpu as cpu
    from specfsm_cpu import boot as cpu_boot

    cpu_boot.boot()
    cpu.enable()


def engine_args(
    target: str = "llama",
    spec: str | None = None,
    tree: bool = False,
    overlap: bool = False,
    agree: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The ``sglang.Engine`` keyword arguments :func:`make_engine` uses."""
    args = dict(BASE_ARGS)
    if agree is not None:
        if agree not in models.AGREE_RATES:
            raise ValueError(f"agree must be one of {models.AGREE_RATES} or None, got {agree!r}")
        target = "agree"
    args["model_path"] = str(models.target_path(target))
    args["disable_overlap_schedule"] = not overlap
    if spec is not None:
        spec = spec.upper()
        if spec not in SPEC_ALGORITHMS:
            raise ValueError(f"spec must be one of {SPEC_ALGORITHMS} or None, got {spec!r}")
        args["speculative_algorithm"] = spec
        args["speculative_draft_model_path"] = str(models.draft_path(spec, target, agree))
        args.update(TREE if tree else CHAIN)
    elif tree:
        raise ValueError("tree=True needs a speculative algorithm")
    args.update(overrides)
    return args


def make_engine(
    target: str = "llama",
    spec: str | None = None,
    tree: bool = False,
    overlap: bool = False,
    agree: str | None = None,
    **overrides: Any,
) -> Any:
    """A started ``sglang.Engine`` on CPU.

    ``target``: ``"llama"``, ``"bigram"`` or ``"agree"``; ``spec``: None (no speculation),
    ``"EAGLE3"``, ``"EAGLE"`` or ``"STANDALONE"`` (an identical copy of the target); ``tree``:
    topk=4 / steps=2 / 8 draft tokens instead of the chain topk=1 / steps=3 / 4 draft tokens;
    ``overlap``: SGLang's overlap scheduler on (``event_loop_overlap``) or off; ``agree``
    (``"full"`` / ``"mid"``, spec ``"EAGLE"`` or None): the agreeing bigram target and an EAGLE
    v1 draft that accepts every draft token / ~0.6 of them (:mod:`.models`; greedy output is
    :func:`.models.agree_chain`, see :class:`AgreeReference`). ``overrides`` go to
    ``sglang.Engine`` as they are (e.g. ``max_running_requests=16``).
    """
    enable_cpu_testbed()
    import sglang

    return sglang.Engine(**engine_args(target, spec, tree, overlap, agree, **overrides))


@contextlib.contextmanager
def engine_session(**kwargs: Any) -> Iterator[Any]:
    """``with engine_session(spec="EAGLE3") as engine:``: :func:`make_engine`, always shut down."""
    engine = make_engine(**kwargs)
    try:
        yield engine
    finally:
        engine.shutdown()


def sampling_params(max_new_tokens: int) -> dict[str, Any]:
    """Greedy, fixed length (``ignore_eos``)."""
    return {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}


def generate(
    engine: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int = 32
) -> list[dict[str, Any]]:
    """Greedy generation for token-id prompts in one batched call; SGLang's output dicts
    (``output_ids`` and ``meta_info`` with ``spec_*`` fields)."""
    out = engine.generate(
        input_ids=[list(map(int, p)) for p in prompts],
        sampling_params=sampling_params(max_new_tokens),
    )
    return list(out)


def generate_greedy(
    engine: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int = 32
) -> list[list[int]]:
    """Greedy output token ids per prompt."""
    return [list(o["output_ids"]) for o in generate(engine, prompts, max_new_tokens)]


class AgreeReference:
    """The no-speculation greedy output of the ``agree`` target, computed without an engine:
    the target is a bigram (its output after token ``x`` is ``sigma(x)`` whatever the context),
    so its greedy continuation is the sigma chain from the prompt's last token (checked against
    the real no-spec engine by tests/cpu/test_agree_weights.py and tests/engine). Same call
    signature as :class:`.refserver.ReferenceServer`."""

    def __init__(self) -> None:
        self.sigma = models.agree_sigma()

    def __call__(
        self, prompts: Sequence[Sequence[int]], max_new: Sequence[int] | int
    ) -> list[list[int]]:
        lens = [max_new] * len(prompts) if isinstance(max_new, int) else list(max_new)
        return [
            models.agree_chain(list(p), int(n), self.sigma)
            for p, n in zip(prompts, lens, strict=True)
        ]


def accept_length(metas: Sequence[dict[str, Any]]) -> float:
    """Tokens per K-wide verify over SGLang ``meta_info`` dicts: 1 + correct drafts / verify
    rounds (1.0 when nothing was verified)."""
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in metas)
    correct = sum(int(m.get("spec_num_correct_drafts") or 0) for m in metas)
    return 1.0 + correct / verify if verify else 1.0


def default_prompts(n: int = 4, length: int = 12, seed: int = 0) -> list[list[int]]:
    """Deterministic token-id prompts (ids 3..VOCAB-1: no BOS/EOS/pad)."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, models.VOCAB) for _ in range(length + i)] for i in range(n)]
