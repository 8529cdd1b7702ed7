"""Per-iteration and per-transition cost of specfsm, measured side by side in one run.

Prints, for this machine and this run:
  steady_state_us      mode read + ThresholdPolicy.decide via SpecFSM.step, no transition due
  steady_state_obs_us  the same including building the Observation record
  observation_line_us  one sampled specfsm.observation JSON line (observe_every=N)
  transition_us        one real transition incl. actions (no-op) and its JSON log line
  sglang_adaptive_us   upstream AdaptiveSpeculativeParams.get_steps_for_batch (if sglang imports)
and ends with one summary line per goal.

Usage: python benchmarks/step_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

from specfsm import Event, Mode, Observation, SpecFSM, ThresholdPolicy, TransitionLog, json_logger


def attrs_dict(o: Observation) -> dict[str, object]:
    """An Observation's fields (to rebuild one at another iteration)."""
    import attrs

    return attrs.asdict(o, recurse=False)


def per_call_us(fn: Callable[[int], None], n: int, repeats: int) -> float:
    """Median over `repeats` runs of the mean per-call time of fn(n) (fn loops n times)."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(n)
        samples.append((time.perf_counter_ns() - t0) / n / 1000.0)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    args = ap.parse_args()
    n, reps = (20_000, 5) if args.quick else (200_000, 9)
    devnull = open(os.devnull, "w")  # noqa: SIM115

    # 1. steady state: bs inside the dead band, so no transition is ever due
    fsm = SpecFSM(
        ThresholdPolicy(high=64, low=16, debounce=4, min_dwell=32),
        log=TransitionLog(json_logger(devnull)),
    )
    obs = [Observation(iteration=i, decode_bs=32, running=32) for i in range(1024)]
    step = fsm.step

    def steady(k: int) -> None:
        for i in range(k):
            step(obs[i & 1023])

    def steady_with_obs(k: int) -> None:
        for i in range(k):
            step(Observation(iteration=i, decode_bs=32, running=32))

    def baseline_loop(k: int) -> None:
        for i in range(k):
            obs[i & 1023]

    loop_us = per_call_us(baseline_loop, n, reps)
    steady_us = per_call_us(steady, n, reps) - loop_us
    steady_obs_us = per_call_us(steady_with_obs, n, reps) - loop_us
    assert fsm.transitions == 0, "steady-state run must not transition"

    # 2. observation sampling: observe_every=1 writes a line every step
    fsm_obs = SpecFSM(
        ThresholdPolicy(high=64, low=16, debounce=4, min_dwell=32),
        log=TransitionLog(json_logger(devnull)),
        observe_every=1,
    )
    step_obs = fsm_obs.step

    def sampled(k: int) -> None:
        for i in range(k):
            step_obs(obs[i & 1023])

    obs_line_us = per_call_us(sampled, n // 10, reps) - steady_us - loop_us

    # 3. real transitions: the full cycle, each with its JSON line
    cyc = SpecFSM(log=TransitionLog(json_logger(devnull)))
    cycle = (Event.LOAD_HIGH, Event.DRAINED, Event.LOAD_LOW, Event.RESYNCED)
    o = Observation(iteration=1, decode_bs=40, running=40, accept_lens=(3, 2, 4))

    def transitions_(k: int) -> None:
        pe = cyc.process_event
        for i in range(k):
            pe(cycle[i & 3], o, "bench")

    trans_us = per_call_us(transitions_, n // 20, reps)
    assert cyc.mode is Mode.SPECULATING

    # 3b. the shape-choosing goodput policy in steady SPECULATING at bs 32: every
    # iteration feeds 32 accept lengths and a measured step time, no transition due
    from specfsm.model.acceptance import DraftShape
    from specfsm.model.costs import CostModel, load_table
    from specfsm.policy.goodput import GoodputPolicy

    launch = DraftShape.chain(3)
    shapes = [DraftShape.chain(k) for k in (1, 2, 3, 5, 7)]
    gp = GoodputPolicy(CostModel(load_table("h200_sglang0517_llama8b"), launch), 2.4, shapes=shapes)
    gfsm = SpecFSM(gp, log=TransitionLog(json_logger(devnull)), shapes=shapes, shape=launch)
    accepts = (3, 2, 4, 1, 3, 2, 3, 4) * 4
    gobs = [
        Observation(
            iteration=i,
            decode_bs=32,
            running=32,
            accept_lens=accepts,
            accept_shape=launch,
            step_ms=12.0,
            step_bs=32,
            step_shape=launch,
            step_kind="spec",
            shape=launch,
        )
        for i in range(1024)
    ]
    for i in range(4096):  # settle: the policy's probes and first decisions happen here
        gfsm.step(Observation(**{**attrs_dict(gobs[i & 1023]), "iteration": i}))
    gstep = gfsm.step
    base = 4096
    t_before = gfsm.transitions

    def goodput_steady(k: int) -> None:
        nonlocal base
        for i in range(k):
            o = gobs[i & 1023]
            gstep(Observation(**{**attrs_dict(o), "iteration": base + i}))
        base += k

    def obs_only(k: int) -> None:
        for i in range(k):
            o = gobs[i & 1023]
            Observation(**{**attrs_dict(o), "iteration": base + i})

    goodput_us = per_call_us(goodput_steady, n // 10, reps) - per_call_us(obs_only, n // 10, reps)
    goodput_moves = gfsm.transitions - t_before

    # 4. upstream SGLang adaptive decision, same run
    sglang_us: float | None = None
    try:
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

        params = AdaptiveSpeculativeParams(initial_steps=3)
        get = params.get_steps_for_batch

        def upstream(k: int) -> None:
            for _ in range(k):
                get(32)

        sglang_us = per_call_us(upstream, n, reps) - loop_us
    except Exception as exc:  # sglang absent or not importable here
        print(f"(sglang adaptive not measured: {type(exc).__name__}: {exc})", file=sys.stderr)

    print(f"python {sys.version.split()[0]}, n={n}, repeats={reps}, loop overhead {loop_us:.3f} us")
    print(f"{'measure':28s} {'us':>8s}")
    print(f"{'steady state (step)':28s} {steady_us:8.3f}")
    print(f"{'steady state + Observation':28s} {steady_obs_us:8.3f}")
    print(f"{'observation JSON line':28s} {obs_line_us:8.3f}")
    print(f"{'transition + JSON line':28s} {trans_us:8.3f}")
    if sglang_us is not None:
        print(f"{'sglang get_steps_for_batch':28s} {sglang_us:8.3f}")
        print(f"ratio specfsm steady / sglang adaptive: {steady_us / sglang_us:.2f}")
    print(
        f"{'goodput, 5 shapes, bs 32':28s} {goodput_us:8.3f}  (transitions while timed: "
        f"{goodput_moves})"
    )
    print(f"steady_state_us: {steady_us:.3f} (goal <= 0.5)")
    print(f"transition_us: {trans_us:.2f} (goal <= 30)")
    print(f"goodput_shapes_steady_us: {goodput_us:.2f} (reported, no goal)")
    if sglang_us is not None:
        print(f"steady_vs_sglang_adaptive_ratio: {steady_us / sglang_us:.2f} (reported, no goal)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
