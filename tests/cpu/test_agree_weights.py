"""Draft/target agreement weights (benchmarks/gpu/agree_weights.py): the offline agreement
computation at small sizes, and the real SGLang 0.5.23 CPU engine with dummy weights rewritten
by the loader hook (installed by a sitecustomize.py on PYTHONPATH, as on the GPU box): the
target is the bigram x -> sigma(x), an EAGLE v1 draft agrees on every token (``full``) or on a
known fraction (``mid``); greedy outputs equal the no-speculation engine's."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
#: The lines benchmarks/gpu/sitecustomize.py gets for the GPU box, where run_on_device.sh copies
#: agree_weights.py and agree_math.py next to it; written here, with that copy, into a temp
#: folder on PYTHONPATH so that SGLang's spawned scheduler process installs the hook.
SITE_LINES = """\
import os

if os.environ.get("SPECFSM_AGREE"):  # bigram target + agreeing draft (agree_weights.py, copied
    __import__("agree_weights").install_hook()  # next to this file by run_on_device.sh)
"""


def _load_agree_weights() -> ModuleType:
    if "agree_weights" in sys.modules:
        return sys.modules["agree_weights"]
    spec = importlib.util.spec_from_file_location(
        "agree_weights", ROOT / "benchmarks" / "gpu" / "agree_weights.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agree_weights"] = module
    spec.loader.exec_module(module)
    return module


aw = _load_agree_weights()


# ------------------------------------------------------------------------------ unit tests


def test_fast_agreement_equals_literal_draft_computation() -> None:
    """The O(vocab k) agreement equals argmax(lm_head @ fc [E x, 0]) == sigma(x) computed as
    written, for the identity (1.0) and several subspace sizes."""
    vocab, hidden, seed = 512, 64, 7
    emb = aw.embeddings(seed, vocab, hidden)
    sigma = aw.permutation(seed, vocab)
    head = aw.head_weight(emb, sigma)
    tokens = aw.sample_tokens(vocab, vocab, seed)
    rates = []
    for k in (None, 4, 8, 12, 16):
        rate = aw.Rate("full", None) if k is None else aw.Rate(f"k{k}", k)
        fc = aw.fc_weight(seed, hidden, rate)
        assert fc.shape == (hidden, 2 * hidden) and not fc[:, hidden:].any()
        fast = aw.agreement(emb, k, seed, tokens)
        assert fast == aw.agreement_literal(emb, head, sigma, fc, tokens)
        rates.append(fast)
    assert rates[0] == 1.0
    assert rates[1:] == sorted(rates[1:]) and 0.0 < rates[1] < rates[-1] < 1.0


def test_mid_rate_of_the_tiny_models_is_about_two_thirds() -> None:
    """``mid`` at the test bed's sizes (vocab 1024, hidden 128) agrees on 0.55..0.75 of tokens."""
    from specfsm_testbed import models

    rate = aw.parse_rate("mid", models.VOCAB, models.HIDDEN)
    emb = aw.embeddings(0, models.VOCAB, models.HIDDEN)
    p = aw.agreement(emb, rate.k, 0, torch.arange(models.VOCAB))
    assert 0.55 <= p <= 0.75


def test_construction_ignores_torch_default_dtype() -> None:
    """Under a bf16 default dtype (SGLang's loader context) the tensors are the fp32 ones."""
    vocab, hidden, rate = 256, 32, aw.Rate("k4", 4)
    ref = (aw.embeddings(3, vocab, hidden), aw.fc_weight(3, hidden, rate))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        got = (aw.embeddings(3, vocab, hidden), aw.fc_weight(3, hidden, rate))
        eye = aw.fc_weight(3, hidden, aw.Rate("full", None))
    finally:
        torch.set_default_dtype(old)
    assert all(
        g.dtype == torch.float32 and torch.equal(g, r) for g, r in zip(got, ref, strict=True)
    )
    assert eye.dtype == torch.float32


def test_bad_rates_and_sharded_or_eagle3_models_are_refused() -> None:
    """Unknown rate names, tp_size > 1 (sharded o_proj) and EAGLE-3 drafts raise ValueError."""
    for bad in ("half", "k0", f"k{aw.K_MAX + 1}"):
        with pytest.raises(ValueError):
            aw.parse_rate(bad, 1024, 1024)
    with pytest.raises(ValueError, match="no calibrated k"):
        aw.parse_rate("mid", 1000, 64)

    class LlamaForCausalLM(torch.nn.Module):
        def __init__(self, o_proj_in: int) -> None:
            super().__init__()
            self.config = SimpleNamespace(
                vocab_size=64,
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                head_dim=8,
            )
            attn = torch.nn.Module()
            attn.o_proj = torch.nn.Linear(o_proj_in, 16, bias=False)
            layer = torch.nn.Module()
            layer.self_attn = attn
            self.model = torch.nn.Module()
            self.model.layers = torch.nn.ModuleList([layer])

    with pytest.raises(ValueError, match="tp_size 1 only"):
        aw.rewrite(LlamaForCausalLM(16), tp_size=2)
    with pytest.raises(ValueError, match="tp_size 1 only"):
        aw.rewrite(LlamaForCausalLM(8))  # o_proj sharded over 2 ranks

    class LlamaForCausalLMEagle3(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match="EAGLE-3"):
        aw.role_of(LlamaForCausalLMEagle3())


