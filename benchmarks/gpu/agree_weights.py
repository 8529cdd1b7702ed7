"""Weights that make an EAGLE (v1) draft agree with its target at a known rate.

Dummy weights (``load_format=dummy``) make EAGLE accept ~1 token per verify, so the upside of
speculation is never measured. This module rewrites a dummy-initialised model in place so that:

* target (``LlamaForCausalLM``): every decoder layer adds nothing to the residual stream
  (``o_proj`` and ``down_proj`` zero; every matmul still runs at full size, so step costs stay
  real), the final norm weight is 1, the embedding is rewritten from a seeded generator
  (``E`` with N(0, 1) entries) and ``lm_head[sigma(x)] = E[x] / |E[x]|`` for a seeded
  permutation ``sigma`` of the vocabulary. The last hidden state after token ``x`` is
  ``RMSNorm(E[x])``, a positive multiple of ``E[x]``, so the target greedily predicts
  ``sigma(x)`` after ``x`` (Cauchy-Schwarz: the logit of ``sigma(x)`` is ``|h|``, every other
  one ``|h| cos`` < ``|h|``): a bigram, whatever the context;
* draft (EAGLE v1, ``LlamaForCausalLMEagle``, one layer): its input is
  ``fc(cat(embed(x), target_hidden))``, it has no final norm and SGLang gives it the target's
  ``embed_tokens`` and ``lm_head`` (``EAGLEWorkerV2.init_lm_head`` ->
  ``set_embed_and_head``, in 0.5.17 and 0.5.23). With ``fc.weight = [A | 0]``, ``fc.bias = 0``
  and the layer adding nothing (``o_proj``, ``down_proj`` zero) the draft's output after
  token ``x`` is ``A E[x]`` at every draft step (chain or tree). ``A = I`` (rate ``full``):
  it predicts ``sigma(x)`` exactly, every draft token is accepted. ``A = Q_k Q_k^T``, the
  orthogonal projection onto a seeded ``k``-dimensional subspace (rate ``k<N>``; the
  subspaces are nested in ``k``): the draft agrees with the target on a fixed fraction of the
  tokens, :func:`agreement` computes it offline; ``mid`` is the ``k`` of :data:`MID_K` for the
  model's (vocab, hidden), picked from that table for a per-token agreement of ~0.65.

Why EAGLE v1 and not EAGLE-3 (``LlamaForCausalLMEagle3``): the EAGLE-3 layer's residual is the
fc'ed *target* hidden state, and in later draft steps the draft's own previous hidden state, so
with a layer that adds nothing the draft's prediction never depends on the token it is fed: at
most the first draft step can follow ``sigma``. Making later steps follow the token needs the
attention (the only path of the token embedding into the residual) to copy the current
position's embedding over the carried residual: approximate at best (RoPE, repeated tokens), so
no clean known rate. EAGLE-3 drafts are refused.

Use on the GPU box (SGLang 0.5.17, ``load_format=dummy``; ``sitecustomize.py`` imports this
module, copied next to it with ``agree_math.py``, and calls ``install_hook()`` when
``SPECFSM_AGREE`` is set, in the launcher and in SGLang's spawned scheduler process):
``install_hook()`` wraps ``sglang.srt.model_loader.loader.DummyModelLoader.load_model`` (the
same class and call sequence in 0.5.17 and 0.5.23) when that module is imported; while
``SPECFSM_AGREE`` is set (``full``, ``mid`` or ``k<N>``; seed ``SPECFSM_AGREE_SEED``, default 0)
every model it loads is rewritten right after ``initialize_dummy_weights`` and before
``post_load_weights`` / ``process_weights_after_loading`` (which may repack weights, e.g. the
CPU AMX path), so nothing derived from the dummy values survives. tp_size 1 only.

CLI: ``agree_weights.py config DIR`` writes the EAGLE v1 draft ``config.json`` for the
Llama-3.1-8B-shaped target of ``run_on_device.sh``; ``agree_weights.py rates`` prints the
offline agreement table. The module imports no torch / sglang at import time (it is imported
from ``sitecustomize.py``).
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

ENV_SEED = "SPECFSM_AGREE_SEED"
DEFAULT_SEED = 0
TARGET_ARCH = "LlamaForCausalLM"
DRAFT_ARCH = "LlamaForCausalLMEagle"
LOADER_MODULE = "sglang.srt.model_loader.loader"

# the weights' construction and the offline agreement: agree_math.py, next to this file wherever
# it is (the source tree, a test's temp folder, run_on_device.sh's hook folder); appended, so it
# shadows nothing an importer already finds
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))
from agree_math import (  # noqa: E402, F401  (re-exported: the tests and the test bed read them here)
    ENV,
    K_MAX,
    LLAMA8B_BASE,
    MID_K,
    Rate,
    agreement,
    agreement_literal,
    embeddings,
    expected_accept_length,
    fc_weight,
    head_weight,
    parse_rate,
    permutation,
    rates_table,
    sample_tokens,
    subspace,
    unit_rows,
)

# ------------------------------------------------------------------------------- the rewrite


def role_of(model: nn.Module) -> str:
    """``target`` / ``draft`` from the model class; anything else is refused."""
    name = type(model).__name__
    if name == TARGET_ARCH:
        return "target"
    if name == DRAFT_ARCH:
        return "draft"
    if name == "LlamaForCausalLMEagle3":
        raise ValueError(
            f"{ENV}: EAGLE-3 drafts are not supported (the layer's residual is the target / "
            "previous draft hidden state, so the draft cannot follow the fed token; see "
            "agree_weights.py). Use an EAGLE v1 draft (LlamaForCausalLMEagle, "
            "speculative_algorithm EAGLE)."
        )
    raise ValueError(
        f"{ENV}: no agreement construction for {name} (only {TARGET_ARCH} and {DRAFT_ARCH})"
    )


_LAYER_ZERO = r"model\.layers\.\d+\.(self_attn\.o_proj|mlp\.down_proj)\.(weight|bias)"
_TARGET = {
    "embed": r"model\.embed_tokens\.weight",
    "head": r"lm_head\.weight",
    "norm": r"model\.norm\.weight",
    "zero": _LAYER_ZERO,
}
_DRAFT = {
    "fc": r"model\.fc\.weight",
    "zero": r"model\.fc\.bias|" + _LAYER_ZERO,
    # The v1 draft has no final norm in 0.5.17 / 0.5.23; set to 1 should a version add one.
    "norm": r"model\.norm\.weight",
}


def _config(model: nn.Module) -> Any:
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(f"{ENV}: {type(model).__name__} has no .config")
    return cfg


def _check_tp1(params: dict[str, torch.Tensor], cfg: Any, tp_size: int) -> None:
    if tp_size != 1:
        raise ValueError(f"{ENV}: the agreement rewrite supports tp_size 1 only (got {tp_size})")
    heads, hidden = cfg.num_attention_heads, cfg.hidden_size
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    for name, p in params.items():
        if name.endswith("self_attn.o_proj.weight") and p.shape[1] != heads * head_dim:
            raise ValueError(
                f"{ENV}: {name} has {p.shape[1]} input features, {heads * head_dim} expected: "
                "the model is sharded (tp_size > 1?); the rewrite supports tp_size 1 only"
            )


def rewrite(
    model: nn.Module,
    role: str | None = None,
    seed: int = DEFAULT_SEED,
    rate: str = "full",
    tp_size: int = 1,
) -> dict[str, list[str]]:
    """Rewrite a loaded ``model`` in place (role ``target`` or ``draft``; None: from the
    class). Returns the parameter names written, by kind. Raises when an expected parameter
    is missing, so that a renamed parameter is never silently skipped."""
    import torch

    role = role or role_of(model)
    if role not in ("target", "draft"):
        raise ValueError(f"role must be 'target' or 'draft', got {role!r}")
    cfg = _config(model)
    vocab, hidden, layers = cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers
    the_rate = parse_rate(rate, vocab, hidden)
    params = dict(model.named_parameters(remove_duplicate=False))
    _check_tp1(params, cfg, tp_size)
    patterns = _TARGET if role == "target" else _DRAFT
    touched: dict[str, list[str]] = {kind: [] for kind in patterns}
    for name in params:
        for kind, pat in patterns.items():
            if re.fullmatch(pat, name):
                touched[kind].append(name)
    zero_w = [n for n in touched["zero"] if n.endswith(".weight")]
    if len(zero_w) != 2 * layers:
        raise ValueError(
            f"{ENV}: {role}: expected o_proj + down_proj weights of {layers} "
            f"layer(s), found {zero_w} in {sorted(params)}"
        )
    if role == "target":
        for kind in ("embed", "head", "norm"):
            if len(touched[kind]) != 1:
                raise ValueError(f"{ENV}: target: no unique {_TARGET[kind]} in {sorted(params)}")
        if params[touched["embed"][0]] is params[touched["head"][0]] or getattr(
            cfg, "tie_word_embeddings", False
        ):
            raise ValueError(f"{ENV}: target: tied embeddings are not supported")
    elif len(touched["fc"]) != 1:
        raise ValueError(f"{ENV}: draft: no model.fc.weight in {sorted(params)}")

    with torch.no_grad():
        for name in touched["zero"]:
            params[name].zero_()
        for name in touched["norm"]:
            params[name].fill_(1.0)
        if role == "target":
            emb = embeddings(seed, vocab, hidden)
            sigma = permutation(seed, vocab)
            _write_rows(params[touched["embed"][0]], emb)
            _write_rows(params[touched["head"][0]], head_weight(emb, sigma))
        else:
            w = params[touched["fc"][0]]
            fc = fc_weight(seed, hidden, the_rate)
            if tuple(w.shape) != tuple(fc.shape):
                raise ValueError(
                    f"{ENV}: draft: fc.weight is {tuple(w.shape)}, expected "
                    f"{tuple(fc.shape)} (an EAGLE v1 draft of hidden {hidden})"
                )
            _copy(w, fc)
    return touched


def _write_rows(param: torch.Tensor, rows: torch.Tensor) -> None:
    """Copy ``rows`` [vocab, hidden] into a (possibly vocab-padded) weight; padding rows 0."""
    if param.shape[0] < rows.shape[0] or param.shape[1] != rows.shape[1]:
        raise ValueError(
            f"{ENV}: weight {tuple(param.shape)} cannot hold {tuple(rows.shape)} "
            "(sharded vocab? tp_size 1 only)"
        )
    param[rows.shape[0] :].zero_()
    _copy(param[: rows.shape[0]], rows)


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` with ``src`` cast to ``dst``'s dtype on the CPU first, so that no fp32
    temporary lands on the GPU (its cached block would shrink SGLang's KV pool)."""
    dst.copy_(src.to(dtype=dst.dtype))


