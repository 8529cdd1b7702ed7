"""``specfsm demo``, GPU part: what switching buys on an H200, from measurements, not from this CPU.

The CPU test bed proves correctness; it cannot show the GPU's speed shape (SGLang's CPU
speculation path is host-bound: the demo measures and says so). This part prints what was
measured inside SGLang 0.5.17 on one H200 (``specfsm/data/measured/h200_agree_sweep.csv``,
copied from ``benchmarks/gpu/results/2026-11-30_specfsm``): decode tokens/s at fixed concurrency
without speculation, always speculating, and in warm PLAIN (SGLang's steps=0 state), for
a draft that agrees with the target on every token and one that agrees on ~0.66 of them; and
what a PLAIN that costs one decode step gives (the better of the two static choices at each
level). Zero-tax PLAIN, the default since 2026-11-30, measured 1.001-1.013x a decode step on
the same H200 (benchmarks/gpu/results/2026-11-30_zero_tax); this sweep was measured before it,
with warm PLAIN. Optionally a PNG.
"""

from __future__ import annotations

import csv
import io
import sys
import textwrap
from dataclasses import dataclass
from importlib import resources
from typing import TextIO

DATA = ("data", "measured", "h200_agree_sweep.csv")
SERVING = ("data", "measured", "h200_serving.csv")
PREFILL_RESULTS = "benchmarks/gpu/results/2026-12-02_serving_prefill/"
ONE_MACHINE_RESULTS = "benchmarks/gpu/results/2026-12-03_serving/"
MACHINE5_RESULTS = ONE_MACHINE_RESULTS + "2026-12-03_machine5/"
MACHINE6_RESULTS = ONE_MACHINE_RESULTS + "2026-12-03_machine6/"
MACHINE7_RESULTS = "benchmarks/gpu/results/2026-12-04_serving/2026-12-04_machine7/"
MACHINE8_RESULTS = "benchmarks/gpu/results/2026-12-04_serving/2026-12-04_machine8/"
MACHINE9_RESULTS = "benchmarks/gpu/results/2026-12-04_serving/2026-12-04_machine9/"
MACHINE10_RESULTS = "benchmarks/gpu/results/2026-12-04_serving/2026-12-05_machine10/"
MACHINE13_RESULTS = "benchmarks/gpu/results/2026-12-05_serving_h200/"
SERVER_NAMES = {"nospec": "no-spec", "eagle": "EAGLE"}


@dataclass(frozen=True)
class Level:
    agreement: str
    c: int
    accept_length: float
    nospec: float
    always_spec: float
    warm_plain: float

    @property
    def best_static(self) -> float:
        return max(self.nospec, self.always_spec)


