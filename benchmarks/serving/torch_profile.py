"""Where a server's decode step spends its GPU time: the report of a torch-profiler window
(``serving_bench.py --torch-profile STEPS``; `torch_profile_window` takes the window).

:func:`report` reads the chrome trace(s) SGLang's profiler wrote by these rules:

- iterations start at each ``scheduler.run_batch`` span (SGLang 0.5.17 and 0.5.23 open that
  ``record_function`` in ``Scheduler.run_batch`` under a profiler), else at each ``step[...]``
  span but a draft's, else at each ``cudaGraphLaunch``; an iteration's mode is that of the
  ``step[MODE ...]`` spans in it. A GPU op belongs to the iteration in which the CPU call with
  its correlation id was made; it is *in graph* when that call is a ``cudaGraphLaunch`` (CUPTI
  gives a replayed graph's kernels the launch's id) or its args carry a non-zero graph id.
- steps: the iterations of the decode mode (``DECODE``, else the commonest). A steady step is a
  decode iteration followed by another: its ``period`` runs from its first graph kernel (else
  first op) to the next one's, ``busy`` is the union of all GPU ops (kernels, memcpy, memset,
  every stream) in it, ``idle`` = period - busy, ``cpu`` the host time between the iterations'
  starts, ``launch_lead`` its first graph kernel's start - the launch call (small: the GPU
  waited for the host). ``window``: span / busy / idle of the whole trace per step.
- prefills: each prefill (``EXTEND``) iteration followed by a decode one, taken with that
  decode (with overlap scheduling the decode after a prefill waits for its result): ``cpu``
  the host time from the prefill's start to the next decode's end (median), ``gpu_us`` the
  time of their GPU ops (sum, mean), ops per kind; ``prefill_kernels`` the ops by name per
  prefill, so two servers' per-prefill work can be told apart op by op.
- host calls: the CUDA runtime and driver calls made in those iterations, by name, with their
  count and host time per steady decode step (``decode_host``) and per prefill with its decode
  (``prefill_host``): a synchronize or an allocation the host waits in shows up there.

The profiler's own launch overhead lengthens host gaps: idle under it is an upper bound.
Standard library only.
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
GRAPH_ARGS = ("graph id", "graphId", "graph node id", "graphNodeId")
#: compared in the summary when both were profiled: each pinned mode against the stock server
#: it must match (PLAIN: no speculation; SPECULATING: stock EAGLE)
PAIRS = (("specfsm_plain", "nospec"), ("specfsm_spec", "eagle"))


class Op(NamedTuple):
    ts: float
    end: float
    name: str
    kind: str
    corr: int
    graph: bool  # the event's own args name a graph


def traces_in(d: Path) -> list[Path]:
    """The chrome trace files SGLang's profiler wrote into ``d``."""
    return sorted(p for p in d.glob("*") if p.name.endswith((".json", ".json.gz")))


def _load(path: Path) -> list[dict[str, Any]]:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt") as fh:
            data = json.load(fh)
    else:
        data = json.loads(path.read_text())
    ev = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in ev if isinstance(e, dict) and e.get("ph") == "X"]


