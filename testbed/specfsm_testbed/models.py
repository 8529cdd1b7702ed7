"""Tiny deterministic models for the SGLang CPU test bed (no hub access, ever).

Every model is written from a fixed seed with ``torch.Generator`` (one generator per tensor,
seeded from the model seed and the tensor name, so adding a tensor never changes the others),
as a HuggingFace-style directory (``config.json`` + ``model.safetensors``) that SGLang and
transformers load from the local path. Directories are cached under ``$SPECFSM_CACHE/models``
(default ``~/.cache/specfsm/models``), named ``<kind>-<hash of the recipe>``, written to a
temporary directory and renamed into place (safe under concurrent writers).

Kinds (:data:`KINDS`):

* ``llama``: target ``LlamaForCausalLM``, hidden 128, 2 layers, 4 heads / 2 KV heads (head dim
  32), intermediate 256, vocab 1024, fp32, untied head.
* ``bigram``: the same with every attention ``o_proj`` zero: the next token depends only on the
  current token, so an identical STANDALONE draft accepts every draft token. Its head is scaled
  by ``BIGRAM_LOGIT_SCALE`` (peaked distributions), so that a topk>1 tree, which keeps the
  ``num_draft_tokens - 1`` best-scored candidates, always contains the greedy path.
* ``eagle3``: EAGLE-3 draft ``LlamaForCausalLMEagle3``, 1 layer, ``draft_vocab_size`` 1024,
  ``target_hidden_size`` 128, two target aux layers (``eagle_aux_hidden_state_layer_ids``
  [-1, 0]: the inputs of target layers 0 and 1), ``fc`` [128 x 256], ``d2t`` zeros (identity
  draft->target map), ``t2d`` all True; embedding shared from the target.
* ``eagle``: EAGLE draft ``LlamaForCausalLMEagle``, 1 layer, ``fc`` [128 x 256] + bias;
  embedding and head shared from the target.
* ``llama-standalone`` / ``bigram-standalone``: STANDALONE drafts, exact copies of the
  ``llama`` / ``bigram`` target (written as their own directories).
* ``agree``, ``eagle-agree-full``, ``eagle-agree-mid``: drafts that accept at a known rate.
  The ``llama`` / ``eagle`` recipes rewritten by ``benchmarks/gpu/agree_weights.py``'s
  :func:`rewrite` (the construction the H200 sweep uses, not a second one; seed
  :data:`AGREE_SEED`): the target greedily predicts ``sigma(x)`` after token ``x`` whatever the
  context (a bigram: its layers add nothing to the residual), the EAGLE v1 draft agrees on every
  token (``full``: a chain verify accepts 3 of 3 drafts) or on ~0.65 of the tokens (``mid``,
  accept length ~2.4 per chain verify). Greedy output of the target is the chain
  ``sigma(x), sigma(sigma(x)), ...`` from the prompt's last token: :func:`agree_chain`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from safetensors.torch import save_file

VOCAB = 1024
HIDDEN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 256
MAX_POSITIONS = 2048
BIGRAM_LOGIT_SCALE = 16.0
RECIPE_VERSION = 2  # bump when a recipe below changes: the cache key changes with it

AGREE_SEED = 0
AGREE_RATES = ("full", "mid")
KINDS = (
    "llama",
    "bigram",
    "eagle3",
    "eagle",
    "llama-standalone",
    "bigram-standalone",
    "agree",
    *(f"eagle-agree-{r}" for r in AGREE_RATES),
)
#: benchmarks/gpu/agree_weights.py in the source tree (the test bed runs from an editable
#: install; the module is not part of the wheel).
AGREE_WEIGHTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "agree_weights.py"


def cache_root() -> Path:
    """``$SPECFSM_CACHE/models`` or ``~/.cache/specfsm/models``."""
    base = os.environ.get("SPECFSM_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "specfsm"
    return root / "models"


def _llama_config(**extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    cfg.update(extra)
    return cfg


def _randn(seed: int, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def _linear(seed: int, name: str, out_f: int, in_f: int) -> torch.Tensor:
    return _randn(seed, name, (out_f, in_f), in_f**-0.5)


def _decoder_layer(
    seed: int, prefix: str, attn_in: int, *, zero_o_proj: bool
) -> dict[str, torch.Tensor]:
    w = {
        f"{prefix}.self_attn.q_proj.weight": _linear(
            seed, f"{prefix}.q", HEADS * HEAD_DIM, attn_in
        ),
        f"{prefix}.self_attn.k_proj.weight": _linear(
            seed, f"{prefix}.k", KV_HEADS * HEAD_DIM, attn_in
        ),
        f"{prefix}.self_attn.v_proj.weight": _linear(
            seed, f"{prefix}.v", KV_HEADS * HEAD_DIM, attn_in
        ),
        f"{prefix}.self_attn.o_proj.weight": _linear(seed, f"{prefix}.o", HIDDEN, HEADS * HEAD_DIM),
        f"{prefix}.mlp.gate_proj.weight": _linear(seed, f"{prefix}.gate", INTERMEDIATE, HIDDEN),
        f"{prefix}.mlp.up_proj.weight": _linear(seed, f"{prefix}.up", INTERMEDIATE, HIDDEN),
        f"{prefix}.mlp.down_proj.weight": _linear(seed, f"{prefix}.down", HIDDEN, INTERMEDIATE),
        f"{prefix}.input_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(HIDDEN),
    }
    if zero_o_proj:
        w[f"{prefix}.self_attn.o_proj.weight"].zero_()
    return w


def _target(seed: int, *, bigram: bool) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    w = {
        "model.embed_tokens.weight": _randn(seed, "embed", (VOCAB, HIDDEN), 1.0),
        "model.norm.weight": torch.ones(HIDDEN),
        # The bigram target's head is scaled so its next-token distribution is peaked (top-1
        # probability near 1): a topk>1 draft tree then always contains the greedy path.
        "lm_head.weight": _linear(seed, "lm_head", VOCAB, HIDDEN)
        * (BIGRAM_LOGIT_SCALE if bigram else 1.0),
    }
    for i in range(LAYERS):
        w.update(_decoder_layer(seed, f"model.layers.{i}", HIDDEN, zero_o_proj=bigram))
    return _llama_config(), w


def _eagle3(seed: int) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    aux_ids = [-1, 0]
    cfg = _llama_config(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=VOCAB,
        target_hidden_size=HIDDEN,
        eagle_config={"eagle_aux_hidden_state_layer_ids": aux_ids, "use_aux_hidden_state": True},
    )
    w = _decoder_layer(seed, "midlayer", 2 * HIDDEN, zero_o_proj=False)
    w.update(
        {
            "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
            "fc.weight": _linear(seed, "fc", HIDDEN, HIDDEN * len(aux_ids)),
            "norm.weight": torch.ones(HIDDEN),
            "lm_head.weight": _linear(seed, "lm_head", VOCAB, HIDDEN),
            "d2t": torch.zeros(VOCAB, dtype=torch.int64),
            "t2d": torch.ones(VOCAB, dtype=torch.bool),
        }
    )
    return cfg, w


def _eagle(seed: int) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    cfg = _llama_config(architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1)
    w = _decoder_layer(seed, "layers.0", HIDDEN, zero_o_proj=False)
    del w["layers.0.input_layernorm.weight"]  # EAGLE's first layer has none (llama_eagle.py:52-55)
    w.update(
        {
            "fc.weight": _linear(seed, "fc", HIDDEN, 2 * HIDDEN),
            "fc.bias": _randn(seed, "fc.bias", (HIDDEN,), 0.02),
        }
    )
    return cfg, w


_SEEDS = {"llama": 1234, "bigram": 1234, "eagle3": 3333, "eagle": 4444}


def agree_weights() -> ModuleType:
    """``benchmarks/gpu/agree_weights.py`` as module ``agree_weights`` (loaded once)."""
    if "agree_weights" in sys.modules:
        return sys.modules["agree_weights"]
    if not AGREE_WEIGHTS.exists():
        raise FileNotFoundError(
            f"{AGREE_WEIGHTS} not found: the agreeing test-bed models need the source tree"
        )
    spec = importlib.util.spec_from_file_location("agree_weights", AGREE_WEIGHTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agree_weights"] = module
    spec.loader.exec_module(module)
    return module


def _as_module(weights: dict[str, torch.Tensor], cfg: dict[str, Any]) -> torch.nn.Module:
    """An ``nn.Module`` whose parameters ARE ``weights`` (shared storage, dotted names as
    given) and whose ``.config`` has ``cfg``'s keys: what ``agree_weights.rewrite`` reads."""
    root = torch.nn.Module()
    for name, tensor in weights.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=False))
    root.config = SimpleNamespace(**cfg)  # type: ignore[assignment]
    return root


