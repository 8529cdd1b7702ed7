"""What the serving benchmark's speculative servers are launched with: the draft shape flags
(SGLang's ``--speculative-*``) and the shapes example's config.

- `CHAIN`: every speculative server's launch but ``specfsm_shapes`` (chain 3);
- `launch_args`: the flags of a draft shape label (``chainN`` or ``K,S,N``);
- `shapes_launch`: a ``specfsm_shapes`` server's, its config's policy ``shape`` (`CHAIN7`, the
  example's, when it names none);
- `shapes_example`: ``examples/gpu_server/specfsm_shapes.json`` as shipped, with the keys
  ``--shapes-set`` sets; `shapes_config`: that, with the run's log and profile paths;
- `CPU_GOODPUT`, `GPU_GOODPUT`: the ``specfsm`` server's goodput policy on each bed (what
  ``--goodput`` defaults to, and what the simulator serves for it).

Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHAPES_EXAMPLE = ROOT / "examples" / "gpu_server" / "specfsm_shapes.json"

# accept_len: the prior before the policy has measured (the agreeing `mid` draft accepts ~2.4).
# On the GPU the table has two contexts, so the policy prices each iteration at its mean
# context (the served requests run at ~1200 tokens) and carries the start-up profile's rows
# there; the profile measures at 1024-token prompts (a profile at 256, taken flat, priced a
# chain-3 step at half its served cost: benchmarks/gpu/results/2026-12-02_serving_fixes).
CPU_GOODPUT: dict[str, Any] = {
    "name": "goodput",
    "table": "h200_sglang0517_llama8b",
    "shape": "chain3",
    "accept_len": 2.4,
}
# A closed-loop step from 16 to 256 requests queues 240 prompts: priced with the queue, the
# policy goes PLAIN before their prefills (`price_queued`, docs/policies.md).
GPU_GOODPUT: dict[str, Any] = {
    **CPU_GOODPUT,
    "table": "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096",
    "price_queued": 1.0,
    # the target's prefill per prompt token, measured 22.9-23.7 us on the H200
    # (serve_prefill_gpu, benchmarks/gpu/results/2026-12-03_serving): the prefill pressure
    "prefill_ms_per_token": 0.023,
    # prices within a few percent swapped the mode 0.2-3.2 s apart at 16 requests on heavy
    # (2026-12-04_serving): a quick reversal doubles the margin (docs/policies.md "Reversals")
    "reversal_window": 256,
}

CHAIN = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
#: the launch of ``specfsm_shapes`` when its config names none: the example's chain 7
CHAIN7 = {
    "speculative_num_steps": 7,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 8,
}


def launch_args(shape: str) -> dict[str, int]:
    """SGLang's launch flags for a draft shape label: ``chainN`` (N steps, top-k 1, N + 1
    draft tokens) or ``K,S,N`` (a tree: top-k K, S steps, N draft tokens). ValueError for
    anything else."""
    text = shape.replace(" ", "")
    if text.startswith("chain") and text[5:].isdigit() and int(text[5:]) >= 1:
        n = int(text[5:])
        return {
            "speculative_num_steps": n,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": n + 1,
        }
    parts = text.split(",")
    if len(parts) == 3 and all(p.isdigit() and int(p) >= 1 for p in parts):
        k, steps, n = (int(p) for p in parts)
        return {
            "speculative_num_steps": steps,
            "speculative_eagle_topk": k,
            "speculative_num_draft_tokens": n,
        }
    raise ValueError(f"draft shape {shape!r}: expected chainN or K,S,N")


def shapes_launch(cfg: dict[str, Any] | None) -> dict[str, int]:
    """The launch of a ``specfsm_shapes`` server: its config's policy ``shape`` (the shape the
    goodput policy is launched at), `CHAIN7` when it names none."""
    policy = (cfg or {}).get("policy")
    shape = policy.get("shape") if isinstance(policy, dict) else None
    return launch_args(str(shape)) if shape else dict(CHAIN7)


#: the shapes example's start-up profile on the CPU bed: the tiny models' context and the bed's
#: KV pool (8192 tokens, 16 requests) hold the shipped one's 1024-token prompts at bs 1 only
CPU_SHAPES_PROFILE = {"bs": [1, 2], "forwards": 3, "prompt_tokens": 64}


def shapes_example(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``examples/gpu_server/specfsm_shapes.json`` as shipped with the keys `overrides` sets
    (``--shapes-set``): what the shapes server runs, and what the simulator serves for it."""
    return {**json.loads(SHAPES_EXAMPLE.read_text()), **(overrides or {})}


def shapes_config(
    folder: Path, bed: str = "gpu", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``examples/gpu_server/specfsm_shapes.json`` as shipped (the goodput policy choosing PLAIN
    or a shape, the extra shapes' runtime states, the start-up profile) with `overrides` set
    (``--shapes-set``), its transition log and its profile's rows in ``folder`` and its control
    file the server's own (`Server.start`). On the CPU bed the profile is `CPU_SHAPES_PROFILE`."""
    cfg = shapes_example(overrides)
    cfg["log"] = str(folder / "transitions-rank{rank}.jsonl")
    cfg.pop("control_file", None)
    if cfg.get("profile"):
        prof = dict(CPU_SHAPES_PROFILE if bed == "cpu" else cfg["profile"])
        prof["save"] = str(folder / "profile_shapes-{rank}.csv")
        cfg["profile"] = prof
    return cfg


def shapes_set_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The keys ``--shapes-set`` set on the shapes example of the ``specfsm_shapes`` servers a
    folder's server records (``runs.jsonl``) name: {} when none set any (as shipped). ValueError
    when its servers were started with different ones (their runs were different servers)."""
    seen: list[dict[str, Any]] = []
    for r in records:
        if r.get("server") == "specfsm_shapes" and "start_s" in r and "trace" not in r:
            got = dict(r.get("shapes_set") or {})
            if got not in seen:
                seen.append(got)
    if len(seen) > 1:
        raise ValueError(
            f"the specfsm_shapes servers were started with different --shapes-set: {seen}"
        )
    return seen[0] if seen else {}
