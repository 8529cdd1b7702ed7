"""What PLAIN costs on the CPU test bed, zero-tax vs SGLang's steps=0, side by side in one run.

The CPU benchmark of PLAIN's cost. Engines (the agreeing bigram target + the ``mid`` EAGLE
draft, chain, overlap off), started one after another in this process:

  nospec          no speculation (the decode step time PLAIN is compared with)
  zero_tax        specfsm, config plain=zero_tax: PLAIN is one target decode forward, the draft
                  is caught up in RESYNCING from the lag buffer
  warm            specfsm, config plain=warm = SGLang's steps=0 (1-token verify + 1-token
                  draft-extend every step: the draft stays warm)
  skip_flag       as warm, with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the engine's
                  processes: SGLang's steps=0 without its draft-extend (the draft re-enters cold)
  zero_tax_cold   zero_tax with the catch-up off (SPECFSM_TEST_SKIP_CATCHUP=1, test channel)

Each specfsm engine runs a scripted schedule (SPECULATING, PLAIN for a while, SPECULATING) and
reads the accept lengths per K-wide round from its JSON log; the zero_tax engine also runs
catch-ups of lag L at batch B (seconds from its LagStats history, via the test channel's
counters); then each engine is pinned PLAIN and timed like the GPU suite's e2e phase (decode
ms per step from the wall difference of two generation lengths, best of the repeats).

Prints ``name: value (goal ...)`` lines; the first is the issue's goal. CPU times are the test
bed's, not a speed claim: the H200's numbers are in
benchmarks/gpu/results/2026-11-30_zero_tax/specfsm_summary.txt.

Usage: python benchmarks/plain_tax.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SKIP_FLAG_ENV = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
H200_SUMMARY = "benchmarks/gpu/results/2026-11-30_zero_tax/specfsm_summary.txt"
#: (name, label, specfsm config, extra environment of the engine's processes)
VARIANTS: list[tuple[str, str, dict[str, Any], dict[str, str]]] = [
    ("zero_tax", "specfsm zero-tax", {"plain": "zero_tax"}, {}),
    ("warm", "SGLang steps=0 (specfsm warm)", {"plain": "warm"}, {}),
    ("skip_flag", f"SGLang steps=0 + {SKIP_FLAG_ENV}=1", {"plain": "warm"}, {SKIP_FLAG_ENV: "1"}),
    (
        "zero_tax_cold",
        "zero-tax, catch-up off",
        {"plain": "zero_tax"},
        {"SPECFSM_TEST_SKIP_CATCHUP": "1"},
    ),
]
FIRST_ROUNDS = 10  # K-wide rounds after re-entry


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def _tree_cpu_s() -> float:
    """User + system CPU seconds of this process and its live descendants (the engine's)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in (me, *me.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


class Bench:
    def __init__(self, quick: bool, workdir: Path) -> None:
        from specfsm_testbed import engine as E

        self.E = E
        self.quick = quick
        self.workdir = workdir
        # accept phase: SPECULATING until PRE, PLAIN until PRE + PLAIN_ITS, then SPECULATING
        self.pre, self.plain_its = 12, 16
        self.accept_prompts = E.default_prompts(4, seed=5)
        self.accept_new = 80 if quick else 120
        # catch-up phase (zero_tax engine): lag L at batch B
        self.lags = (8, 32)
        self.batches = (1, 4)
        self.catchup_reps = 2 if quick else 5
        # timing phase: every engine pinned PLAIN (nospec: as it is)
        self.time_prompts = E.default_prompts(4, seed=7)
        self.time_lens = (16, 48) if quick else (16, 144)
        self.time_reps = 5 if quick else 9
        self.results: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ helpers
    def decode_ms(self, eng: Any) -> dict[str, float]:
        """ms per decode step: best of each length, difference over the token difference (as
        benchmarks/gpu/specfsm_suite.py ``_decode_ms``), in wall time and in the CPU time of
        this process and the engine's (the machine is shared: CPU time is the steadier)."""
        lo, hi = self.time_lens
        # warm-up: the first passes over new shapes are slow on CPU (several for warm PLAIN)
        for _ in range(2):
            self.E.generate(eng, self.time_prompts, hi)
        walls: dict[int, list[float]] = {lo: [], hi: []}
        cpus: dict[int, list[float]] = {lo: [], hi: []}
        for _ in range(self.time_reps):
            for n in (lo, hi):
                c, t = _tree_cpu_s(), time.perf_counter()
                self.E.generate(eng, self.time_prompts, n)
                walls[n].append(time.perf_counter() - t)
                cpus[n].append(_tree_cpu_s() - c)
        return {
            "wall": (min(walls[hi]) - min(walls[lo])) / (hi - lo) * 1e3,
            "cpu": (min(cpus[hi]) - min(cpus[lo])) / (hi - lo) * 1e3,
        }

    # ------------------------------------------------------------------ engines
    def run_nospec(self) -> None:
        eng = self.E.make_engine(agree="mid")
        try:
            self.results["nospec"] = {"decode_ms": self.decode_ms(eng)}
        finally:
            eng.shutdown()

    def run_variant(self, name: str, config: dict[str, Any], env: dict[str, str]) -> None:
        from specfsm_testbed import fsm as F

        d = self.workdir / name
        schedule = [[self.pre, "PLAIN"], [self.pre + self.plain_its, "SPECULATING"]]
        with F.temporary_env({"SPECFSM_TEST_POLICIES": "1", **env}):
            eng = F.make_fsm_engine(
                d,
                policy={"name": "scripted", "schedule": schedule},
                config={**config, "observe_every": 1},
                spec="EAGLE",
                agree="mid",
            )
        res: dict[str, Any] = {}
        try:
            out = self.E.generate_greedy(eng, self.accept_prompts, self.accept_new)
            res["greedy_ok"] = out == self.E.AgreeReference()(self.accept_prompts, self.accept_new)
            res.update(self._rounds(F.transitions(d)))
            if config["plain"] == "zero_tax" and not env:
                res["catchups"] = self._catchups(eng, d)
            # draft work per PLAIN step, before the timing phase (whose arrivals are prefilled
            # in PLAIN: SGLang's prefill draft-extend would be counted as PLAIN's)
            res["counters"] = F.counters(d, wait_s=5)
            F.inject(d, control={"pin": "PLAIN"})
            self.E.generate(eng, self.time_prompts, 4)  # applies the pin, drains
            mode = F.counters(d, wait_s=5)["mode"]
            if mode != "PLAIN":
                raise RuntimeError(f"{name}: pinned PLAIN but the engine is {mode}")
            res["decode_ms"] = self.decode_ms(eng)
        finally:
            eng.shutdown()
        self.results[name] = res

    def _rounds(self, lines: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean accept length per K-wide round: before PLAIN (steady state), the first
        FIRST_ROUNDS after re-entry, and the rounds after those."""
        rounds: dict[int, tuple[int, ...]] = {}
        moves: list[tuple[str, str, int]] = []
        for ln in lines:
            if ln.get("event") == "specfsm.observation" and ln.get("accept_lens"):
                rounds[ln["accept_lens_iteration"]] = tuple(ln["accept_lens"])
            elif ln.get("event") == "specfsm.transition":
                moves.append((ln["src"], ln["dst"], int(ln["iteration"])))
        left = min(it for s, dst, it in moves if (s, dst) == ("SPECULATING", "DRAINING"))
        back = min(it for s, dst, it in moves if (s, dst) == ("RESYNCING", "SPECULATING"))
        pre = [rounds[i] for i in sorted(rounds) if i < left]
        post = [rounds[i] for i in sorted(rounds) if i >= back]
        first, later = post[:FIRST_ROUNDS], post[FIRST_ROUNDS:]
        return {
            "moves": [(s, dst) for s, dst, _ in moves],
            "first_rounds": first,
            "steady": _mean([x for r in pre for x in r]),
            "first": _mean([x for r in first for x in r]),
            "later": _mean([x for r in later for x in r]),
            "n_pre": len(pre),
            "n_later": len(later),
        }

    def _catchups(self, eng: Any, d: Path) -> dict[tuple[int, int], list[list[float]]]:
        """Catch-ups of lag ~L at batch B: (rows, tokens, seconds) from LagStats.history."""
        from specfsm_testbed import fsm as F

        got: dict[tuple[int, int], list[list[float]]] = {}
        seed = 100
        for b in self.batches:
            for lag in self.lags:
                for _ in range(self.catchup_reps):
                    c = F.counters(d, wait_s=5)
                    it, seen = c["iteration"], len(c["zero_tax"]["catchup_history"])
                    # 3 K-wide rounds, then PLAIN (through one DRAINING forward); the lag is
                    # the PLAIN forwards' tokens plus RESYNCING's own
                    sched = [[it + 4, "PLAIN"], [it + 4 + lag, "SPECULATING"]]
                    F.set_policy(d, {"name": "scripted", "schedule": sched})
                    seed += 1
                    self.E.generate(eng, self.E.default_prompts(b, seed=seed), lag + 24)
                    hist = F.counters(d, wait_s=5)["zero_tax"]["catchup_history"]
                    got.setdefault((b, lag), []).extend(hist[seen:])
        return got

    # ------------------------------------------------------------------ report
    def report(self) -> None:
        r = self.results
        zt = r["zero_tax"]["counters"]
        zt_per = zt["draft_forwards_by_mode"]["PLAIN"] / zt["mode_forwards"]["PLAIN"]
        print(f"plain_draft_forwards_per_step: {_num(zt_per)} (goal == 0)")
        for name, label, _, _ in VARIANTS:
            c = r[name]["counters"]
            plain = c["mode_forwards"]["PLAIN"]
            df = c["draft_forwards_by_mode"]
            extra = ""
            if name == "skip_flag":
                extra = f"; {SKIP_FLAG_ENV} took effect: {'yes' if df['PLAIN'] == 0 else 'NO'}"
            print(
                f"draft_forwards_per_plain_step {name}: {_num(df['PLAIN'] / plain)} "
                f"({label}: {df['PLAIN']} draft forwards in {plain} PLAIN steps, "
                f"{df['RESYNCING']} in RESYNCING{extra})"
            )
        base = r["nospec"]["decode_ms"]
        print(
            f"CPU nospec_decode_ms: {base['cpu']:.2f} CPU time, {base['wall']:.2f} wall "
            f"(batch {len(self.time_prompts)}, lengths {self.time_lens}, best of {self.time_reps})"
        )
        for name, label, _, _ in VARIANTS:
            ms = r[name]["decode_ms"]
            print(
                f"CPU plain_step_vs_nospec {name}: {ms['cpu'] / base['cpu']:.2f} "
                f"(CPU time {ms['cpu']:.2f} ms / {base['cpu']:.2f} ms; wall "
                f"{ms['wall'] / base['wall']:.2f} = {ms['wall']:.2f} ms / {base['wall']:.2f} ms; "
                f"{label}; reported, no goal on CPU)"
            )
        print(f"speed claim (H200, not this CPU): see {H200_SUMMARY}")
        for (b, lag), hist in sorted(r["zero_tax"]["catchups"].items(), key=lambda kv: kv[0]):
            if not hist:
                print(f"CPU catchup_ms B={b} L={lag}: none recorded")
                continue
            ms = statistics.median(h[2] for h in hist) * 1e3
            shapes = sorted({(int(h[0]), int(h[1])) for h in hist})
            toks = statistics.median(h[1] for h in hist)
            print(
                f"CPU catchup_ms B={b} L={lag}: {ms:.2f} (median of {len(hist)}; rows/tokens "
                f"{shapes}; {ms / toks:.3f} ms per caught-up token; reported, no goal)"
            )
        for name, label, _, _ in VARIANTS:
            v = r[name]
            print(
                f"first{FIRST_ROUNDS}_accept {name}: {v['first']:.3f} (steady state "
                f"{v['steady']:.3f} over {v['n_pre']} rounds before PLAIN; "
                f"rounds {FIRST_ROUNDS + 1}+ after re-entry {v['later']:.3f}; {label})"
            )
        same = r["zero_tax"]["first_rounds"] == r["warm"]["first_rounds"]
        print(f"first{FIRST_ROUNDS}_rounds_equal zero_tax warm: {same} (goal True, round by round)")
        ok = all(r[n]["greedy_ok"] for n, _, _, _ in VARIANTS)
        print(f"greedy_equal_to_no_speculation: {ok} (goal True)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, shorter runs (~3 min)")
    args = ap.parse_args()
    os.environ.setdefault("SPECFSM_TEST_POLICIES", "1")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plain_tax-") as tmp:
        bench = Bench(args.quick, Path(tmp))
        bench.run_nospec()  # first: SGLang's config is process-global
        for name, _, config, env in VARIANTS:
            bench.run_variant(name, config, env)
            print(f"({name} done at {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        bench.report()
    print(f"(run took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
