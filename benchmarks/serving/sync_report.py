"""Where a server's scheduler makes the host wait for the GPU: the report of a sync-debug
window (``serving_bench.py --sync-debug S``; the hook is ``SPECFSM_SYNC_DEBUG`` in
benchmarks/gpu/sitecustomize.py).

A window is a short closed-loop load played while the scheduler runs under
``torch.cuda.set_sync_debug_mode("warn")`` and cProfile. Its file holds the iterations per
forward mode, every waiting call's stack with its count (keyed also by the mode of the batch
launched last) and the profile's top functions. :func:`lines` turns one file into summary
lines: syncs per iteration of each mode and the top call sites. The cProfile overhead slows
the window, so its tok/s is not a measurement; the counts and call sites are.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import client
import traces


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def lines(label: str, rec: dict[str, Any], top: int = 6) -> list[str]:
    iters = {str(k): int(v) for k, v in rec.get("iters", {}).items()}
    per_mode: dict[str, int] = {}
    sites: dict[str, int] = {}
    for n, mode, *frames in rec.get("stacks", []):
        per_mode[mode] = per_mode.get(mode, 0) + int(n)
        site = " <- ".join(reversed(frames[-3:])) if frames else "?"
        sites[site] = sites.get(site, 0) + int(n)
    rates = " ".join(
        f"{m}={per_mode.get(m, 0) / max(n, 1):.2f}/iter({n} iters)"
        for m, n in sorted(iters.items())
    )
    out = [f"serve_sync_waits[{label}]: {sum(per_mode.values())} waits; {rates or 'no iterations'}"]
    for site, n in sorted(sites.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"#   {n:6d}  {site}")
    ours = [
        r
        for r in rec.get("profile_specfsm_cumtime", [])
        # specfsm's modules only (a window recorded before the hook matched on
        # specfsm_sglang also holds the box's site folder, /tmp/specfsm_site)
        if "specfsm_sglang" in r[0] or r[0].startswith("_sglang/")
    ]
    for name, calls, tottime, cumtime in ours[:top]:
        out.append(
            f"#   specfsm cumtime {cumtime:8.3f} s own {tottime:7.3f} s {calls:7d} calls  {name}"
        )
    return out


#: the scheduler loop's own steps (``Scheduler``): their cumulative times per iteration
#: split one loop turn, the forward's launch (and on a CPU engine the forward) in run_batch
LOOP = (
    "recv_requests",
    "process_input_requests",
    "get_next_batch_to_run",
    "run_batch",
    "process_batch_result",
)

#: which window each label is set beside: (the server with the plugin, the one without); the
#: policies' windows at a top level, where both run PLAIN, beside the no-spec server's and each
#: other's (one server, two policies: what differs is the policy's path)
PAIRS = (
    ("specfsm_plain", "nospec"),
    ("specfsm_spec", "eagle"),
    ("specfsm_goodput", "nospec"),
    ("specfsm_example", "nospec"),
    ("specfsm_example", "specfsm_goodput"),
)


def _sched(rec: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """name -> (calls, cumulative s) of the scheduler's functions in a window's profile."""
    return {str(r[0]): (int(r[1]), float(r[3])) for r in rec.get("profile_sched_cumtime", [])}


def _iterations(rec: dict[str, Any]) -> int:
    return max(1, sum(int(v) for v in rec.get("iters", {}).values()))


def sched_diff(
    a_label: str, a: dict[str, Any], b_label: str, b: dict[str, Any], top: int = 12
) -> list[str]:
    """``a`` beside ``b`` function by function: each scheduler function's cumulative time per
    loop iteration (µs) in both windows, the loop's steps first, then the functions only one
    server calls, then those of both whose time per iteration differs most. Both windows run
    under cProfile, whose cost grows with the Python calls made, so a difference counts calls
    as well as time; per call and calls per iteration are printed beside it to tell which.
    Two windows run one after another, on a host whose speed may differ between them: a
    function only one server calls is a difference of code paths whatever that speed."""
    fa, fb = _sched(a), _sched(b)
    if not fa or not fb:
        return []
    na, nb = _iterations(a), _iterations(b)
    names = list({**fa, **fb})

    def per_iter(name: str) -> tuple[float, float]:
        """The function's cumulative µs per loop iteration in ``a`` and in ``b``."""
        return 1e6 * fa.get(name, (0, 0.0))[1] / na, 1e6 * fb.get(name, (0, 0.0))[1] / nb

    def row(name: str) -> str:
        ca, ta = fa.get(name, (0, 0.0))
        cb, tb = fb.get(name, (0, 0.0))
        pa, pb = per_iter(name)
        each_a = f"{1e6 * ta / ca:8.1f}" if ca else "       -"
        each_b = f"{1e6 * tb / cb:8.1f}" if cb else "       -"
        return (
            f"#   {pa - pb:+9.1f} us/iter  {pa:9.1f} vs {pb:9.1f}  per call {each_a} vs {each_b}"
            f"  calls/iter {ca / na:5.2f} vs {cb / nb:5.2f}  {name}"
        )

    def gap(name: str) -> float:
        pa, pb = per_iter(name)
        return -abs(pa - pb)

    def step(name: str) -> str:
        return name.rsplit(" ", 1)[-1]

    loop = sorted((n for n in names if step(n) in LOOP), key=lambda n: LOOP.index(step(n)))
    steps = sum(pa - pb for pa, pb in map(per_iter, loop))
    out = [
        f"serve_sync_sched_diff[{a_label}-{b_label}]: {steps:+.1f} us per iteration in "
        f"the loop's steps ({na} vs {nb} iterations; {a.get('wall_s', '?')} vs "
        f"{b.get('wall_s', '?')} s under cProfile: counts and call sites, not a speed)"
    ]
    out += [row(n) for n in loop]
    # a function one server calls and the other never does is a difference of code paths,
    # which holds whatever the host's speed in each window; the shared ones differ by both
    only = sorted((n for n in names if (n in fa) != (n in fb)), key=gap)
    shared = sorted((n for n in fa if n in fb and n not in loop), key=gap)
    if only:
        out.append(f"#   called by one server only ({a_label} vs {b_label}):")
        out += [row(n) for n in only[:top]]
    if shared:
        out.append("#   called by both, the largest differences:")
        out += [row(n) for n in shared[:top]]
    return out