# ----------------------------------------------------------------------------- the SGLang hook


def _log(msg: str) -> None:
    sys.stderr.write(f"[agree_weights pid {os.getpid()}] {msg}\n")
    sys.stderr.flush()


def rewrite_from_env(model: nn.Module) -> None:
    """The hook's rewrite: rate from ``SPECFSM_AGREE``, seed from ``SPECFSM_AGREE_SEED``."""
    rate = os.environ[ENV]
    seed = int(os.environ.get(ENV_SEED, DEFAULT_SEED))
    t0 = time.perf_counter()
    touched = rewrite(model, None, seed, rate)
    n = sum(len(v) for v in touched.values())
    _log(
        f"rewrote {type(model).__name__} ({role_of(model)}): {ENV}={rate} seed={seed}, {n} "
        f"parameters in {time.perf_counter() - t0:.1f}s: "
        + "; ".join(
            f"{k}: {v[0]}{f' (+{len(v) - 1})' if len(v) > 1 else ''}"
            for k, v in touched.items()
            if v
        )
    )


def patch_loader_module(module: types.ModuleType) -> None:
    """Wrap ``module.DummyModelLoader.load_model`` (idempotent). While ``SPECFSM_AGREE`` is
    set, the loader's ``initialize_dummy_weights`` global is swapped, for the duration of the
    call, for one that rewrites the model right after the dummy init."""
    cls = getattr(module, "DummyModelLoader", None)
    if cls is None or not hasattr(module, "initialize_dummy_weights"):
        raise RuntimeError(
            f"{ENV}: {module.__name__} has no DummyModelLoader / "
            "initialize_dummy_weights: unsupported SGLang version"
        )
    orig = cls.load_model
    if getattr(orig, "_specfsm_agree", False):
        return

    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not os.environ.get(ENV, "").strip():
            return orig(self, *args, **kwargs)
        init = module.initialize_dummy_weights
        done: list[bool] = []

        def init_then_rewrite(model: nn.Module, *a: Any, **kw: Any) -> None:
            init(model, *a, **kw)
            rewrite_from_env(model)
            done.append(True)

        module.initialize_dummy_weights = init_then_rewrite
        try:
            model = orig(self, *args, **kwargs)
        finally:
            module.initialize_dummy_weights = init
        if not done:
            raise RuntimeError(
                f"{ENV} is set but DummyModelLoader.load_model never called "
                "initialize_dummy_weights (SGLANG_CPU_QUANTIZATION?)"
            )
        return model

    load_model._specfsm_agree = True  # type: ignore[attr-defined]
    load_model.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.load_model = load_model


