#!/usr/bin/env python3
"""Measure per-step costs of a Llama-3.1-8B-shaped target and an EAGLE-3-shaped draft on a GPU.

Runs on a CUDA machine with torch (no SGLang needed). For every (model, bs, q, ctx) it builds a
static-shape forward pass, captures it in a CUDA graph, replays it 3 times to warm up and then
``--reps`` times (default 20), each replay timed with CUDA events, and records the median.

Shapes (Llama-3.1-8B): hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head dim 128,
32 layers, vocab 128256, bf16 random weights (N(0, 0.02^2), never zeros).
One layer = RMSNorm -> QKV -> RoPE -> write q new K/V into a KV cache of ``ctx`` tokens ->
GQA attention of the bs*q new tokens over all ``ctx`` cached tokens (no causal mask inside the q
tokens, same cost) -> o_proj -> residual -> RMSNorm -> SwiGLU MLP -> residual; then final RMSNorm
and the lm_head over every new token (a verify needs logits for all q tokens).

- ``llama8b``: the target, 32 layers. q=1 is a plain decode step, q=k a verify of k tokens.
- ``eagle3_draft8b``: the same shapes with 1 layer plus the full lm_head: a draft step for
  q=topk, a draft-extend for q=k.

GQA is computed without repeating K/V: the 4 query heads that share one KV head are folded into
the query-length axis, so SDPA sees 8 heads of length 4*q against 8 KV heads (exact, since there
is no mask). KV caches are distinct per layer while they fit in ``--kv-budget-gib``; beyond that
layers share a rotating set of caches, each far larger than the 60 MB L2, so every layer still
reads its cache from HBM.

Output: one CSV per ctx, ``model,bs,q,ctx,ms_per_step``, '#' header lines with date, device,
torch version and method. With ``--ref`` it prints (and with ``--markdown`` writes) the ratio
measured / reference per (model, bs, q) at the reference's ctx.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import math
import statistics
import sys
import time
from pathlib import Path

HIDDEN = 4096
INTER = 14336
HEADS = 32
KV_HEADS = 8
HEAD_DIM = HIDDEN // HEADS
LAYERS = 32
VOCAB = 128256
EPS = 1e-5
ROPE_THETA = 500000.0

DEFAULT_BS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_Q = (1, 2, 4, 8, 16)
DEFAULT_CTX = (1024, 4096)
MODELS = {"llama8b": LAYERS, "eagle3_draft8b": 1}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bs", type=_ints, default=DEFAULT_BS, help="batch sizes, comma separated")
    p.add_argument("--q", type=_ints, default=DEFAULT_Q, help="tokens per request per step")
    p.add_argument("--ctx", type=_ints, default=DEFAULT_CTX, help="KV-cache lengths")
    p.add_argument(
        "--models", default=",".join(MODELS), help="comma separated subset of " + ",".join(MODELS)
    )
    p.add_argument("--warmup", type=int, default=3, help="graph replays before timing")
    p.add_argument("--reps", type=int, default=20, help="timed graph replays (median taken)")
    p.add_argument("--kv-budget-gib", type=float, default=48.0, help="GPU memory for KV caches")
    p.add_argument("--out-dir", type=Path, default=Path("."), help="where the CSVs go")
    p.add_argument(
        "--prefix", default="h200_llama8b", help="CSV name: <prefix>_ctx<ctx>.csv in --out-dir"
    )
    p.add_argument("--ref", type=Path, default=None, help="reference CSV to compare with")
    p.add_argument("--markdown", type=Path, default=None, help="write the comparison table here")
    p.add_argument("--rows-goal", type=int, default=160, help="goal for the summary line")
    return p.parse_args(argv)


class Model:
    """Random-weight Llama-shaped decoder with ``n_layers`` layers and a full lm_head."""

    def __init__(self, torch, n_layers: int, device: str, seed: int) -> None:
        self.torch = torch
        self.n_layers = n_layers
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        dt = torch.bfloat16

        def w(*shape: int):
            return (torch.randn(*shape, generator=gen, device=device, dtype=dt) * 0.02).contiguous()

        self.embed = w(VOCAB, HIDDEN)
        self.layers = []
        for _ in range(n_layers):
            self.layers.append(
                {
                    "ln1": torch.ones(HIDDEN, device=device, dtype=dt) + w(HIDDEN),
                    "qkv": w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
                    "o": w(HIDDEN, HIDDEN),
                    "ln2": torch.ones(HIDDEN, device=device, dtype=dt) + w(HIDDEN),
                    "gate_up": w(2 * INTER, HIDDEN),
                    "down": w(HIDDEN, INTER),
                }
            )
        self.norm = torch.ones(HIDDEN, device=device, dtype=dt)
        self.lm_head = w(VOCAB, HIDDEN)

    def rms(self, x, weight):
        torch = self.torch
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return xf.to(x.dtype) * weight

    def rope(self, x, cos, sin):
        # x: [T, H, D]; cos/sin: [T, 1, D/2] (rotate-half RoPE, as Llama)
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, ids, cos, sin, caches, bs: int, q: int, ctx: int):
        """ids: [bs*q]; caches: list of (k, v) [bs, KV_HEADS, ctx, HEAD_DIM]. Returns logits."""
        torch = self.torch
        fnn = torch.nn.functional
        group = HEADS // KV_HEADS
        h = fnn.embedding(ids, self.embed)  # [T, HIDDEN]
        t = bs * q
        for i, lw in enumerate(self.layers):
            kc, vc = caches[i % len(caches)]
            x = self.rms(h, lw["ln1"])
            qkv = x @ lw["qkv"].t()
            qh, kh, vh = qkv.split((HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM), -1)
            qh = self.rope(qh.view(t, HEADS, HEAD_DIM), cos, sin)
            kh = self.rope(kh.view(t, KV_HEADS, HEAD_DIM), cos, sin)
            vh = vh.view(t, KV_HEADS, HEAD_DIM)
            # the q new tokens occupy the last q slots of the ctx-token cache
            kc[:, :, ctx - q :, :] = kh.view(bs, q, KV_HEADS, HEAD_DIM).transpose(1, 2)
            vc[:, :, ctx - q :, :] = vh.view(bs, q, KV_HEADS, HEAD_DIM).transpose(1, 2)
            # fold the query heads sharing a KV head into the length axis: [bs, KV, group*q, D]
            qg = (
                qh.view(bs, q, KV_HEADS, group, HEAD_DIM)
                .permute(0, 2, 3, 1, 4)
                .reshape(bs, KV_HEADS, group * q, HEAD_DIM)
            )
            att = fnn.scaled_dot_product_attention(qg, kc, vc)  # [bs, KV, group*q, D]
            att = (
                att.view(bs, KV_HEADS, group, q, HEAD_DIM).permute(0, 3, 1, 2, 4).reshape(t, HIDDEN)
            )
            h = h + att @ lw["o"].t()
            x = self.rms(h, lw["ln2"])
            gu = x @ lw["gate_up"].t()
            g, u = gu.chunk(2, dim=-1)
            h = h + (fnn.silu(g) * u) @ lw["down"].t()
        return self.rms(h, self.norm) @ self.lm_head.t()


def check_attention_fold(torch) -> float:
    """Relative error of the folded GQA attention against fp32 math with repeated KV heads."""
    fnn = torch.nn.functional
    bs, q, ctx, group = 2, 3, 257, HEADS // KV_HEADS
    qh = torch.randn(bs, q, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(bs, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(bs, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    qg = (
        qh.view(bs, q, KV_HEADS, group, HEAD_DIM)
        .permute(0, 2, 3, 1, 4)
        .reshape(bs, KV_HEADS, group * q, HEAD_DIM)
    )
    out = fnn.scaled_dot_product_attention(qg, k, v)
    out = (
        out.view(bs, KV_HEADS, group, q, HEAD_DIM).permute(0, 3, 1, 2, 4).reshape(bs, q, HEADS, -1)
    )
    qr = qh.double().permute(0, 2, 1, 3)  # [bs, H, q, D]
    kr = k.double().repeat_interleave(group, dim=1)
    vr = v.double().repeat_interleave(group, dim=1)
    ref = torch.softmax(qr @ kr.transpose(-1, -2) / math.sqrt(HEAD_DIM), -1) @ vr
    ref = ref.permute(0, 2, 1, 3)
    return float((out.double() - ref).norm() / ref.norm())


def measure(torch, model: Model, bs: int, q: int, ctx: int, kv_budget: float, args) -> float:
    dev = "cuda"
    t = bs * q
    per_layer = 2 * bs * KV_HEADS * ctx * HEAD_DIM * 2  # bytes, K and V, bf16
    n_caches = max(1, min(model.n_layers, int(kv_budget // per_layer)))
    caches = [
        (
            torch.randn(bs, KV_HEADS, ctx, HEAD_DIM, device=dev, dtype=torch.bfloat16),
            torch.randn(bs, KV_HEADS, ctx, HEAD_DIM, device=dev, dtype=torch.bfloat16),
        )
        for _ in range(n_caches)
    ]
    ids = torch.randint(0, VOCAB, (t,), device=dev)
    pos = (torch.arange(q, device=dev) + (ctx - q)).repeat(bs).float()
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, device=dev).float() / HEAD_DIM))
    ang = pos[:, None] * inv[None, :]
    cos = ang.cos().to(torch.bfloat16)[:, None, :]
    sin = ang.sin().to(torch.bfloat16)[:, None, :]

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(2):  # eager warm-up before capture (cuBLAS handles, SDPA kernel choice)
            out = model.forward(ids, cos, sin, caches, bs, q, ctx)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    if not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"non-finite logits at bs={bs} q={q} ctx={ctx}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model.forward(ids, cos, sin, caches, bs, q, ctx)
    for _ in range(args.warmup):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    if not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"non-finite logits after replay at bs={bs} q={q} ctx={ctx}")
    del graph, out, caches
    torch.cuda.empty_cache()
    return statistics.median(times)


def read_table(path: Path) -> dict[tuple[str, int, int, int], float]:
    rows: dict[tuple[str, int, int, int], float] = {}
    with path.open() as fh:
        lines = [ln for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    for r in csv.DictReader(lines):
        rows[(r["model"], int(r["bs"]), int(r["q"]), int(r["ctx"]))] = float(r["ms_per_step"])
    return rows


def compare(measured: dict, ref: dict) -> list[tuple[str, int, int, int, float, float, float]]:
    out = []
    for key in sorted(ref, key=lambda k: (k[0] != "llama8b", k[3], k[1], k[2])):
        if key in measured:
            out.append((*key, measured[key], ref[key], measured[key] / ref[key]))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("calibrate_gpu: no CUDA device", file=sys.stderr)
        return 2
    t_start = time.time()
    device = torch.cuda.get_device_name(0)
    props = torch.cuda.get_device_properties(0)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"[calibrate] device={device} sms={props.multi_processor_count} "
        f"mem={props.total_memory / 2**30:.0f}GiB torch={torch.__version__} "
        f"cuda={torch.version.cuda}",
        flush=True,
    )
    err = check_attention_fold(torch)
    print(
        f"[calibrate] folded-GQA SDPA vs fp64 reference: rel err {err:.2e} (bf16: < 1e-2)",
        flush=True,
    )
    if not err < 1e-2:
        print("calibrate_gpu: attention check failed", file=sys.stderr)
        return 3

    models = [m for m in args.models.split(",") if m]
    kv_budget = args.kv_budget_gib * 2**30
    results: dict[tuple[str, int, int, int], float] = {}
    total = len(models) * len(args.ctx) * len(args.bs) * len(args.q)
    done = 0
    failures: list[str] = []
    for name in models:
        t0 = time.time()
        model = Model(torch, MODELS[name], "cuda", seed=1234 + MODELS[name])
        torch.cuda.synchronize()
        print(
            f"[calibrate] {name}: {MODELS[name]} layer(s), weights "
            f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated, "
            f"built in {time.time() - t0:.1f}s",
            flush=True,
        )
        for ctx in args.ctx:
            for bs in args.bs:
                for q in args.q:
                    done += 1
                    try:
                        ms = measure(torch, model, bs, q, ctx, kv_budget, args)
                    except Exception as exc:  # report and go on: one shape must not lose the rest
                        failures.append(f"{name} bs={bs} q={q} ctx={ctx}: {exc!r}")
                        print(f"[calibrate] FAILED {failures[-1]}", flush=True)
                        torch.cuda.empty_cache()
                        continue
                    results[(name, bs, q, ctx)] = ms
                    print(
                        f"[calibrate] {done:3d}/{total} {name:15s} bs={bs:3d} q={q:2d} "
                        f"ctx={ctx:5d} {ms:9.4f} ms  ({time.time() - t_start:.0f}s)",
                        flush=True,
                    )
        del model
        torch.cuda.empty_cache()

    args.out_dir.mkdir(parents=True, exist_ok=True)
    method = (
        "torch eager ops captured in one CUDA graph per shape; 3 warm-up replays; median of "
        f"{args.reps} replays timed with CUDA events; random bf16 weights N(0,0.02^2); "
        "RMSNorm+QKV+RoPE+KV write+GQA SDPA (heads folded, no mask) over ctx cached tokens"
        "+o_proj+SwiGLU, final norm + lm_head over all bs*q tokens; "
        "llama8b = 32 layers, eagle3_draft8b = 1 layer + full lm_head"
    )
    written = []
    for ctx in args.ctx:
        path = args.out_dir / f"{args.prefix}_ctx{ctx}.csv"
        with path.open("w", newline="") as fh:
            fh.write(f"# measured {date} by benchmarks/calibrate_gpu.py\n")
            fh.write(
                f"# device: {device} ({props.multi_processor_count} SMs, "
                f"{props.total_memory / 2**30:.0f} GiB)\n"
            )
            fh.write(f"# torch {torch.__version__} (CUDA {torch.version.cuda}); no SGLang\n")
            fh.write(f"# method: {method}\n")
            fh.write(
                "# Llama-3.1-8B shapes: hidden 4096, inter 14336, 32 heads, 8 KV heads, "
                "vocab 128256, bf16\n"
            )
            wr = csv.writer(fh, lineterminator="\n")
            wr.writerow(["model", "bs", "q", "ctx", "ms_per_step"])
            for (name, bs, q, c), ms in sorted(
                results.items(), key=lambda kv: (list(MODELS).index(kv[0][0]), kv[0][1], kv[0][2])
            ):
                if c == ctx:
                    wr.writerow([name, bs, q, c, f"{ms:.4f}"])
        written.append(str(path))
        print(f"[calibrate] wrote {path}", flush=True)

    ratios: list[float] = []
    if args.ref is not None and args.ref.exists():
        ref = read_table(args.ref)
        rows = compare(results, ref)
        ratios = [r[-1] for r in rows]
        lines = [
            "| model | bs | q | ctx | measured ms | shared ms | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {m} | {b} | {q} | {c} | {ms:.3f} | {rm:.3f} | {ra:.2f} |"
            for m, b, q, c, ms, rm, ra in rows
        ]
        print("\n".join(lines))
        if args.markdown is not None:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text("\n".join(lines) + "\n")

    elapsed = time.time() - t_start
    print(f"[calibrate] finished in {elapsed:.0f}s; files: {', '.join(written)}")
    print(f"rows_measured: {len(results)} (goal >= {args.rows_goal})")
    print(f"ctx_tables_written: {len(written)} (goal >= 2)")
    print(f"failed_shapes: {len(failures)} (goal == 0)")
    if ratios:
        gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(
            f"ratio_vs_shared_geomean: {gm:.3f} over {len(ratios)} rows "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}; goal: reported)"
        )
    return 0 if not failures and len(results) >= args.rows_goal else 1


if __name__ == "__main__":
    sys.exit(main())
