#!/usr/bin/env python3
"""Drive a real SGLang Engine on the GPU box: greedy outputs and per-step costs per batch size.

Run THERE by run_on_device.sh, once per configuration (``--spec none|chain|tree``):

1. greedy: a few fixed prompts (random token ids, seed 0), temperature 0, ``ignore_eos``; the
   output token ids go to ``<out>/greedy_<spec>.json`` for the with/without EAGLE-3 comparison;
2. sweep: for each batch size N, N requests of ``--input-len`` random tokens (distinct, so no
   prefix reuse) generate ``--output-len`` tokens each; the step timing hook
   (benchmarks/gpu/sitecustomize.py) logs every decode / verify / draft / draft-extend call with
   its batch size; this script writes ``mark`` lines around each N so steps of N come from N's
   sweep only.

Engine settings: dummy weights (``load_format=dummy``), ``attention_backend=triton`` (the FA3
library is slimmed out), ``sampling_backend=pytorch``, CUDA graphs ON for the captured batch
sizes, overlap scheduling off (so the hook's synchronisations time one step at a time), no radix
cache, ``skip_tokenizer_init`` (token ids in, token ids out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

SPECS = {
    "none": {},
    "chain": {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
    "tree": {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 16,
    },
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def mark(path: str | None, what: str, **kw) -> None:
    if not path:
        return
    with open(path, "a") as fh:
        fh.write(json.dumps({"t": time.time(), "mark": what, **kw}) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", choices=sorted(SPECS), required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bs", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=24)
    ap.add_argument("--greedy-prompts", type=int, default=8)
    ap.add_argument("--greedy-len", type=int, default=32)
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--mem-fraction", type=float, default=0.80)
    args = ap.parse_args()

    import sglang as sgl

    timing = os.environ.get("SPECFSM_TIMING_FILE")
    kwargs = dict(
        model_path=args.target,
        load_format="dummy",
        dtype="bfloat16",
        attention_backend=args.attention_backend,
        sampling_backend="pytorch",
        skip_tokenizer_init=True,
        disable_overlap_schedule=True,
        disable_radix_cache=True,
        cuda_graph_bs_decode=list(args.bs),
        cuda_graph_max_bs_decode=max(args.bs),
        max_running_requests=max(args.bs),
        mem_fraction_static=args.mem_fraction,
        random_seed=0,
        log_level="warning",
    )
    if args.spec != "none":
        kwargs.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=args.draft,
            **SPECS[args.spec],
        )
    print(f"[engine] spec={args.spec} starting: {kwargs}", flush=True)
    t0 = time.time()
    engine = sgl.Engine(**kwargs)
    start_s = time.time() - t0
    print(f"[engine] spec={args.spec} started in {start_s:.1f}s", flush=True)
    mark(timing, "started", spec=args.spec, start_s=start_s)

    rng = random.Random(0)
    greedy_prompts = [
        [rng.randrange(1000, 120000) for _ in range(48)] for _ in range(args.greedy_prompts)
    ]
    sp = {"temperature": 0.0, "max_new_tokens": args.greedy_len, "ignore_eos": True}
    t1 = time.time()
    outs = engine.generate(input_ids=greedy_prompts, sampling_params=sp)
    greedy = [o["output_ids"] for o in outs]
    metas = [o.get("meta_info", {}) for o in outs]
    accept = [m.get("spec_accept_length") for m in metas]
    print(
        f"[engine] greedy {len(greedy)} prompts in {time.time() - t1:.1f}s accept_length={accept}",
        flush=True,
    )
    (args.out / f"greedy_{args.spec}.json").write_text(
        json.dumps({"spec": args.spec, "output_ids": greedy, "meta": metas}, default=str)
    )

    summary = {"spec": args.spec, "start_s": start_s, "sweep": []}
    for n in args.bs:
        prompts = [[rng.randrange(1000, 120000) for _ in range(args.input_len)] for _ in range(n)]
        sp = {"temperature": 0.0, "max_new_tokens": args.output_len, "ignore_eos": True}
        mark(timing, "begin", bs=n)
        t2 = time.time()
        outs = engine.generate(input_ids=prompts, sampling_params=sp)
        wall = time.time() - t2
        mark(timing, "end", bs=n)
        acc = [o.get("meta_info", {}).get("spec_accept_length") for o in outs]
        acc = [a for a in acc if a is not None]
        summary["sweep"].append(
            {"bs": n, "wall_s": wall, "accept_length": sum(acc) / len(acc) if acc else None}
        )
        print(
            f"[engine] spec={args.spec} bs={n:3d} {wall:6.2f}s "
            f"accept={summary['sweep'][-1]['accept_length']}",
            flush=True,
        )
    (args.out / f"sweep_{args.spec}.json").write_text(json.dumps(summary))
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