def _merge(iv: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _covered(merged: list[list[float]], heads: list[float], a: float, b: float) -> float:
    total, i = 0.0, max(0, bisect.bisect_right(heads, a) - 1)
    while i < len(merged) and merged[i][0] < b:
        total += max(0.0, min(merged[i][1], b) - max(merged[i][0], a))
        i += 1
    return total


def _host_calls(
    host: list[tuple[float, float, str]], it: Callable[[float], int], ks: set[int], div: int
) -> dict[str, list[float]]:
    """The host calls made in iterations ``ks``, by name: [count, us] per ``div``, by time."""
    table: dict[str, list[float]] = {}
    for ts, dur, name in host:
        if it(ts) in ks:
            row = table.setdefault(name, [0.0, 0.0])
            row[0] += 1
            row[1] += dur
    by = sorted(table.items(), key=lambda kv: -kv[1][1])
    return {nm: [round(r[0] / div, 3), round(r[1] / div, 3)] for nm, r in by}


def _stats(xs: dict[str, list[float]]) -> dict[str, float | None]:
    return {k: round(statistics.fmean(v), 3) if v else None for k, v in xs.items()}


def report(trace_dir: Path) -> dict[str, Any]:
    """Per-step figures of the chrome traces in ``trace_dir``, by the module docstring's rules:
    steps found, the steady decode step's period / busy / idle, the window's span / busy / idle
    per step, and GPU ops by name per step, in and outside CUDA graphs."""
    files, ops, marks = traces_in(trace_dir), [], []
    calls: dict[int, tuple[float, bool]] = {}  # correlation id -> (CPU ts, a graph launch)
    host: list[tuple[float, float, str]] = []  # runtime / driver calls: (CPU ts, dur, name)
    for ev in (e for p in files for e in _load(p)):
        cat, name, args = str(ev.get("cat", "")).lower(), str(ev.get("name", "")), ev.get("args")
        args, ts, dur = args or {}, float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))
        if cat in GPU_KINDS:
            corr = int(args.get("correlation", -1))
            graph = any(args.get(k) not in (None, 0, -1, "", "0") for k in GRAPH_ARGS)
            ops.append(Op(ts, ts + dur, name[:160], GPU_KINDS[cat], corr, graph))
        elif cat in ("cuda_runtime", "cuda_driver"):
            host.append((ts, dur, name[:160]))
            if "correlation" in args:
                launch = name.startswith(("cudaGraphLaunch", "cuGraphLaunch"))
                calls[int(args["correlation"])] = (ts, launch)
        elif not cat.startswith("gpu") and (name == "scheduler.run_batch" or name[:5] == "step["):
            marks.append((ts, name))
    graph_cpu = sorted(ts for ts, g in calls.values() if g)
    spans = sorted((ts, n[5:].split(" ")[0].rstrip("]")) for ts, n in marks if n[:5] == "step[")
    starts = sorted(ts for ts, n in marks if n == "scheduler.run_batch")
    rule = "scheduler.run_batch spans"
    if not starts:
        starts, rule = [ts for ts, m in spans if m != "DRAFT"], "step[...] spans"
    if not starts:
        starts, rule = graph_cpu, "cudaGraphLaunch calls" if graph_cpu else "none"

    def it(ts: float) -> int:
        return bisect.bisect_right(starts, ts) - 1

    seen: list[set[str]] = [set() for _ in starts]
    launch_at: dict[int, float] = {}
    for ts, m in spans:
        if it(ts) >= 0:
            seen[it(ts)].add(m)
    for ts in graph_cpu:
        if it(ts) >= 0:
            launch_at.setdefault(it(ts), ts)
    mode = ["+".join(sorted(s)) or ("GRAPH" if k in launch_at else "?") for k, s in enumerate(seen)]
    modes = Counter(mode)
    dm = "DECODE" if "DECODE" in modes else (modes.most_common(1)[0][0] if modes else "")
    graph_corr = {c for c, (_, g) in calls.items() if g}
    of = [
        (o, it(calls[o.corr][0]) if o.corr in calls else -1, o.graph or o.corr in graph_corr)
        for o in ops
    ]
    anchor: dict[int, float] = {}
    for o, k, g in of:
        if k >= 0 and (g or k not in launch_at):  # a graph's first kernel anchors its step
            anchor[k] = min(anchor.get(k, o.ts), o.ts)
    n, steps = len(starts), modes.get(dm, 0)
    steady = [
        k for k in range(n - 1) if mode[k] == dm == mode[k + 1] and {k, k + 1} <= anchor.keys()
    ]
    merged = _merge([(o.ts, o.end) for o in ops])
    heads = [m[0] for m in merged]
    period = [anchor[k + 1] - anchor[k] for k in steady]
    busy = [_covered(merged, heads, anchor[k], anchor[k + 1]) for k in steady]
    leads = [anchor[k] - launch_at[k] for k in steady if k in launch_at]
    idle = [p - b for p, b in zip(period, busy, strict=True)]
    cpu = [starts[k + 1] - starts[k] for k in steady]
    decode = _stats({"period": period, "busy": busy, "idle": idle, "cpu": cpu})
    decode |= {"median": round(statistics.median(period), 3) if period else None}
    decode |= {"launch_lead": round(statistics.median(leads), 3) if leads else None}
    pre = {k for k in range(n - 2) if "EXTEND" in mode[k].split("+") and mode[k + 1] == dm}
    p_kinds: dict[str, float] = defaultdict(float)
    p_table: dict[str, list[float]] = {}
    for o, k, _g in of:
        if k not in pre and k - 1 not in pre:
            continue
        p_kinds[f"{o.kind}_n"] += 1
        p_kinds[f"{o.kind}_us"] += o.end - o.ts
        row = p_table.setdefault(o.name, [0.0, 0.0])
        row[0] += 1
        row[1] += o.end - o.ts
    pdiv = len(pre) or 1
    prefill: dict[str, float] = {"n": len(pre)}
    if pre:
        prefill["cpu"] = statistics.median(starts[k + 2] - starts[k] for k in pre)
        prefill["gpu_us"] = sum(v for k, v in p_kinds.items() if k.endswith("_us")) / pdiv
        prefill |= {k: round(v / pdiv, 3) for k, v in sorted(p_kinds.items())}
    p_by = sorted(p_table.items(), key=lambda kv: -kv[1][1])
    sset, div = set(steady), len(steady) or max(1, steps)
    table: dict[str, list[float]] = {}
    kinds: dict[str, float] = defaultdict(float)
    for o, k, g in of:
        if steady and k not in sset:
            continue
        row = table.setdefault(o.name, [0.0, 0.0, 0.0, 0.0])
        row[0 if g else 2] += 1
        row[1 if g else 3] += o.end - o.ts
        where = ("in_graph" if g else "outside") if o.kind == "kernel" else o.kind
        kinds[f"{where}_n"] += 1
        kinds[f"{where}_us"] += o.end - o.ts
    span = max((o.end for o in ops), default=0.0) - min((o.ts for o in ops), default=0.0)
    total = sum(b - a for a, b in merged)
    per = max(1, steps)
    win = {"span": span / per, "busy": total / per, "idle": (span - total) / per}
    basis = "steady decode steps" if steady else "whole window / steps"
    by_time = sorted(table.items(), key=lambda kv: -(kv[1][1] + kv[1][3]))
    out = {"files": [p.name for p in files], "rule": rule, "iterations": n, "step_mode": dm}
    out |= {"modes": dict(modes), "steps": steps, "graph_launches": len(graph_cpu)}
    out |= {"window_us": round(span, 3), "window": {k: round(v, 3) for k, v in win.items()}}
    out |= {"decode": {"n": len(steady), **decode}, "ops_basis": basis}
    out |= {"ops": {k: round(v / div, 3) for k, v in sorted(kinds.items())}}
    out |= {"prefill": {k: round(v, 3) for k, v in prefill.items()}}
    out |= {"prefill_kernels": {nm: [round(x / pdiv, 3) for x in r] for nm, r in p_by}}
    out |= {"decode_host": _host_calls(host, it, sset, div)}
    out |= {"prefill_host": _host_calls(host, it, pre | {k + 1 for k in pre}, pdiv)}
    return out | {"kernels": {name: [round(x / div, 3) for x in r] for name, r in by_time}}