def _agree(kind: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The agreeing target / draft: the ``llama`` / ``eagle`` recipe rewritten in place."""
    aw = agree_weights()
    if kind == "agree":
        cfg, w = _target(_SEEDS["llama"], bigram=False)
        aw.rewrite(_as_module(w, cfg), "target", seed=AGREE_SEED, rate="full")
        return cfg, w
    rate = kind.removeprefix("eagle-agree-")
    cfg, w = _eagle(_SEEDS["eagle"])
    # SGLang's LlamaForCausalLMEagle names its parameters model.*; the checkpoint has no prefix.
    named = {f"model.{k}": v for k, v in w.items()}
    aw.rewrite(_as_module(named, cfg), "draft", seed=AGREE_SEED, rate=rate)
    return cfg, w


def recipe(kind: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json dict, state dict) of ``kind``; pure function of the kind."""
    if kind in ("llama", "llama-standalone"):
        return _target(_SEEDS["llama"], bigram=False)
    if kind in ("bigram", "bigram-standalone"):
        return _target(_SEEDS["bigram"], bigram=True)
    if kind == "eagle3":
        return _eagle3(_SEEDS["eagle3"])
    if kind == "eagle":
        return _eagle(_SEEDS["eagle"])
    if kind == "agree" or kind in (f"eagle-agree-{r}" for r in AGREE_RATES):
        return _agree(kind)
    raise ValueError(f"unknown tiny model kind {kind!r}; one of {KINDS}")


def _key(kind: str) -> str:
    base = kind.removesuffix("-standalone")
    parts: list[Any] = [RECIPE_VERSION, base, recipe(kind)[0], _SEEDS.get(base)]
    if "agree" in kind:  # the construction's source and seed are part of the recipe
        parts += [hashlib.sha256(AGREE_WEIGHTS.read_bytes()).hexdigest(), AGREE_SEED]
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def ensure(kind: str) -> Path:
    """Path of the cached model directory of ``kind``, writing it first if missing."""
    if kind not in KINDS:
        raise ValueError(f"unknown tiny model kind {kind!r}; one of {KINDS}")
    path = cache_root() / f"{kind}-{_key(kind)}"
    if (path / "model.safetensors").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg, weights = recipe(kind)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=path.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
        (tmp / "generation_config.json").write_text(
            json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False})
        )
        save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "model.safetensors"))
        try:
            os.rename(tmp, path)
        except OSError:
            if not (path / "model.safetensors").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return path