class _LoaderFinder(importlib.abc.MetaPathFinder):
    """Patches :data:`LOADER_MODULE` right after it is executed (first import)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != LOADER_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig_exec: Callable[[types.ModuleType], None] = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            orig_exec(module)
            patch_loader_module(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_hook() -> None:
    """Make SGLang's dummy loader apply the rewrite while ``SPECFSM_AGREE`` is set (checked at
    each load). Patches now if the loader module is imported, else when it is; imports neither
    torch nor sglang. Idempotent."""
    module = sys.modules.get(LOADER_MODULE)
    if module is not None:
        patch_loader_module(module)
        return
    if not any(isinstance(f, _LoaderFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _LoaderFinder())


# ------------------------------------------------------------------------------------- CLI


def write_draft_config(directory: Path) -> Path:
    """Write the EAGLE v1 draft ``config.json`` for the Llama-3.1-8B-shaped target."""
    cfg = dict(LLAMA8B_BASE, architectures=[DRAFT_ARCH], num_hidden_layers=1)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(cfg, indent=1))
    return path


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config", help="write the EAGLE v1 draft config.json into DIR")
    c.add_argument("dir", type=Path)
    r = sub.add_parser("rates", help="print the offline per-token agreement table")
    r.add_argument("--vocab", type=int, default=LLAMA8B_BASE["vocab_size"])
    r.add_argument("--hidden", type=int, default=LLAMA8B_BASE["hidden_size"])
    r.add_argument("--seed", type=int, default=DEFAULT_SEED)
    r.add_argument("--ks", default="8,16,20,24,28,32,40,48,64")
    r.add_argument("--tokens", type=int, default=16384, help="token sample (vocab: all)")
    r.add_argument(
        "--bf16-tokens",
        type=int,
        default=0,
        help="also the literal bf16 computation on this many tokens (slow)",
    )
    r.add_argument("--steps", type=int, default=3)
    r.add_argument("--device", default="cpu", help="torch device of the computation (cuda: s)")
    args = ap.parse_args(argv)
    if args.cmd == "config":
        print(f"wrote {write_draft_config(args.dir)}")
        return 0
    ks = [int(x) for x in args.ks.split(",") if x.strip()]
    t0 = time.perf_counter()
    rows = rates_table(
        args.vocab,
        args.hidden,
        ks,
        args.seed,
        args.tokens,
        args.bf16_tokens,
        device=args.device,
        steps=args.steps,
    )
    n = min(args.tokens, args.vocab)
    print(
        f"# vocab {args.vocab}, hidden {args.hidden}, seed {args.seed}: per-token agreement of "
        f"the EAGLE v1 draft (A = Q_k Q_k^T) with the bigram target on {n} tokens; "
        f"accept_len_chain = 1 + p + .. + p^{args.steps} (chain, {args.steps} steps); "
        f"mid = k{MID_K.get((args.vocab, args.hidden))} ({time.perf_counter() - t0:.0f}s)"
    )
    cols = ["rate", "k", "agreement", "accept_len_chain"]
    if args.bf16_tokens:
        cols.append("agreement_bf16")
    print(" | ".join(cols))
    for row in rows:
        print(
            " | ".join(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols)
        )
    return 0


if __name__ == "__main__":
    sys.exit(_main())