def _f(x: Any) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _vs(x: Any, y: Any) -> str:
    d = f" ({x - y:+.1f})" if x is not None and y is not None else ""
    return f"{_f(x)} vs {_f(y)}{d}"


def _where(r: list[float]) -> str:
    return "both" if r[0] and r[2] else "graph" if r[0] else "out"


def lines(label: str, rep: dict[str, Any], top: int = 8) -> list[str]:
    """Summary lines of one report: steps and how they were found, the steady decode step, the
    window per step, GPU ops per step, the ``top`` ops by time per step."""
    modes = ",".join(f"{m}:{c}" for m, c in sorted(rep["modes"].items()))
    out = [
        f"serve_torch_profile[{label}]: steps={rep['steps']} ({rep['step_mode']}; {rep['rule']}) "
        f"iterations={rep['iterations']} modes={modes} graph_launches={rep['graph_launches']}"
    ]
    notes = {"ops": f" ({rep['ops_basis']})", "prefill": " (per prefill + next decode)"}
    for group in ("decode", "window", "ops", "prefill"):
        if group == "prefill" and not rep.get("prefill", {}).get("n"):
            continue
        vals = " ".join(f"{k}={_f(v) if k != 'n' else v}" for k, v in rep[group].items())
        out.append(f"serve_torch_profile_{group}[{label}]: {vals}{notes.get(group, '')}")
    for name, r in list(rep["kernels"].items())[:top]:
        out.append(f"#   {r[1] + r[3]:8.1f} us {r[0] + r[2]:6.2f}x {_where(r):5s} {name}")
    return out