TARGETS = ("llama", "bigram", "agree")


def target_path(target: str = "llama") -> Path:
    """The target model directory: ``"llama"``, ``"bigram"`` or ``"agree"``."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    return ensure(target)


def draft_path(spec: str, target: str = "llama", agree: str | None = None) -> Path:
    """The draft directory for speculative algorithm ``spec`` (EAGLE3 / EAGLE / STANDALONE);
    a STANDALONE draft is an identical copy of ``target``. ``agree`` (``full`` / ``mid``): the
    EAGLE v1 draft that agrees with the ``agree`` target at that rate."""
    spec = spec.upper()
    if agree is not None:
        if spec != "EAGLE" or agree not in AGREE_RATES:
            raise ValueError(
                f"agreeing drafts are EAGLE (v1) only, rate one of {AGREE_RATES}; got "
                f"spec={spec!r}, agree={agree!r} (agree_weights.py: EAGLE-3 cannot follow sigma)"
            )
        return ensure(f"eagle-agree-{agree}")
    if spec == "EAGLE3":
        return ensure("eagle3")
    if spec == "EAGLE":
        return ensure("eagle")
    if spec == "STANDALONE":
        target_path(target)
        return ensure(f"{target}-standalone")
    raise ValueError(f"speculative algorithm must be EAGLE3, EAGLE or STANDALONE, got {spec!r}")


def agree_sigma() -> list[int]:
    """``sigma`` of the ``agree`` target: its greedy next token after ``x`` is ``sigma[x]``."""
    return [int(v) for v in agree_weights().permutation(AGREE_SEED, VOCAB)]


def agree_chain(prompt: list[int], n: int, sigma: list[int] | None = None) -> list[int]:
    """The ``agree`` target's greedy output: ``n`` tokens of the sigma chain after ``prompt``."""
    sigma = sigma if sigma is not None else agree_sigma()
    out, x = [], int(prompt[-1])
    for _ in range(n):
        x = sigma[x]
        out.append(x)
    return out


def agree_rate(rate: str) -> float:
    """Per-token agreement of the ``rate`` draft with the ``agree`` target (offline, exact)."""
    aw = agree_weights()
    k = aw.parse_rate(rate, VOCAB, HIDDEN).k
    emb = aw.embeddings(AGREE_SEED, VOCAB, HIDDEN)
    return float(aw.agreement(emb, k, AGREE_SEED, torch.arange(VOCAB)))
