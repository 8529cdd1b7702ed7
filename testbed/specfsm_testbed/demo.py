"""``specfsm demo``, engine part: the real SGLang 0.5.23 engine on CPU under a load ramp.

Starts the embedded default (tiny Llama target + EAGLE-3 draft, see
:mod:`specfsm_testbed`) with the CPU test bed switched on for itself, drives a load
ramp (few concurrent requests -> many -> few) with a progress bar, and prints per-phase
throughput and acceptance. Ctrl-C shuts the engine down cleanly. About a minute on 2 cores.

With specfsm on (the default), the engine runs the specfsm plugin with a ThresholdPolicy; the
demo then prints the mode timeline (one column per decode step, with the batch size) and the
JSON transition log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from specfsm import Mode
from specfsm.progress import Progress

DEFAULT_RAMP = ((2, "few"), (16, "many"), (2, "few"))


@dataclass
class PhaseResult:
    name: str
    requests: int
    tokens: int = 0
    seconds: float = 0.0
    accept_lengths: list[float] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    wall: tuple[float, float] = (0.0, 0.0)  # epoch seconds: which log lines belong here

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def accept_length(self) -> float | None:
        if not self.accept_lengths:
            return None
        return sum(self.accept_lengths) / len(self.accept_lengths)


def _prompts(n: int, seed: int) -> list[list[int]]:
    from specfsm_testbed.engine import default_prompts

    return default_prompts(n=n, length=16, seed=seed)


async def _run_phase(engine: Any, result: PhaseResult, max_new_tokens: int, seed: int) -> None:
    from specfsm_testbed.engine import sampling_params

    prompts = _prompts(result.requests, seed)
    done = [0] * len(prompts)
    label = f"  {result.name} x{result.requests}"
    bar = Progress(len(prompts) * max_new_tokens, f"{label:<14}", unit="tok")
    metas: list[dict[str, Any]] = [{} for _ in prompts]
    chunks: list[list[list[int]]] = [[] for _ in prompts]

    async def one(i: int, ids: list[int]) -> None:
        stream = await engine.async_generate(
            input_ids=ids, sampling_params=sampling_params(max_new_tokens), stream=True
        )
        async for chunk in stream:
            meta = chunk.get("meta_info", {})
            done[i] = int(meta.get("completion_tokens", done[i]))
            metas[i] = meta
            chunks[i].append(list(chunk.get("output_ids") or []))
            bar.update(sum(done))

    t0 = time.perf_counter()
    w0 = time.time()
    try:
        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    finally:
        result.seconds = time.perf_counter() - t0
        result.wall = (w0, time.time())
        result.tokens = sum(done)
        bar.close()
    # a stream's chunks carry either the whole output so far or the new tokens only
    for i, parts in enumerate(chunks):
        last = parts[-1] if parts else []
        whole = last if len(last) == done[i] else [t for part in parts for t in part]
        result.outputs.append(whole)
    result.accept_lengths = [
        float(m["spec_accept_length"]) for m in metas if "spec_accept_length" in m
    ]


def report(results: list[PhaseResult], out: TextIO = sys.stdout) -> None:
    """Per-phase throughput and acceptance table."""
    out.write(
        f"\n{'phase':<8} {'requests':>8} {'tokens':>7} {'seconds':>8} {'tok/s':>8} "
        f"{'accept len':>10}\n"
    )
    for r in results:
        acc = "-" if r.accept_length is None else f"{r.accept_length:.2f}"
        out.write(
            f"{r.name:<8} {r.requests:>8} {r.tokens:>7} {r.seconds:>8.2f} "
            f"{r.tokens_per_s:>8.1f} {acc:>10}\n"
        )
    out.flush()


GLYPH = {Mode.SPECULATING: "S", Mode.DRAINING: "d", Mode.PLAIN: "p", Mode.RESYNCING: "r"}


def _glyph(name: str) -> str:
    """The timeline glyph of a mode as the log writes it ("?" for anything else)."""
    mode = Mode.__members__.get(name)
    return GLYPH[mode] if mode is not None else "?"


def timeline(log_path: str, out: TextIO = sys.stdout, width: int = 100) -> None:
    """Mode per decode step (from specfsm.observation lines) and the transition lines."""
    import json

    try:
        with open(log_path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except OSError:
        out.write(f"(no specfsm log at {log_path})\n")
        return
    obs = [x for x in lines if x.get("event") == "specfsm.observation"]
    trans = [x for x in lines if x.get("event") == "specfsm.transition"]
    if obs:
        modes = "".join(_glyph(x["mode"]) for x in obs)
        peak = max(1, max(x["bs"] for x in obs))
        load = "".join(str(min(9, round(9 * x["bs"] / peak))) for x in obs)
        out.write(
            f"\nmode per decode step (S speculating, d draining, p plain, r resyncing); "
            f"load row: batch size as a digit, 0 = idle .. 9 = {peak} requests\n"
        )
        for i in range(0, len(modes), width):
            out.write(f"  step {i + 1:5d} mode {modes[i : i + width]}\n")
            out.write(f"  {'':10s} load {load[i : i + width]}\n")
    out.write(f"\nspecfsm transitions ({len(trans)}), from {log_path}:\n")
    for x in trans:
        out.write(
            f"  step {x['iteration']:5d} {x['src']:>11s} -> {x['dst']:<11s} {x['trigger']:<9s}"
            f" bs={x.get('bs', '-'):<3} {x.get('reason', '')}\n"
        )
    out.flush()


def check_policy(text: str) -> None:
    """Refuse a bad ``--policy`` shorthand before the engine starts (UsageError, one line),
    with the adapter's own parser and validator: exactly what the engine would refuse."""
    from specfsm_sglang.config import make_policy, parse_shorthand

    from specfsm.cli import UsageError

    try:
        make_policy(parse_shorthand(text))
    except (ValueError, TypeError) as exc:  # the adapter's ConfigError is a ValueError
        msg = str(exc).removeprefix("specfsm: ")
        raise UsageError(f"--policy {text!r}: {msg}") from None


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments, every one validated (UsageError, one line) before anything starts."""
    from specfsm.cli import ArgParser, UsageError, positive_int, positive_int_list

    p = ArgParser(prog="specfsm demo", description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="EAGLE3", choices=["EAGLE3", "EAGLE", "STANDALONE", "none"])
    p.add_argument("--tree", action="store_true", help="topk=4 tree instead of the topk=1 chain")
    p.add_argument("--overlap", action="store_true", help="SGLang overlap scheduler on")
    p.add_argument(
        "--ramp",
        type=positive_int_list,
        default=",".join(str(n) for n, _ in DEFAULT_RAMP),
        help="concurrent requests per phase, comma separated (default 2,16,2)",
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=32)
    p.add_argument(
        "--policy",
        default="threshold:high=6,low=3,debounce=2,min_dwell=4",
        help="specfsm policy shorthand (SPECFSM_POLICY syntax)",
    )
    p.add_argument("--no-specfsm", action="store_true", help="run without the specfsm plugin")
    p.add_argument(
        "--draft",
        default="agree",
        choices=["agree", "agree-mid", "random"],
        help="agree (default): an EAGLE draft that agrees with its target on every token; "
        "agree-mid: on ~0.6 of tokens; random: random EAGLE-3 weights (accepts ~nothing)",
    )
    p.add_argument(
        "--no-reference", action="store_true", help="skip the engine without speculation"
    )
    p.add_argument("--no-h200", action="store_true", help="skip the measured H200 part")
    p.add_argument(
        "--plot",
        default="out/demo_h200.png",
        help="PNG of the measured H200 sweep ('' for none; needs the sim extra)",
    )
    args = p.parse_args(argv)
    if not args.ramp:
        raise UsageError("argument --ramp: no phases (expected e.g. 2,16,2)")
    check_policy(args.policy)
    return args


def _run_ramp(
    engine: Any, counts: list[int], names: list[str], max_new_tokens: int
) -> list[PhaseResult]:
    # Warm-up (not reported): the first batches of each shape are slower.
    engine.generate(input_ids=_prompts(2, 99), sampling_params={"max_new_tokens": 8})
    results: list[PhaseResult] = []
    for k, (n, name) in enumerate(zip(counts, names, strict=True)):
        result = PhaseResult(name, n)
        results.append(result)
        engine.loop.run_until_complete(_run_phase(engine, result, max_new_tokens, k))
    return results


def compare(
    reference: list[PhaseResult], spec: list[PhaseResult], log_path: str, out: TextIO = sys.stdout
) -> None:
    """Per phase: no speculation vs specfsm, the modes specfsm used, greedy equality; then what
    this CPU can and cannot show."""
    modes_by_phase = _modes_by_phase(log_path, spec)
    out.write(
        f"\n{'phase':<6} {'requests':>8} {'no-spec tok/s':>13} {'specfsm tok/s':>13} "
        f"{'ratio':>6} {'accept len':>10} {'modes used':<22} {'outputs':<8}\n"
    )
    equal_all = 0
    total = 0
    for i, (r, s) in enumerate(zip(reference, spec, strict=True)):
        same = sum(a == b for a, b in zip(r.outputs, s.outputs, strict=True))
        equal_all += same
        total += len(r.outputs)
        acc = "-" if s.accept_length is None else f"{s.accept_length:.2f}"
        ratio = s.tokens_per_s / r.tokens_per_s if r.tokens_per_s else 0.0
        out.write(
            f"{s.name:<6} {s.requests:>8} {r.tokens_per_s:>13.1f} {s.tokens_per_s:>13.1f} "
            f"{ratio:>6.2f} {acc:>10} {modes_by_phase[i]:<22} {same}/{len(r.outputs)} equal\n"
        )
    out.write(
        f"\ngreedy outputs: {equal_all}/{total} sequences token-identical to the engine without "
        "speculation (fp32 CPU), under specfsm's switching.\n"
    )
    few = [(r, s) for r, s in zip(reference, spec, strict=True) if s.name == "few"]
    if few:
        r, s = few[0]
        if s.tokens_per_s < r.tokens_per_s:
            out.write(
                f"On this CPU speculation does not pay even at {s.requests} requests "
                f"({s.tokens_per_s:.0f} vs {r.tokens_per_s:.0f} tok/s without): SGLang's CPU\n"
                "speculation path is host-bound (torch_native attention, per-step Python work on "
                "a tiny model),\nso the GPU's shape (speculation wins at low load, loses at "
                "high load) cannot be shown here.\nThis demo shows the mechanism and its "
                "correctness on CPU; the benefit comes from the H200 below.\n"
            )
        else:
            out.write(
                f"On this CPU speculation pays at {s.requests} requests ({s.tokens_per_s:.0f} vs "
                f"{r.tokens_per_s:.0f} tok/s without).\n"
            )
    out.flush()


def _modes_by_phase(log_path: str, phases: list[PhaseResult]) -> list[str]:
    """The modes the specfsm observation lines saw during each phase (by their timestamps)."""
    if not log_path:
        return ["-"] * len(phases)
    try:
        with open(log_path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except OSError:
        return ["?"] * len(phases)
    obs = [x for x in lines if x.get("event") == "specfsm.observation"]
    out = []
    for ph in phases:
        seen: list[str] = []
        for x in obs:
            if ph.wall[0] <= float(x.get("ts", 0.0)) <= ph.wall[1] and x["mode"] not in seen:
                seen.append(x["mode"])
        out.append(",".join(m[:4] for m in seen) or "-")
    return out


WHY_ACCEPT = {
    "agree": "the test bed's draft agrees with its target by construction (a bigram target whose "
    "layers add nothing; an EAGLE draft that passes the token's embedding through: "
    "benchmarks/gpu/agree_weights.py), so every draft token is accepted: 4 tokens per verify",
    "agree-mid": "the draft sees the token's embedding through a 12-of-128-dimension projection, "
    "so it agrees with the target on ~0.6 of tokens",
    "random": "the draft's weights are random, so almost no draft token is accepted (~1.0)",
}


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status (130 after Ctrl-C)."""
    args = _parse(argv)
    counts: list[int] = args.ramp
    names = ["few" if n <= min(counts) else "many" for n in counts]
    try:
        from specfsm_testbed.engine import make_engine
    except ImportError as exc:
        from specfsm.cli import UsageError

        raise UsageError(
            f"needs SGLang 0.5.23 and a CPU torch (the test bed: ./dev demo): {exc}"
        ) from None

    agree = {"agree": "full", "agree-mid": "mid", "random": None}[args.draft]
    spec = "EAGLE" if agree else (None if args.spec == "none" else args.spec)
    target = "agree" if agree else "llama"
    print(
        "specfsm demo: real SGLang 0.5.23 on CPU, tiny Llama-shaped target; first without "
        "speculation,\nthen with speculation under specfsm (draft "
        f"{spec or 'none'} '{args.draft}', {'tree' if args.tree else 'chain'}, overlap "
        f"{'on' if args.overlap else 'off'}), the same load ramp {counts} on both."
    )
    if spec:
        print(f"accept length: {WHY_ACCEPT[args.draft]}.")
    engine = None
    reference: list[PhaseResult] = []
    results: list[PhaseResult] = []
    log_path = ""
    use_fsm = spec in ("EAGLE3", "EAGLE") and not args.no_specfsm
    try:
        if not args.no_reference:
            t0 = time.perf_counter()
            print("\n[1/3] engine WITHOUT speculation ...", flush=True)
            engine = make_engine(target=target, max_running_requests=max([*counts, 8]))
            print(f"engine up in {time.perf_counter() - t0:.1f}s", flush=True)
            reference = _run_ramp(engine, counts, names, args.max_new_tokens)
            engine.shutdown()
            engine = None
        t0 = time.perf_counter()
        print("\n[2/3] engine WITH speculation under specfsm ...", flush=True)
        if use_fsm:
            import os
            import tempfile

            log_path = os.path.join(tempfile.mkdtemp(prefix="specfsm-demo-"), "transitions.jsonl")
            os.environ["SPECFSM_POLICY"] = args.policy
            os.environ["SPECFSM_CONFIG_JSON"] = json.dumps({"log": log_path, "observe_every": 1})
            print(f"specfsm on: policy {args.policy}; log {log_path}", flush=True)
        engine = make_engine(
            target=target,
            spec=spec,
            tree=args.tree and spec is not None,
            overlap=args.overlap,
            agree=agree,
            max_running_requests=max([*counts, 8]),
        )
        if use_fsm:
            from specfsm_sglang import hooks

            ensure = getattr(hooks, "ensure_tokenizer_side", None)
            if ensure is not None:  # this process started an engine without specfsm first
                ensure()
        print(f"engine up in {time.perf_counter() - t0:.1f}s", flush=True)
        results = _run_ramp(engine, counts, names, args.max_new_tokens)
        engine.shutdown()
        engine = None
        report(results)
        if log_path:
            timeline(log_path)
        if reference:
            compare(reference, results, log_path)
        if not args.no_h200:
            from specfsm_testbed import demo_h200

            print("\n[3/3] what this buys on a GPU (measured on an H200, not here)")
            levels = demo_h200.load_levels()
            demo_h200.report(levels)
            demo_h200.report_serving()
            if args.plot:
                import os

                os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
                demo_h200.plot(levels, args.plot)
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: shutting the engine down\n")
        if results:
            report(results)
        return 130
    finally:
        if engine is not None:
            engine.shutdown()


def register_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `specfsm demo` subcommand (entry point ``specfsm.cli: demo``)."""
    from specfsm.cli import add_command

    add_command(
        subparsers,
        "demo",
        "real SGLang on CPU: tiny target + EAGLE-3 draft under a load ramp",
        main,
    )


if __name__ == "__main__":
    from specfsm.cli import main as cli_main

    raise SystemExit(cli_main(["demo", *sys.argv[1:]]))