def diff_lines(
    a_label: str, a: dict[str, Any], b_label: str, b: dict[str, Any], top: int = 15
) -> list[str]:
    """Lines comparing two reports, ``a`` vs ``b`` (a - b), in us per step: steps, the steady
    decode step, the window (span / steps), GPU ops in and outside graphs, and the ``top`` op
    names whose time per step differs most, with their counts per step and placement."""
    tag = f"{a_label}-{b_label}"
    out = [f"serve_torch_profile_diff[{tag}]: steps {a['steps']} vs {b['steps']}"]
    for group in ("decode", "window", "ops", "prefill"):
        ga, gb = a.get(group, {}), b.get(group, {})
        if group == "prefill" and not (ga.get("n") or gb.get("n")):
            continue
        vals = [f"{k} {_vs(ga.get(k), gb.get(k))}" for k in {**ga, **gb} if k != "n"]
        out.append(f"serve_torch_profile_diff_{group}[{tag}]: " + "; ".join(vals))
    zero = [0.0, 0.0, 0.0, 0.0]
    ka, kb = a["kernels"], b["kernels"]

    def gap(name: str) -> float:
        ra, rb = ka.get(name, zero), kb.get(name, zero)
        return float(ra[1] + ra[3] - rb[1] - rb[3])

    for name in sorted({**ka, **kb}, key=lambda k: -abs(gap(k)))[:top]:
        ra, rb = ka.get(name, zero), kb.get(name, zero)
        wa, wb = (_where(r) if name in kx else "-" for r, kx in ((ra, ka), (rb, kb)))
        out.append(
            f"#   {gap(name):+8.1f} us ({ra[1] + ra[3]:.1f} vs {rb[1] + rb[3]:.1f}; n "
            f"{ra[0] + ra[2]:.2f} vs {rb[0] + rb[2]:.2f}; {wa}/{wb}) {name}"
        )
    tables = (
        ("prefill_kernels", "per prefill + next decode"),
        ("prefill_host", "host calls per prefill + next decode"),
        ("decode_host", "host calls per steady decode step"),
    )
    z2 = [0.0, 0.0]
    for key, what in tables:
        pa, pb = a.get(key, {}), b.get(key, {})
        if not (pa and pb):
            continue
        out.append(f"# {what}, {a_label} - {b_label}, top {top} by time:")
        by = sorted({**pa, **pb}, key=lambda k: -abs(pa.get(k, z2)[1] - pb.get(k, z2)[1]))
        for name in by[:top]:
            ra, rb = pa.get(name, z2), pb.get(name, z2)
            out.append(
                f"#   {ra[1] - rb[1]:+8.1f} us ({ra[1]:.1f} vs {rb[1]:.1f}; n {ra[0]:.2f} vs "
                f"{rb[0]:.2f}) {name}"
            )
    return out


def summary(root: Path) -> list[str]:
    """Lines for every ``<label>.report.json`` in ``root``, and each comparison of `PAIRS`
    whose two labels were profiled."""
    reps = {p.name[: -len(".report.json")]: p for p in sorted(root.glob("*.report.json"))}
    got = {k: dict(json.loads(p.read_text())) for k, p in reps.items()}
    out = [line for label, rep in got.items() for line in lines(label, rep)]
    for a, b in PAIRS:
        if a in got and b in got:
            out += diff_lines(a, got[a], b, got[b])
    return out