def test_cli_writes_the_eagle_v1_draft_config(tmp_path: Path) -> None:
    """``agree_weights.py config DIR`` writes a 1-layer LlamaForCausalLMEagle for Llama-3.1-8B."""
    assert aw._main(["config", str(tmp_path / "d")]) == 0
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle"] and cfg["num_hidden_layers"] == 1
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["tie_word_embeddings"]) == (
        4096,
        128256,
        False,
    )


# ---------------------------------------------------------------------------- engine tests

MAX_NEW_TOKENS = 25  # 1 prefill token + 6 chain verifies of 4 tokens at the full rate
#: name -> (SPECFSM_AGREE, speculative algorithm or None)
RUNS = {"nospec": ("full", None), "full": ("full", "EAGLE"), "mid": ("mid", "EAGLE")}


def _agree_env(site: Path, rate: str) -> contextlib.AbstractContextManager[None]:
    """SPECFSM_AGREE and a PYTHONPATH with the hook's sitecustomize.py, for the engine's
    spawned processes (they copy the environment at spawn); restored afterwards."""
    from specfsm_testbed.fsm import temporary_env

    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return temporary_env({"PYTHONPATH": path, "SPECFSM_AGREE": rate})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Greedy outputs of the no-spec, ``full`` and ``mid`` engines (one at a time, dummy load
    rewritten by the hook)."""
    from specfsm_testbed.engine import default_prompts, generate, make_engine

    site = tmp_path_factory.mktemp("agree_site")
    (site / "sitecustomize.py").write_text(SITE_LINES)
    for name in ("agree_weights.py", "agree_math.py"):  # as run_on_device.sh copies them
        shutil.copy(ROOT / "benchmarks" / "gpu" / name, site)
    prompts = default_prompts(n=4, length=12, seed=0)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, (rate, spec) in RUNS.items():
        with _agree_env(site, rate):
            engine = make_engine(target="llama", spec=spec, load_format="dummy")
        try:
            out[name] = generate(engine, prompts, MAX_NEW_TOKENS)
        finally:
            engine.shutdown()
    return out


def _agree_mask(rate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigma, per-token draft agreement) of the tiny models' construction, seed 0."""
    from specfsm_testbed import models

    vocab, hidden = models.VOCAB, models.HIDDEN
    emb = aw.embeddings(0, vocab, hidden)
    sigma = aw.permutation(0, vocab)
    fc = aw.fc_weight(0, hidden, aw.parse_rate(rate, vocab, hidden))
    draft_pick = (emb @ fc[:, :hidden].T @ aw.head_weight(emb, sigma).T).argmax(dim=1)
    return sigma, draft_pick == sigma


def _predicted_chain(first: int, agree: torch.Tensor, sigma: torch.Tensor, steps: int) -> dict:
    """Verify count and accepted drafts of a chain on the bigram target: from the last
    committed token x the draft's i-th token is right iff it agrees on x, sigma(x), ..."""
    x, generated, verify_ct, correct = first, 1, 0, 0
    hist = [0] * (steps + 1)
    while generated < MAX_NEW_TOKENS:
        acc = 0
        while acc < steps and bool(agree[x]):
            x, acc = int(sigma[x]), acc + 1
        x = int(sigma[x])  # the bonus token
        verify_ct, correct, generated = verify_ct + 1, correct + acc, generated + acc + 1
        hist[acc] += 1
    return {
        "spec_verify_ct": verify_ct,
        "spec_num_correct_drafts": correct,
        "spec_correct_drafts_histogram": hist,
    }


def _accept_per_verify(meta: dict[str, Any]) -> float:
    return 1 + meta["spec_num_correct_drafts"] / meta["spec_verify_ct"]


@pytest.mark.engine
def test_greedy_outputs_are_the_bigram_chain_and_equal_nospec(
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    """No-spec, full and mid engines all output sigma(x), sigma^2(x), ... after the prompt."""
    from specfsm_testbed.engine import default_prompts

    sigma, _ = _agree_mask("full")
    for prompt, *outs in zip(default_prompts(n=4, length=12, seed=0), *runs.values(), strict=True):
        x, chain = prompt[-1], []
        for _ in range(MAX_NEW_TOKENS):
            x = int(sigma[x])
            chain.append(x)
        assert [o["output_ids"] for o in outs] == [chain] * len(RUNS)


@pytest.mark.engine
def test_full_rate_accepts_every_draft_token(runs: dict[str, list[dict[str, Any]]]) -> None:
    """``full``: every verify accepts all 3 drafts (4 tokens per verify, bonus included)."""
    for out in runs["full"]:
        meta = out["meta_info"]
        assert meta["spec_correct_drafts_histogram"] == [0, 0, 0, 6]
        assert _accept_per_verify(meta) == 4.0


@pytest.mark.engine
def test_mid_rate_accepts_what_the_offline_agreement_predicts(
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    """``mid``: each request's verify count and accepted drafts equal the offline prediction,
    and the accept length lies clearly between 1 and 4."""
    sigma, agree = _agree_mask("mid")
    metas = [o["meta_info"] for o in runs["mid"]]
    for out, meta in zip(runs["mid"], metas, strict=True):
        predicted = _predicted_chain(out["output_ids"][0], agree, sigma, steps=3)
        assert {k: meta[k] for k in predicted} == predicted
    mean = sum(m["spec_num_correct_drafts"] for m in metas) / sum(
        m["spec_verify_ct"] for m in metas
    )
    print(
        f"mid: accept length per verify {1 + mean:.3f}; per request "
        f"{[round(_accept_per_verify(m), 3) for m in metas]}; SGLang spec_accept_length "
        f"{[round(m['spec_accept_length'], 3) for m in metas]}"
    )
    assert 1.5 <= 1 + mean <= 3.0
