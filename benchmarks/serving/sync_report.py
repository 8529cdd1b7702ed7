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

import json
from pathlib import Path
from typing import Any


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
