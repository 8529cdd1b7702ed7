#!/usr/bin/env python3
"""The specfsm acceptance suite inside a real SGLang engine: one engine per process.

Run THERE (the GPU box, SGLang 0.5.17) by ``run_on_device.sh specfsm``, once per engine
configuration; the same script runs HERE on the CPU test bed (``--cpu``: SGLang 0.5.23, tiny
models) so that a change can be tried before it costs device minutes.

Phases (``--phases``, in this order, each optional):

``greedy``
    Two prompt sets (8 x 48-token prompts, 64 new tokens; 64 x 32-token prompts, 32 new tokens
    at bs 64), temperature 0, ``ignore_eos``. Without specfsm: the reference outputs. With
    specfsm: once per schedule, set through the control file before the batch: flip every 1, 2
    and 3 decode iterations, a random schedule (p 0.5, a new draw every iteration), pinned
    PLAIN, pinned SPECULATING and a threshold policy (bs 64 leaves speculation, bs 8 returns).
    Output ids go to ``greedy_<tag>.json``; the summary compares them with the reference.
``timing``
    For each context length and batch size N: N requests x ctx random prompt tokens, 40 new
    tokens, with every decode step bracketed by a GPU synchronize (``sitecustomize.py`` of this
    folder, on only while the flag file ``$SPECFSM_TIMING_FILE.on`` exists). With specfsm the
    policy flips every 8 iterations, so one batch gives SPECULATING, DRAINING, PLAIN and
    RESYNCING steps, each record tagged with the mode specfsm had attached.
``e2e``
    The figure that counts: wall time of a batch generating L2 minus L1 new tokens, no per-step
    synchronize, divided by L2 - L1: milliseconds per decode step (per output token with
    speculation). With specfsm once pinned PLAIN and once pinned SPECULATING. Prompts are
    prefilled once per N and then hit the radix cache.
``sweep``
    Fixed concurrency c (all requests at once), ctx-token prompts, decode tokens/s from the same
    L2 - L1 difference. Without specfsm: no speculation. With specfsm: always speculating
    (pinned), pinned PLAIN, and the threshold policy given by ``--sweep-policy``.
``shapes``, ``steady``
    Every static draft shape and the shape-choosing policy on one engine (``suite_shapes.py``).

Every phase writes JSON lines to ``results_<tag>.jsonl``; with specfsm the transition log goes
to ``transitions_<tag>.jsonl`` and specfsm's counters (transitions, action failures, forwards by
mode, SGLang's idle memory checks) to ``counters_<tag>.json`` (through the test channel
``SPECFSM_TEST_DIR``). ``summarize_specfsm.py`` turns a results folder into
``specfsm_summary.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_shapes import SHAPES, ShapePhases

#: Schedules of the greedy phase: name -> control-file content.
SCHEDULES: list[tuple[str, dict[str, Any]]] = [
    ("every1", {"policy": {"name": "every", "k": 1}}),
    ("every2", {"policy": {"name": "every", "k": 2}}),
    ("every3", {"policy": {"name": "every", "k": 3}}),
    ("random", {"policy": {"name": "random", "seed": 7, "p": 0.5, "hold": 1}}),
    ("pin_plain", {"pin": "PLAIN"}),
    ("pin_spec", {"pin": "SPECULATING"}),
    (
        "threshold",
        {"policy": {"name": "threshold", "high": 32, "low": 16, "debounce": 1, "min_dwell": 2}},
    ),
]
TIMING_FLIP = {"policy": {"name": "every", "k": 8}}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


class Suite(ShapePhases):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.tag: str = args.tag
        self.fsm: bool = args.fsm
        self.results = open(self.out / f"results_{self.tag}.jsonl", "a", buffering=1)  # noqa: SIM115
        self.control = self.out / f"control_{self.tag}.json"
        self.timing = os.environ.get("SPECFSM_TIMING_FILE")
        self.rng = random.Random(1)
        self.vocab = (3, 120000) if not args.cpu else (3, 250)
        self.engine: Any = None
        self.t0 = time.time()

    # ------------------------------------------------------------------ plumbing
    def say(self, text: str) -> None:
        print(f"[suite {self.tag} +{time.time() - self.t0:.0f}s] {text}", flush=True)

    def emit(self, **kw: Any) -> None:
        kw.update(tag=self.tag, t=time.time())
        self.results.write(json.dumps(kw, default=str) + "\n")

    def mark(self, what: str, **kw: Any) -> None:
        if self.timing:
            with open(self.timing, "a") as fh:
                fh.write(json.dumps({"t": time.time(), "mark": what, **kw}) + "\n")

    def timing_on(self, on: bool) -> None:
        if not self.timing:
            return
        flag = Path(self.timing + ".on")
        if on:
            flag.touch()
        elif flag.exists():
            flag.unlink()

    def set_control(self, content: dict[str, Any]) -> None:
        """Write the control file atomically; specfsm reads it at the next decode forward."""
        if not self.fsm:
            return
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(content))
        os.replace(tmp, self.control)
        time.sleep(0.02)  # a distinct mtime for the next write

    def prompts(self, n: int, length: int) -> list[list[int]]:
        lo, hi = self.vocab
        return [[self.rng.randrange(lo, hi) for _ in range(length)] for _ in range(n)]

    def generate(self, prompts: list[list[int]], new: int) -> list[dict[str, Any]]:
        sp = {"temperature": 0.0, "max_new_tokens": new, "ignore_eos": True}
        return list(self.engine.generate(input_ids=prompts, sampling_params=sp))

    # ------------------------------------------------------------------ engine
    def engine_kwargs(self) -> dict[str, Any]:
        a = self.args
        shape = SHAPES[a.spec]
        if a.cpu:
            from specfsm_testbed import engine as tb

            kw = tb.engine_args(
                "bigram" if a.bigram else "llama",
                a.algo if a.spec != "none" else None,
                tree=a.spec == "tree",
                overlap=a.overlap,
                disable_radix_cache=False,
                max_running_requests=max(64, max(a.bs)),
                max_total_tokens=1 << 16,
            )
            if a.spec != "none":
                kw.update(shape)
            return kw
        gbs = a.graph_bs
        kw = dict(
            model_path=a.target,
            load_format="dummy",
            dtype="bfloat16",
            attention_backend=a.attention_backend,
            sampling_backend="pytorch",
            skip_tokenizer_init=True,
            disable_overlap_schedule=not a.overlap,
            disable_radix_cache=False,
            cuda_graph_bs_decode=gbs,
            cuda_graph_max_bs_decode=max(gbs),
            max_running_requests=max(gbs),
            mem_fraction_static=a.mem_fraction,
            random_seed=0,
            log_level="warning",
        )
        if a.spec != "none":
            kw.update(speculative_algorithm=a.algo, speculative_draft_model_path=a.draft, **shape)
        return kw

    def start(self) -> None:
        a = self.args
        if self.fsm:
            cfg = {
                "policy": {"name": "fixed", "speculate": True},
                "log": str(self.out / f"transitions_{self.tag}.jsonl"),
                "control_file": str(self.control),
                "control_every": 1,
                "contracts_every": 1,
                **json.loads(a.fsm_config),
            }
            cfg_path = self.out / f"specfsm_{self.tag}.json"
            cfg_path.write_text(json.dumps(cfg))
            os.environ["SPECFSM_CONFIG"] = str(cfg_path)
            # specfsm, its test channel (counters) and, on CPU, the CPU test bed
            os.environ["SGLANG_PLUGINS"] = "specfsm,specfsm_test,specfsm_cpu"
            test_dir = self.out / f"testdir_{self.tag}"
            shutil.rmtree(test_dir, ignore_errors=True)
            test_dir.mkdir()
            os.environ["SPECFSM_TEST_DIR"] = str(test_dir)
            # the switching schedules use the test policies (every, random): opt in
            os.environ["SPECFSM_TEST_POLICIES"] = "1"
        kwargs = self.engine_kwargs()
        self.say(f"starting engine: {kwargs}")
        t = time.time()
        try:
            if a.cpu:
                from specfsm_testbed import engine as tb

                tb.enable_cpu_testbed()
            import sglang

            self.engine = sglang.Engine(**kwargs)
        except BaseException as exc:
            self.emit(phase="start", ok=False, error=f"{type(exc).__name__}: {exc}")
            raise
        self.emit(phase="start", ok=True, start_s=time.time() - t, kwargs=kwargs)
        self.say(f"engine started in {time.time() - t:.1f}s")
        self.mark("started")

    def stop(self) -> None:
        self.set_control({"pin": None})
        self.engine.shutdown()
        if self.fsm:
            src = Path(os.environ["SPECFSM_TEST_DIR"]) / "counters-rank0.json"
            if src.exists():
                shutil.copy(src, self.out / f"counters_{self.tag}.json")
        self.say("engine shut down")

    # ------------------------------------------------------------------ phases
    def phase_greedy(self) -> None:
        rng_state = self.rng.getstate()
        self.rng = random.Random(0)
        sets = {"small": (self.prompts(8, 48), 64), "bs64": (self.prompts(64, 32), 32)}
        sets = {k: v for k, v in sets.items() if k in self.args.greedy_sets}
        self.rng.setstate(rng_state)
        schedules = SCHEDULES if self.fsm else [("reference", {})]
        if self.fsm and json.loads(self.args.fsm_config).get("shapes"):
            labels = self.shape_labels()
            cycle = {
                "name": "specfsm_testbed.shape_policies:ShapeCycle",
                "targets": [*labels[1:], "PLAIN", labels[0]],
                "every": 2,
            }
            schedules = [*schedules, ("shape_cycle", {"policy": cycle})]
        out: dict[str, Any] = {}
        for name, control in schedules:
            self.set_control(control)
            out[name] = {}
            for set_name, (prompts, new) in sets.items():
                t = time.time()
                res = self.generate(prompts, new)
                out[name][set_name] = [list(r["output_ids"]) for r in res]
                acc = [r.get("meta_info", {}).get("spec_accept_length") for r in res]
                self.say(f"greedy {name}/{set_name}: {time.time() - t:.1f}s accept {acc[:3]}")
        self.set_control({"pin": None})
        (self.out / f"greedy_{self.tag}.json").write_text(json.dumps(out))

    def phase_timing(self) -> None:
        a = self.args
        self.set_control(TIMING_FLIP)
        for ctx in a.ctx:
            for n in a.bs:
                if n * (ctx + 48) > a.max_kv_tokens:
                    self.say(f"timing ctx {ctx} bs {n}: skipped (KV pool)")
                    continue
                prompts = self.prompts(n, ctx)
                self.generate(prompts, 1)  # prefill once, untimed (radix cache)
                self.timing_on(True)
                self.mark("begin", bs=n, ctx=ctx)
                t = time.time()
                self.generate(prompts, a.timing_len)
                self.mark("end", bs=n, ctx=ctx)
                self.timing_on(False)
                self.say(f"timing ctx {ctx} bs {n}: {time.time() - t:.1f}s")
                self.engine.flush_cache()
        self.set_control({"pin": None})

    def _decode_ms(self, prompts: list[list[int]], lens: tuple[int, int]) -> dict[str, Any]:
        """Milliseconds per decode step (per output token), from the L2 - L1 wall difference."""
        walls: dict[int, list[float]] = {lens[0]: [], lens[1]: []}
        res: list[dict[str, Any]] = []
        for _ in range(self.args.reps):
            for length in lens:
                t = time.perf_counter()
                res = self.generate(prompts, length)
                walls[length].append(time.perf_counter() - t)
        best = {k: min(v) for k, v in walls.items()}
        ms = (best[lens[1]] - best[lens[0]]) / (lens[1] - lens[0]) * 1e3
        acc = [r.get("meta_info", {}).get("spec_accept_length") for r in res]
        acc_f = [float(x) for x in acc if x is not None]
        return {
            "ms_per_token": ms,
            "walls": walls,
            "accept_length": sum(acc_f) / len(acc_f) if acc_f else None,
        }

    def phase_e2e(self) -> None:
        a = self.args
        modes = [("PLAIN", {"pin": "PLAIN"}), ("SPECULATING", {"pin": "SPECULATING"})]
        if not self.fsm:
            modes = [("none" if a.spec == "none" else "spec", {})]
        for ctx in a.ctx:
            for n in a.e2e_bs:
                if n * (ctx + a.e2e_lens[1]) > a.max_kv_tokens:
                    continue
                prompts = self.prompts(n, ctx)
                self.generate(prompts, 1)  # prefill into the radix cache
                for mode, control in modes:
                    self.set_control(control)
                    r = self._decode_ms(prompts, a.e2e_lens)
                    self.emit(phase="e2e", mode=mode, bs=n, ctx=ctx, **r)
                    self.say(f"e2e ctx {ctx} bs {n} {mode}: {r['ms_per_token']:.3f} ms/token")
                self.engine.flush_cache()
        self.set_control({"pin": None})

    def phase_sweep(self) -> None:
        a = self.args
        variants: list[tuple[str, dict[str, Any]]] = [
            ("nospec" if a.spec == "none" else "spec", {})
        ]
        if self.fsm:
            variants = [
                ("always_speculate", {"pin": "SPECULATING"}),
                ("plain", {"pin": "PLAIN"}),
                ("specfsm", {"policy": json.loads(a.sweep_policy)}),
            ]
        ctx = a.ctx[0]
        for c in a.sweep_c:
            if c * (ctx + a.sweep_lens[1] * 2) > a.max_kv_tokens:
                continue
            prompts = self.prompts(c, ctx)
            self.generate(prompts, 1)
            for name, control in variants:
                self.set_control(control)
                r = self._decode_ms(prompts, a.sweep_lens)
                tps = 1e3 * c / r["ms_per_token"] if r["ms_per_token"] > 0 else 0.0
                self.emit(phase="sweep", variant=name, c=c, ctx=ctx, tok_s=tps, **r)
                self.say(f"sweep c {c} {name}: {tps:.0f} tok/s accept {r['accept_length']}")
            self.engine.flush_cache()
        self.set_control({"pin": None})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", required=True)
    ap.add_argument("--spec", choices=sorted(SHAPES), required=True)
    ap.add_argument("--algo", default="EAGLE3", choices=["EAGLE3", "EAGLE"])
    ap.add_argument("--fsm", action="store_true", help="specfsm on (control file, test dir)")
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument(
        "--fsm-config", default="{}", help='extra specfsm config keys, e.g. {"plain": "warm"}'
    )
    ap.add_argument("--target", default="")
    ap.add_argument("--draft", default="")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phases", default="greedy,timing,e2e")
    ap.add_argument("--bs", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--graph-bs", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--ctx", type=_ints, default=[1024])
    ap.add_argument("--greedy-sets", default="small,bs64", help="greedy prompt sets to run")
    ap.add_argument("--timing-len", type=int, default=40)
    ap.add_argument("--e2e-bs", type=_ints, default=[1, 16, 64, 256])
    ap.add_argument("--e2e-lens", type=_ints, default=[16, 144])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--sweep-c", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--sweep-lens", type=_ints, default=[16, 80])
    ap.add_argument(
        "--sweep-policy",
        default='{"name": "threshold", "high": 32, "low": 16, "debounce": 1, "min_dwell": 2}',
    )
    ap.add_argument("--shapes-c", type=_ints, default=[1, 8, 32])
    ap.add_argument(
        "--shapes-policy",
        default='{"name": "goodput", "table": "h200_sglang0517_llama8b", "shape": "chain3", '
        '"accept_len": 2.5}',
        help="the shape-choosing policy of the shapes phase (JSON)",
    )
    ap.add_argument("--steady-c", type=_ints, default=[32])
    ap.add_argument("--steady-s", type=float, default=12.0, help="steady phase window (s)")
    ap.add_argument("--max-kv-tokens", type=int, default=600_000)
    ap.add_argument("--attention-backend", default="flashinfer")
    ap.add_argument("--mem-fraction", type=float, default=0.8)
    ap.add_argument("--cpu", action="store_true", help="the CPU test bed (SGLang 0.5.23)")
    ap.add_argument("--bigram", action="store_true", help="CPU: the bigram test-bed target")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    suite = Suite(args)
    suite.start()
    try:
        for phase in [p for p in args.phases.split(",") if p]:
            t = time.time()
            getattr(suite, f"phase_{phase}")()
            suite.emit(phase=f"{phase}_done", s=time.time() - t)
    finally:
        suite.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
