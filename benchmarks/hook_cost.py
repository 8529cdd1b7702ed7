"""What specfsm's SGLang hooks cost the scheduler per forward, in the real engine.

Starts the real SGLang engine on CPU (the test bed's agreeing EAGLE pair, chain 3, overlap on,
8 requests) with specfsm held in SPECULATING (a threshold policy above any batch it sees;
contracts every 16 forwards as the serving benchmark runs them) or, with ``--mode plain``, in
zero-tax PLAIN (pinned through the control file: each round's prompts are prefilled without the
draft, `deferred_prefill`), its hooks timed in the
scheduler process (``benchmarks/hook_timing/sitecustomize.py``: each hook's own time, an AROUND
hook's without the SGLang call it wraps). Each round generates the same batch; per round it
prints the forwards, the hooks' own time per forward and its share of the round's wall time
per forward, then the mean over rounds with their spread. A PLAIN step's and a deferred
prefill's own target forward are not counted as hook time; in PLAIN each round also prints
the host time a deferred prefill adds (``in_deferred_prefill``, its target forward taken out).

The engine here is a CPU one, so its forwards are slow and the share is small; the hooks' own
microseconds are what carries over to a GPU server's host, where a K-wide decode step of an 8B
model takes about 10 ms (docs/serving.md).

With ``--policy goodput`` the policy deciding each forward is the GPU serving bed's goodput
policy (`launch.GPU_GOODPUT`: its table's prices, online calibration, the context of every
decode and the prefill pressure), optionally priced from a served run's start-up profile
(``--profile``), instead of the threshold; in SPECULATING at 8 requests both decide to stay, so
the difference is what the goodput policy's own decision costs per forward.

Usage: python benchmarks/hook_cost.py [--rounds 3] [--tokens 256] [--mode spec|plain]
       [--policy threshold|goodput] [--profile CSV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the deferred prefill's own total in the hooks' file (benchmarks/hook_timing)
DEFERRED = "in_deferred_prefill"
sys.path.insert(0, str(HERE / "serving"))
from launch import GPU_GOODPUT  # noqa: E402  (the serving benchmark's goodput policy)
from ratios import mean_spread  # noqa: E402  (the serving benchmark's repetitions)

#: a threshold policy above any batch: it holds SPECULATING (``--mode plain`` pins PLAIN
#: over it through the control file, as the serving benchmark's pinned variants do)
POLICY = {"name": "threshold", "high": 1000, "low": 999}


def totals(out: Path) -> dict[str, list[int]]:
    """The scheduler's latest totals, name -> [calls, ns] (one scheduler: one file)."""
    files = sorted(out.glob("hooks-*.json"))
    return json.loads(files[-1].read_text()) if files else {}


def settle(out: Path, before: dict[str, list[int]], wait_s: float = 10.0) -> dict[str, list[int]]:
    """Totals once the scheduler has gone idle after a round (it writes them then)."""
    deadline = time.monotonic() + wait_s
    now = totals(out)
    while now.get("_around_forward") == before.get("_around_forward") and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
        now = totals(out)
    time.sleep(0.3)  # the idle write after the round's last forward
    return totals(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256, help="new tokens per request and round")
    ap.add_argument("--mode", choices=("spec", "plain"), default="spec", help="the mode held")
    ap.add_argument(
        "--policy",
        choices=("threshold", "goodput"),
        default="threshold",
        help="the policy deciding each forward: a threshold above any batch, or the GPU serving "
        "bed's goodput policy (launch.GPU_GOODPUT, its prices, calibration and prefill pressure)",
    )
    ap.add_argument(
        "--profile",
        default="",
        help="with --policy goodput: a start-up profile CSV to price from, as a served run's "
        "(its results' specfsm/profile-0.csv)",
    )
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="hook_cost_"))
    os.environ["HOOK_TIMING_OUT"] = str(out)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        x for x in (str(HERE / "hook_timing"), os.environ.get("PYTHONPATH", "")) if x
    )
    policy = POLICY if args.policy == "threshold" else GPU_GOODPUT
    if args.profile:
        policy = {**policy, "profile": args.profile}
    cfg = {"policy": policy, "plain": "zero_tax", "contracts_every": 16, "control_every": 16}
    # the transition log tells whether the policy held the mode the rounds are meant to time
    cfg["log"] = str(out / "transitions-rank{rank}.jsonl")
    if args.mode == "plain":
        control = out / "control.json"
        control.write_text(json.dumps({"pin": "PLAIN"}))
        cfg["control_file"] = str(control)
    os.environ["SPECFSM_CONFIG_JSON"] = json.dumps(cfg)
    from specfsm_testbed import engine as tb

    eng = tb.make_engine(spec="EAGLE", agree="mid", overlap=True, max_running_requests=8)
    per_fwd: list[float] = []
    prefill_us: list[float] = []
    shares: list[float] = []
    try:
        prompts = tb.default_prompts(8, 24)
        tb.generate(eng, prompts, 16)  # warm-up
        before = settle(out, {})
        for r in range(args.rounds):
            t0 = time.perf_counter()
            tb.generate(eng, prompts, args.tokens)
            wall = time.perf_counter() - t0
            after = settle(out, before)
            fwd = after["_around_forward"][0] - before.get("_around_forward", [0, 0])[0]
            own = {k: v[1] - before.get(k, [0, 0])[1] for k, v in after.items()}
            us = sum(v for k, v in own.items() if k.startswith("_")) / fwd / 1e3
            step_us = wall / fwd * 1e6
            per_fwd.append(us)
            shares.append(us / step_us)
            parts = " ".join(
                f"{k.strip('_')}={v / fwd / 1e3:.1f}"
                for k, v in sorted(own.items())
                if k.startswith("_")
            )
            calls = after.get(DEFERRED, [0, 0])[0] - before.get(DEFERRED, [0, 0])[0]
            if calls:
                per = own[DEFERRED] / calls / 1e3
                prefill_us.append(per)
                parts += f"; {calls} deferred prefills, {per:.1f} us each"
            print(
                f"round {r}: {fwd} forwards, hooks {us:.1f} us per forward ({parts}), "
                f"wall {step_us:.0f} us per forward, share {us / step_us:.4f}",
                flush=True,
            )
            before = after
    finally:
        eng.shutdown()
    if not per_fwd:
        return 1
    mean, spread = mean_spread(per_fwd)
    print(
        f"hook_us_per_forward: {mean:.1f} (rounds {', '.join(f'{x:.1f}' for x in per_fwd)}; "
        f"spread {spread:.1%}) (CPU engine, this machine)"
    )
    if prefill_us:
        pm, ps = mean_spread(prefill_us)
        print(
            f"deferred_prefill_host_us: {pm:.1f} (rounds "
            f"{', '.join(f'{x:.1f}' for x in prefill_us)}; spread {ps:.1%}) (info: what a "
            "prefill while PLAIN adds beside its target forward, CPU engine, this machine)"
        )
    switches = sum(
        '"specfsm.transition"' in line
        for f in out.glob("transitions-rank*.jsonl")
        for line in f.read_text().splitlines()
    )
    held = 2 if args.mode == "plain" else 0  # a pinned PLAIN's own switch: LOAD_HIGH, DRAINED
    print(
        f"policy: {policy['name']}; transitions logged: {switches} (info: the mode held "
        f"when it is {held})"
    )
    print(
        f"hook_share_of_cpu_forward: {statistics.fmean(shares):.4f} (info: of this CPU "
        "engine's wall time per forward)"
    )
    print(
        f"hook_share_of_10ms_gpu_step: {mean / 10_000:.4f} (info: if the GPU host were as "
        "slow as this machine)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
