"""The agreeing weights' construction and their offline agreement (``agree_weights.py`` applies
them to a loaded model and re-exports these names; its docstring gives the construction's
argument): the target's bigram (``E``, ``sigma``, ``lm_head``), the draft's ``fc = [A | 0]`` with
``A`` the identity or the projection onto a seeded ``k``-dim subspace, and the per-token
agreement of such a draft, computed without running a model. Imports no torch at import time
(``sitecustomize.py`` imports ``agree_weights``, which imports this).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: The environment variable that selects the rate (named in parse_rate's errors).
ENV = "SPECFSM_AGREE"
#: Largest subspace dimension of a ``k<N>`` rate (the seeded basis has this many vectors).
K_MAX = 512
#: ``mid`` rate: the subspace dimension with a per-token agreement of ~0.65 for
#: (vocab_size, hidden_size), from ``agree_weights.py rates`` (seed 0).
MID_K: dict[tuple[int, int], int] = {(128256, 4096): 23, (1024, 128): 12}

#: Base config of the Llama-3.1-8B-shaped target (run_on_device.sh, stage ``configs``).
LLAMA8B_BASE: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "initializer_range": 0.02,
    "pretraining_tp": 1,
    "use_cache": True,
}


# ----------------------------------------------------------------------------- construction


@dataclass(frozen=True)
class Rate:
    """A draft agreement setting: ``k`` None is the identity (every draft token agrees)."""

    name: str
    k: int | None


def parse_rate(text: str, vocab: int, hidden: int) -> Rate:
    """``full`` / ``mid`` / ``k<N>`` for a model of this (vocab, hidden)."""
    text = text.strip().lower()
    if text == "full":
        return Rate("full", None)
    if text == "mid":
        k = MID_K.get((vocab, hidden))
        if not k:
            raise ValueError(
                f"{ENV}=mid: no calibrated k for vocab {vocab}, hidden {hidden} (known: "
                f"{sorted(MID_K)}); run `agree_weights.py rates --vocab {vocab} --hidden "
                f"{hidden}` and pass {ENV}=k<N>"
            )
        return Rate("mid", k)
    m = re.fullmatch(r"k(\d+)", text)
    if m:
        k = int(m.group(1))
        if not 1 <= k <= min(K_MAX, hidden):
            raise ValueError(f"{ENV}={text}: k must be in 1..{min(K_MAX, hidden)}")
        return Rate(text, k)
    raise ValueError(f"{ENV}={text!r}: expected 'full', 'mid' or 'k<N>' (e.g. k24)")


# Every constructed tensor is fp32 on the CPU, whatever torch's defaults: SGLang's loader
# runs the dummy init (and so the rewrite) under ``set_default_torch_dtype(model dtype)``.
def _f32() -> dict[str, Any]:
    import torch

    return {"dtype": torch.float32, "device": "cpu"}


def _generator(seed: int, tag: str) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(tag.encode()))


def embeddings(seed: int, vocab: int, hidden: int) -> torch.Tensor:
    """The shared token embedding ``E`` [vocab, hidden], N(0, 1) entries, fp32 on the CPU."""
    import torch

    return torch.randn(vocab, hidden, generator=_generator(seed, "embed"), **_f32())


def permutation(seed: int, vocab: int) -> torch.Tensor:
    """``sigma``: the target predicts ``sigma[x]`` after token ``x``."""
    import torch

    return torch.randperm(vocab, generator=_generator(seed, "sigma"), device="cpu")


def unit_rows(mat: torch.Tensor) -> torch.Tensor:
    return mat / mat.norm(dim=1, keepdim=True)


def head_weight(emb: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``lm_head`` [vocab, hidden]: row ``sigma[x]`` is ``E[x] / |E[x]|``."""
    import torch

    head = torch.empty_like(emb)
    head[sigma] = unit_rows(emb)
    return head


def subspace(seed: int, hidden: int, k: int) -> torch.Tensor:
    """Orthonormal basis [hidden, k] of the seeded ``k``-dim subspace; the first ``k`` of a
    fixed sequence of :data:`K_MAX` Gaussian vectors, orthonormalised (nested in ``k``)."""
    import torch

    if not 1 <= k <= min(K_MAX, hidden):
        raise ValueError(f"k must be in 1..{min(K_MAX, hidden)}, got {k}")
    gauss = torch.randn(
        K_MAX, hidden, generator=_generator(seed, "subspace"), dtype=torch.float64, device="cpu"
    )
    q, _ = torch.linalg.qr(gauss[:k].T)
    return q.to(torch.float32)


def draft_matrix(seed: int, hidden: int, rate: Rate) -> torch.Tensor:
    """``A`` [hidden, hidden]: the identity (``full``) or the projection ``Q_k Q_k^T``."""
    import torch

    if rate.k is None:
        return torch.eye(hidden, **_f32())
    q = subspace(seed, hidden, rate.k).double()
    return (q @ q.T).float()