def load_levels() -> list[Level]:
    """The measured H200 sweep shipped with the package."""
    path = resources.files("specfsm").joinpath(*DATA)
    text = path.read_text()
    body = io.StringIO("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))
    return [
        Level(
            r["agreement"],
            int(r["c"]),
            float(r["accept_length"]),
            float(r["nospec_tok_s"]),
            float(r["always_spec_tok_s"]),
            float(r["warm_plain_tok_s"]),
        )
        for r in csv.DictReader(body)
    ]


def report(levels: list[Level], out: TextIO = sys.stdout) -> None:
    """The terminal table: measured tokens/s per level and what each choice is worth."""
    out.write(
        "\nWhat switching buys on a GPU: measured on one NVIDIA H200 inside SGLang 0.5.17\n"
        "(Llama-3.1-8B shape, bf16, CUDA graphs, 1024-token prompts; decode tokens/s of c\n"
        "requests decoding together; EAGLE chain of 3 whose weights agree with the target by\n"
        "construction). Not measured on this machine. 'plain' is warm PLAIN (SGLang's steps=0\n"
        "state: a 1-token verify + a 1-token draft-extend per step), measured in this sweep;\n"
        "'zero-tax bound' is the better static choice per level, what a PLAIN costing one\n"
        "decode step reaches: zero-tax PLAIN (the default) measured 1.001-1.013x a decode step\n"
        "on this H200 later (benchmarks/gpu/results/2026-11-30_zero_tax; this sweep was not\n"
        "re-run with it).\n\n"
    )
    out.write(
        f"{'draft':<6} {'c':>4} {'accept':>6} {'no spec':>8} {'always':>8} {'plain':>8} "
        f"{'winner':>7} {'warm/no-spec':>12} {'zero-tax bound':>14}\n"
    )
    for lv in levels:
        winner = "spec" if lv.always_spec >= lv.nospec else "no-spec"
        out.write(
            f"{lv.agreement:<6} {lv.c:>4} {lv.accept_length:>6.2f} {lv.nospec:>8.0f} "
            f"{lv.always_spec:>8.0f} {lv.warm_plain:>8.0f} {winner:>7} "
            f"{lv.warm_plain / lv.nospec:>12.2f} {lv.best_static:>14.0f}\n"
        )
    mid = [lv for lv in levels if lv.agreement == "mid"]
    cross = next((lv.c for lv in mid if lv.nospec > lv.always_spec), None)
    out.write(
        "\nReading it: with every draft token accepted, speculating wins at every level; at 0.66\n"
        f"per-token agreement it stops paying from c {cross} on. Warm PLAIN runs at about half\n"
        "the speed of no speculation, so switching to it never paid; zero-tax PLAIN costs a\n"
        "decode step (+1%), so with it each level gets about the 'zero-tax bound'.\n"
    )
    out.flush()


Runs = dict[str, dict[str, dict[str, float]]]
Reps = dict[str, dict[str, dict[str, list[float]]]]


def load_serving() -> tuple[Runs, Reps]:
    """The packaged serving table: mean tok/s per (run, trace, server), and the per-repetition
    tok/s where the table has them (run 'prefill')."""
    text = resources.files("specfsm").joinpath(*SERVING).read_text()
    body = io.StringIO("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))
    tok: Runs = {}
    reps: Reps = {}
    for r in csv.DictReader(body):
        tok.setdefault(r["run"], {}).setdefault(r["trace"], {})[r["server"]] = float(r["tok_s"])
        per_rep = [float(x) for x in (r.get("rep_tok_s") or "").split()]
        if per_rep:
            reps.setdefault(r["run"], {}).setdefault(r["trace"], {})[r["server"]] = per_rep
    return tok, reps


def rep_ratios(per_server: dict[str, list[float]], server: str) -> list[float]:
    """``server``'s tok/s over the better static server (no-spec, EAGLE) of the same
    repetition, per repetition, as the serving summary's vs_best_static lines."""
    statics = [s for s in ("nospec", "eagle") if per_server.get(s)]
    if not statics or not per_server.get(server):
        return []
    n = min(len(per_server[s]) for s in [*statics, server])
    return [per_server[server][i] / max(per_server[s][i] for s in statics) for i in range(n)]


def _mean_spread(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (max(xs) - min(xs)) / m


def _report_prefill(run: dict[str, dict[str, list[float]]], out: TextIO) -> None:
    """The run with the policies deciding before prefill forwards: goodput and the example
    against the best static server per trace, mean of the repetitions and their spread."""
    order = [t for t in ("light", "heavy", "bursty", "day") if t in run]
    if not order:
        return
    n = max(len(v) for t in order for v in run[t].values())
    out.write(
        f"Deciding before prefill forwards too (prefill, 2026-12-02, {n} reps each,\n"
        f"{PREFILL_RESULTS}): each repetition against the better of\n"
        "no-spec and EAGLE in that repetition, mean of the reps (spread: (max - min) / mean):\n"
    )
    for server, name in (("specfsm_goodput", "goodput"), ("specfsm_example", "example")):
        cells = []
        for t in order:
            rs = rep_ratios(run[t], server)
            if rs:
                m, spread = _mean_spread(rs)
                cells.append(f"{t} {m:.3f}x ({100 * spread:.1f}%)")
        if cells:
            out.write(f"  {name} vs best static: " + ", ".join(cells) + "\n")
    best = []
    for t in order:
        statics = [s for s in ("nospec", "eagle") if run[t].get(s)]
        if statics:
            k = min(len(run[t][s]) for s in statics)
            won = {max((run[t][s][i], s) for s in statics)[1] for i in range(k)}
            best.append(f"{t} " + " / ".join(SERVER_NAMES[s] for s in sorted(won)))
    if best:
        out.write("  better static server in each rep: " + ", ".join(best) + "\n")
    missing = []
    if not any("adaptive" in run[t] for t in order):
        missing.append("SGLang's adaptive speculation (so no ratio to it)")
    if "day" not in run:
        missing.append("the day trace")
    if not any({"specfsm_plain", "specfsm_spec"} & run[t].keys() for t in order):
        missing.append("pinned PLAIN / SPECULATING")
    if missing:
        line = "Not in this run: " + ", ".join(missing) + "."
        out.write(textwrap.fill(line, 90, initial_indent="  ", subsequent_indent="  ") + "\n")


def _pairs(per_server: dict[str, list[float]], a: str, b: str) -> list[float]:
    """``a``'s tok/s over ``b``'s, per repetition both ran."""
    xa, xb = per_server.get(a, []), per_server.get(b, [])
    return [x / y for x, y in zip(xa, xb, strict=False)]


def _rep_cells(ratios: dict[str, list[float]]) -> str:
    """ "light 0.966 0.975, day 1.000": each trace's ratios per repetition, in order, traces
    without any left out."""
    return ", ".join(f"{t} " + " ".join(f"{x:.3f}" for x in rs) for t, rs in ratios.items() if rs)


def _report_one_machine(
    run: dict[str, dict[str, list[float]]],
    out: TextIO,
    name: str,
    where: str,
    date: str = "2026-12-03",
) -> None:
    """Every server on one machine (runs 'dec03' to 'dec05b'): pinned PLAIN against the
    server without a draft, pinned SPECULATING against the stock EAGLE server, the policies
    against the better static server, each repetition apart; and what the day trace asked of
    them."""
    order = [t for t in ("light", "heavy", "bursty", "day") if t in run]
    if not order:
        return
    out.write(f"Every server on one machine ({name}, {date},\n{where}), each repetition's ratio:\n")
    pairs = (
        ("pinned PLAIN vs no-spec", "specfsm_plain", "nospec"),
        ("pinned SPECULATING vs EAGLE", "specfsm_spec", "eagle"),
    )
    for label, a, b in pairs:
        cells = _rep_cells({t: _pairs(run[t], a, b) for t in order})
        if cells:
            out.write(f"  {label}: {cells}\n")
    # a machine without the stock EAGLE server judges against the no-spec server alone
    versus = "best static" if all(run[t].get("eagle") for t in order) else "no-spec (no EAGLE run)"
    for server, label in (
        ("specfsm_goodput", "goodput"),
        ("specfsm_example", "example"),
        ("specfsm_shapes", "shapes example"),
    ):
        cells = _rep_cells({t: rep_ratios(run[t], server) for t in order})
        if cells:
            out.write(f"  {label} vs {versus}: {cells}\n")
    day = run.get("day", {})
    served = [v[0] for s, v in day.items() if s != "adaptive" and v]
    if served and "adaptive" in day:
        out.write(
            f"  day: every server but SGLang's adaptive one read {min(served):.0f}-"
            f"{max(served):.0f} tok/s (adaptive\n  {day['adaptive'][0]:.0f}), the whole trace "
            "inside its window: at its rates the day trace tells\n  servers apart by latency "
            "only.\n"
        )


def report_serving(out: TextIO = sys.stdout) -> None:
    """The measured serving runs: real servers under changing loads, tokens/s as served, before
    and after PLAIN stopped running the draft's prefill, the policies against the best static
    server and SGLang's own adaptive speculation once the goodput policy priced steps at the
    served context, and against the best static server once they also decided before prefill
    forwards."""
    tok, reps = load_serving()
    out.write(
        "\nAs served (2026-12-02, H200, real sglang.launch_server servers one after another\n"
        "under the same changing loads, radix cache flushed per run; output tokens/s; '-': not\n"
        "run). 'before': PLAIN still ran the draft's prefill of every prompt; 'deferred': PLAIN\n"
        "defers it to RESYNCING and its lag reset no longer waits for the GPU; 'fixes': the\n"
        "deferred store holds the KV pool and no prefill waits on a tail-token write; 'ctx': the\n"
        "goodput policy prices steps at each iteration's context, the example runs the served\n"
        "thresholds (18/17; 49/42 in 'fixes'), one run each; 'prefill': the policies also\n"
        "decide before prefill forwards, mean of 2 reps each; 'dec03': every server on one\n"
        "machine, light, bursty and day, 1-2 reps (2026-12-03); 'dec03b': one machine again,\n"
        "with the goodput policy's prefill pressure and a lighter PLAIN step, light and bursty,\n"
        "2-3 reps (2026-12-03); 'dec03c': one machine again, a deferred prefill publishing its\n"
        "lengths first and prefills counting toward the goodput policy's dwell, 2-3 reps\n"
        "(2026-12-03); 'dec04': one machine, the runtime of dec03c, heavy and bursty, 1-2 reps\n"
        "(2026-12-04); 'dec04b': one machine, the goodput policy with its reversal guard, light\n"
        "and bursty, 1-3 reps (2026-12-04); 'dec04c': one machine, the goodput policy resumed\n"
        "with what it learned in the runs before, no stock EAGLE server, 2 reps (2026-12-04);\n"
        "'dec05': one machine, prefill chunks counting toward the debounce, the calibration's\n"
        "stall guard, and the shapes example (vs lines only), 1-3 reps (2026-12-05); 'dec05b':\n"
        "one machine, every server's collector frozen after warm-up, the shapes example with its\n"
        "start-up profile, 2-3 reps (2026-12-05).\n"
        "EAGLE: the stock server;\n"
        "adaptive: SGLang's --speculative-adaptive; PLAIN / SPEC: specfsm pinned; goodput /\n"
        "example: specfsm with that policy:\n\n"
    )
    cols = [
        ("nospec", "no-spec"),
        ("eagle", "EAGLE"),
        ("adaptive", "adaptive"),
        ("specfsm_plain", "PLAIN"),
        ("specfsm_spec", "SPEC"),
        ("specfsm_goodput", "goodput"),
        ("specfsm_example", "example"),
    ]
    out.write(f"{'run':<9}{'trace':<7}" + "".join(f"{h:>10}" for _, h in cols) + "\n")
    for run, traces in tok.items():
        for trace, row in traces.items():
            cells = "".join(f"{row[c]:>10.0f}" if c in row else f"{'-':>10}" for c, _ in cols)
            out.write(f"{run:<9}{trace:<7}{cells}\n")
    b = tok.get("before", {}).get("heavy", {})
    d = tok.get("deferred", {}).get("heavy", {})
    if {"nospec", "specfsm_plain"} <= b.keys() and {"nospec", "specfsm_plain"} <= d.keys():
        out.write(
            f"\nReading it: under a prefill-bound load (heavy) PLAIN on a speculative server "
            f"served\n{b['specfsm_plain'] / b['nospec']:.3f}x a server without a draft before, "
            f"{d['specfsm_plain'] / d['nospec']:.3f}x with the deferred draft prefill\n"
            "(docs/serving.md has the spread, the bursty trace and what is still missed).\n"
        )
    f = tok.get("fixes", {})
    fh, fb = f.get("heavy", {}), f.get("bursty", {})
    if all({"nospec", "specfsm_plain", "eagle", "specfsm_spec"} <= r.keys() for r in (fh, fb)):
        out.write(
            f"After the fixes: PLAIN {fh['specfsm_plain'] / fh['nospec']:.3f}x / "
            f"{fb['specfsm_plain'] / fb['nospec']:.3f}x a server without a draft (heavy /\n"
            f"bursty), SPECULATING {fh['specfsm_spec'] / fh['eagle']:.3f}x / "
            f"{fb['specfsm_spec'] / fb['eagle']:.3f}x the stock EAGLE server.\n"
        )
    c = tok.get("ctx", {})
    order = [t for t in ("light", "heavy", "day", "bursty") if "specfsm_goodput" in c.get(t, {})]
    static = {
        t: max(c[t][s] for s in ("nospec", "eagle") if s in c[t])
        for t in order
        if {"nospec", "eagle"} & c[t].keys()
    }
    peer = [t for t in order if "adaptive" in c[t]]
    if static:
        out.write(
            "Priced at the served context (ctx): goodput "
            + " / ".join(f"{c[t]['specfsm_goodput'] / static[t]:.3f}x" for t in static)
            + f" the best\nstatic server ({' / '.join(static)})"
        )
        if peer:
            out.write(
                ", "
                + " / ".join(f"{c[t]['specfsm_goodput'] / c[t]['adaptive']:.3f}x" for t in peer)
                + f" SGLang's adaptive\nspeculation ({' / '.join(peer)})"
            )
        out.write(
            ". Bursty lost: the policies then decided on decode\niterations only, so its "
            "bursts were prefilled while speculating.\n"
        )
    _report_prefill(reps.get("prefill", {}), out)
    _report_one_machine(reps.get("dec03", {}), out, "dec03", ONE_MACHINE_RESULTS)
    _report_one_machine(reps.get("dec03b", {}), out, "dec03b", MACHINE5_RESULTS)
    _report_one_machine(reps.get("dec03c", {}), out, "dec03c", MACHINE6_RESULTS)
    _report_one_machine(reps.get("dec04", {}), out, "dec04", MACHINE7_RESULTS, "2026-12-04")
    _report_one_machine(reps.get("dec04b", {}), out, "dec04b", MACHINE8_RESULTS, "2026-12-04")
    _report_one_machine(reps.get("dec04c", {}), out, "dec04c", MACHINE9_RESULTS, "2026-12-04")
    _report_one_machine(reps.get("dec05", {}), out, "dec05", MACHINE10_RESULTS, "2026-12-05")
    _report_one_machine(reps.get("dec05b", {}), out, "dec05b", MACHINE13_RESULTS, "2026-12-05")
    out.flush()


def plot(levels: list[Level], path: str, out: TextIO = sys.stdout) -> bool:
    """tokens/s vs concurrency per choice, one panel per draft agreement; False without
    matplotlib (one line says which extra to install)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out.write('plot skipped: matplotlib is missing (pip install "specfsm[sim]")\n')
        return False
    kinds = sorted({lv.agreement for lv in levels})
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        lv = [x for x in levels if x.agreement == kind]
        cs = [x.c for x in lv]
        ax.plot(cs, [x.nospec for x in lv], "o-", label="no speculation")
        ax.plot(cs, [x.always_spec for x in lv], "s-", label="always speculate")
        ax.plot(cs, [x.warm_plain for x in lv], "v--", label="warm PLAIN (SGLang steps=0)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        acc = sum(x.accept_length for x in lv) / len(lv)
        ax.set_title(f"draft agreement {kind} (accept length {acc:.2f})")
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("decode tokens/s (H200, measured)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    out.write(f"plot: {path}\n")
    return True
