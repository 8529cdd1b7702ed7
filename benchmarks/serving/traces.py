"""Serving load traces: phases of Poisson arrivals or closed-loop concurrency, requests drawn
from fixed length distributions, all of it a function of (trace, seed) alone.

A trace is a list of :class:`Phase`\\ s, each ``seconds`` long and either

- ``closed``: ``level`` client loops, each sending its next request as soon as the last one
  finished (a concurrency level), or
- ``poisson``: arrivals at ``level`` requests per second, exponential gaps (an open load: a
  slow server builds a queue).

Request ``k`` of a trace (in issue order) has its prompt length, output length, prompt tokens
and abort point drawn from ``random.Random(f"{seed}:{k}")``, so a request's content never
depends on which server ran it or how fast: the same ``k`` is the same request on every server,
which is what makes greedy outputs comparable across servers. Lengths are log-uniform between
their bounds. A share ``abort_share`` of the requests is cut by the client after
``abort_after`` of their tokens (a user who closes the tab): those are the only requests allowed
to end short.

Standard library only: the GPU box runs this with its own Python.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Phase:
    kind: str  # "closed" | "poisson"
    level: float  # concurrency (closed) or requests per second (poisson)
    seconds: float

    def label(self) -> str:
        unit = "c" if self.kind == "closed" else "rps"
        lvl = int(self.level) if float(self.level).is_integer() else self.level
        return f"{unit}{lvl}"


@dataclass(frozen=True)
class Lengths:
    prompt_min: int
    prompt_max: int
    output_min: int
    output_max: int
    abort_share: float = 0.05


@dataclass(frozen=True)
class Trace:
    name: str
    phases: tuple[Phase, ...]
    lengths: Lengths
    seed: int = 0
    vocab: tuple[int, int] = (3, 250)
    notes: str = field(default="", compare=False)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    def phase_bounds(self) -> list[tuple[float, float]]:
        out, t = [], 0.0
        for p in self.phases:
            out.append((t, t + p.seconds))
            t += p.seconds
        return out


@dataclass(frozen=True)
class Request:
    index: int
    prompt: list[int]
    max_new_tokens: int
    abort_after: int | None  # the client closes the stream after this many tokens


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    if lo >= hi:
        return lo
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def request(trace: Trace, k: int) -> Request:
    """Request ``k`` of ``trace`` (a function of the trace's seed, lengths and ``k`` only)."""
    rng = random.Random(f"{trace.seed}:{k}")
    ln = trace.lengths
    plen = _log_uniform(rng, ln.prompt_min, ln.prompt_max)
    olen = _log_uniform(rng, ln.output_min, ln.output_max)
    abort = None
    if rng.random() < ln.abort_share and olen >= 4:
        abort = max(1, olen // 2)
    lo, hi = trace.vocab
    prompt = [rng.randrange(lo, hi) for _ in range(plen)]
    return Request(k, prompt, olen, abort)


def arrivals(trace: Trace) -> list[tuple[int, float]]:
    """(phase index, offset in seconds from the trace start) of every Poisson arrival."""
    rng = random.Random(f"{trace.seed}:arrivals")
    out: list[tuple[int, float]] = []
    for i, (p, (t0, t1)) in enumerate(zip(trace.phases, trace.phase_bounds(), strict=True)):
        if p.kind != "poisson" or p.level <= 0:
            continue
        t = t0 + rng.expovariate(p.level)
        while t < t1:
            out.append((i, t))
            t += rng.expovariate(p.level)
    return out


# The traces. GPU levels were chosen for one H200 serving a Llama-3.1-8B shape: "light" peaks
# where speculation still pays, "heavy" sits mostly where it does not, "bursty" alternates idle
# and overload, "day" rises and falls through both. ``scale`` shrinks levels and lengths for
# the CPU bed, whose tiny model serves a few hundred tokens per second.
GPU_LENGTHS = Lengths(prompt_min=128, prompt_max=4096, output_min=32, output_max=256)
CPU_LENGTHS = Lengths(prompt_min=8, prompt_max=48, output_min=4, output_max=24)


def _closed(levels: Sequence[float], s: float) -> tuple[Phase, ...]:
    return tuple(Phase("closed", lv, s) for lv in levels)


def _poisson(levels: Sequence[float], s: float) -> tuple[Phase, ...]:
    return tuple(Phase("poisson", lv, s) for lv in levels)


def builtin(bed: str, phase_s: float, seed: int = 0) -> dict[str, Trace]:
    """The named traces for ``bed`` ("gpu" or "cpu"), each phase ``phase_s`` seconds."""
    if bed == "gpu":
        ln, vocab = GPU_LENGTHS, (3, 120000)
        light, heavy = [1, 8, 32, 4], [16, 256, 64, 256]
        bursty, day = [2, 40, 2, 40], [2, 12, 40, 12, 2]
    elif bed == "cpu":
        ln, vocab = CPU_LENGTHS, (3, 250)
        light, heavy = [1, 4, 1], [2, 16, 2]
        bursty, day = [1, 12, 1], [1, 4, 12, 4, 1]
    else:
        raise ValueError(f"bed must be gpu or cpu, got {bed!r}")
    return {
        "light": Trace("light", _closed(light, phase_s), ln, seed, vocab),
        "heavy": Trace("heavy", _closed(heavy, phase_s), ln, seed + 1, vocab),
        "bursty": Trace("bursty", _poisson(bursty, phase_s), ln, seed + 2, vocab),
        "day": Trace("day", _poisson(day, phase_s), ln, seed + 3, vocab),
    }


def repetitions(spec: str, default: int) -> Callable[[str, str], int]:
    """``--reps-of``: how many repetitions one server or variant runs on one trace. ``spec`` is
    ``WHO=N`` (every trace of WHO) and ``WHO@TRACE=N`` (that trace alone, before WHO=N),
    comma-separated; everything else runs ``default`` times. Raises ValueError on a bad entry."""
    table: dict[str, int] = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        key, eq, n = item.partition("=")
        if not eq or not key or not n.isdigit():
            raise ValueError(f"--reps-of: {item!r} is not WHO=N or WHO@TRACE=N")
        table[key] = int(n)

    def reps(who: str, trace: str) -> int:
        return table.get(f"{who}@{trace}", table.get(who, default))

    return reps


def server_order(servers: list[str], bracket: str, reps: int) -> list[tuple[str, range]]:
    """The servers' starts in order, each with the repetitions it runs. The servers run one
    after another, so a card that drifts over the driver's run (docs/serving.md) tilts every
    ratio to the first server; ``--bracket`` runs the named server's repetitions in two
    halves, the first before the others and the rest after them, so a steady drift falls on
    both sides. Raises ValueError when the bracketed server is not among ``servers`` or there
    are fewer than two repetitions."""
    if not bracket:
        return [(s, range(reps)) for s in servers]
    if bracket not in servers:
        raise ValueError(f"--bracket: {bracket!r} is not one of --servers ({','.join(servers)})")
    if reps < 2:
        raise ValueError(f"--bracket {bracket}: needs --reps 2 or more to split, got {reps}")
    half = reps // 2
    others = [(s, range(reps)) for s in servers if s != bracket]
    return [(bracket, range(half)), *others, (bracket, range(half, reps))]


def check_measured(runs: Sequence[Mapping[str, Any]], trs: Mapping[str, Trace], who: str) -> None:
    """Each driver header among ``runs`` (a runs.jsonl's records) must have measured the
    traces ``trs`` defines, with the same phase levels and seconds: a summary of another
    trace's runs would compare unlike loads. Raises ValueError, prefixed with ``who``."""
    for r in runs:
        if "traces" not in r:
            continue
        for name, labels in r["traces"].items():
            tr = trs.get(name)
            if tr is None:
                continue
            if [p.label() for p in tr.phases] != list(labels) or any(
                abs(p.seconds - float(r.get("phase_s", p.seconds))) > 1e-9 for p in tr.phases
            ):
                raise ValueError(
                    f"{who}: trace {name} is {[p.label() for p in tr.phases]} x "
                    f"{tr.phases[0].seconds:g} s, the runs measured {labels} x {r.get('phase_s')} s"
                )