def fc_weight(seed: int, hidden: int, rate: Rate) -> torch.Tensor:
    """The draft's ``fc.weight`` [hidden, 2 hidden] = ``[A | 0]`` (input: cat(embeds, hidden))."""
    import torch

    return torch.cat(
        [draft_matrix(seed, hidden, rate), torch.zeros(hidden, hidden, **_f32())], dim=1
    )


# ------------------------------------------------------------------------- offline agreement


def agreement_literal(
    emb: torch.Tensor,
    head: torch.Tensor,
    sigma: torch.Tensor,
    fc: torch.Tensor,
    tokens: torch.Tensor,
    dtype: torch.dtype | None = None,
    chunk: int = 256,
) -> float:
    """Fraction of ``tokens`` x with ``argmax_v head[v] . fc [E[x], 0] == sigma[x]``: the
    draft's computation as written, optionally with weights and activations rounded to
    ``dtype`` (e.g. bfloat16) and accumulated in fp32."""
    hidden = emb.shape[1]
    a, sigma, tokens = fc[:, :hidden].to(emb.device), sigma.to(emb.device), tokens.to(emb.device)
    if dtype is not None:
        emb, head, a = (t.to(dtype).float() for t in (emb, head, a))
    hits = 0
    for i in range(0, len(tokens), chunk):
        xs = tokens[i : i + chunk]
        out = emb[xs] @ a.T
        if dtype is not None:
            out = out.to(dtype).float()
        hits += int(((out @ head.T).argmax(dim=1) == sigma[xs]).sum())
    return hits / len(tokens)


def agreement(
    emb: torch.Tensor, k: int | None, seed: int, tokens: torch.Tensor, chunk: int = 1024
) -> float:
    """Same as :func:`agreement_literal` for ``A = Q Q^T`` (fp32), in ``O(vocab k)`` per token:
    ``head[v] . Q Q^T E[x]`` with ``v = sigma[y]`` is ``(U[y] Q) . (Q^T E[x])`` (``U`` the unit
    rows of ``E``), so the draft agrees on ``x`` iff ``argmax_y (U Q)[y] . (Q^T E[x]) == x``;
    ``sigma`` drops out. ``k`` None (identity): 1 by Cauchy-Schwarz, computed all the same."""
    import torch

    q = torch.eye(emb.shape[1], **_f32()) if k is None else subspace(seed, emb.shape[1], k)
    q, tokens = q.to(emb.device), tokens.to(emb.device)
    uq = unit_rows(emb) @ q
    hits = 0
    for i in range(0, len(tokens), chunk):
        xs = tokens[i : i + chunk]
        hits += int(((emb[xs] @ q) @ uq.T).argmax(dim=1).eq(xs).sum())
    return hits / len(tokens)


def sample_tokens(vocab: int, n: int, seed: int) -> torch.Tensor:
    """``n`` distinct token ids (all of them when ``n >= vocab``), seeded."""
    import torch

    if n >= vocab:
        return torch.arange(vocab, device="cpu")
    return torch.randperm(vocab, generator=_generator(seed, "sample"), device="cpu")[:n]


def expected_accept_length(p: float, steps: int) -> float:
    """Tokens per chain verify (bonus included) if each draft token agrees independently with
    probability ``p``: ``1 + p + ... + p^steps``."""
    return sum(p**i for i in range(steps + 1))


def rates_table(
    vocab: int,
    hidden: int,
    ks: Sequence[int],
    seed: int,
    n_tokens: int,
    bf16_tokens: int,
    device: str = "cpu",
    steps: int = 3,
) -> list[dict[str, Any]]:
    """Rows ``{rate, k, agreement, accept_len_chain, agreement_bf16}`` for ``full`` and each k
    (``agreement_bf16``: the literal computation with bf16-rounded weights / activations on
    ``bf16_tokens`` of the tokens, None when 0)."""
    import torch

    emb = embeddings(seed, vocab, hidden).to(device)
    tokens = sample_tokens(vocab, n_tokens, seed)
    head = sigma = None
    if bf16_tokens:
        sigma = permutation(seed, vocab).to(device)
        head = head_weight(emb, sigma)
    rows = []
    for k in [None, *ks]:
        rate = Rate("full", None) if k is None else Rate(f"k{k}", k)
        p = 1.0 if k is None else agreement(emb, k, seed, tokens)
        row: dict[str, Any] = {
            "rate": rate.name,
            "k": k,
            "agreement": p,
            "accept_len_chain": expected_accept_length(p, steps),
        }
        if head is not None and sigma is not None:
            fc = fc_weight(seed, hidden, rate)
            row["agreement_bf16"] = agreement_literal(
                emb, head, sigma, fc, tokens[:bf16_tokens], dtype=torch.bfloat16
            )
        rows.append(row)
    return rows
