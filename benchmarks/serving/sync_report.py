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


def report(sync_dir: Path) -> list[str]:
    """Summary lines for every window file under ``sync_dir`` (``<label>.json``)."""
    out: list[str] = []
    for path in sorted(sync_dir.glob("*.json")):
        out += lines(path.stem, load(path))
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