def report(sync_dir: Path) -> list[str]:
    """Summary lines for every window file under ``sync_dir`` (``<label>.json``), then each
    pair of ``PAIRS`` whose two windows are there, side by side."""
    out: list[str] = []
    recs = {path.stem: load(path) for path in sorted(sync_dir.glob("*.json"))}
    for label, rec in recs.items():
        out += lines(label, rec)
    for a, b in PAIRS:
        if a in recs and b in recs:
            out += sched_diff(a, recs[a], b, recs[b])
    return out


def window(
    args: Any,
    srv: Any,
    var: str,
    label: str,
    tr: dict[str, traces.Trace],
    out: Path,
    prepare: Callable[[Any, str, Any], None],
    warm: Callable[[Any], None],
    say: Callable[[str], None],
) -> None:
    """A sync-debug window after the measured runs (benchmarks/serving/sync_report.py): the
    first trace's lengths at its highest closed-loop level for ``--sync-debug`` seconds, with
    the scheduler's waits and profile recorded; nothing of it enters the summary's figures.
    ``prepare`` sets the variant and flushes the cache, ``warm`` sends a few requests (the
    benchmark's own), ``say`` prints a line."""
    first = next(iter(tr.values()))
    level = max((p.level for p in first.phases if p.kind == "closed"), default=64.0)
    win = dataclasses.replace(
        first, name="sync", phases=(traces.Phase("closed", level, args.sync_debug),)
    )
    flag = out / "sync" / "flag"
    flag.parent.mkdir(parents=True, exist_ok=True)
    for old in flag.parent.glob("flag.*.json"):
        old.unlink()
    prepare(srv, var, args)
    flag.write_text("")
    try:
        client.play(win, srv.url, out / "sync" / f"requests_{label}", procs=args.procs)
    finally:
        flag.unlink(missing_ok=True)
    warm(srv)  # an iteration after the flag went away writes the window's file
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and not list(flag.parent.glob("flag.*.json")):
        time.sleep(0.5)
    got = sorted(flag.parent.glob("flag.*.json"))
    if not got:
        say(f"{label}: sync-debug window wrote no file")
        return
    dst = out / "sync" / f"{label}.json"
    got[0].replace(dst)
    for line in lines(label, load(dst)):
        say(line)
