"""The host beside the servers: a sampler that tells a slower host from a slower server.

On the H200 box (2026-12-05) some runs of the EAGLE servers (stock, SGLang's adaptive one and
specfsm's) ran every decode step 10-40% slower for tens of seconds: the GPU's work unchanged,
launch-bound small prefills 1.9x slower, the plugin's pure-CPU sections 1.2-1.4x slower, the
whole step distribution shifted (no spikes). The records could not say why the host's CPU was
slower. This sampler runs as its own process for the whole driver, pinned to the host's last
core, and every `PERIOD_S` writes one JSON line:
``[unix time, loop ms, steal share, CPU pressure avg10, mean MHz, min MHz]``:

- ``loop ms``: the time of a fixed pure-Python loop (`work`): slower when the host's cores
  run slower (clock, a neighbour on a shared host) whatever the servers do;
- ``steal share``: the share of all CPU time the hypervisor gave to others since the last
  sample (``/proc/stat``);
- ``CPU pressure avg10``: the kernel's share of time some task waited for a CPU
  (``/proc/pressure/cpu``; null where the kernel has none);
- ``mean MHz`` / ``min MHz``: the cores' current clocks (``cpufreq``; null where not exposed).

`window` reduces a run's seconds to a record (kept in the run's line of ``runs.jsonl``),
`line` prints it per (trace, server) in the summary as ``serve_host_probe[T][S]``.

Standard library only; ``python host_probe.py OUT.jsonl`` samples until SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: seconds between samples
PERIOD_S = 0.1
#: two runs whose loop medians are within this share of each other ran on a host of one speed
MATCH = 0.05
#: iterations of the fixed loop (about 1 ms on a 3 GHz core)
LOOP_N = 20_000


def work(n: int = LOOP_N) -> float:
    """The fixed loop; its time in ms."""
    t = time.perf_counter()
    sum(i * i % 7 for i in range(n))
    return (time.perf_counter() - t) * 1000.0


def _stat() -> tuple[int, int]:
    """(steal jiffies, all jiffies) of the host."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    return (f[7] if len(f) > 7 else 0), sum(f)


def _pressure() -> float | None:
    try:
        with open("/proc/pressure/cpu") as fh:
            some = fh.readline().split()
        return float(some[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def _clocks() -> tuple[float | None, float | None]:
    khz = []
    for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        with contextlib.suppress(OSError, ValueError):
            khz.append(int(p.read_text()))
    if not khz:
        return None, None
    return sum(khz) / len(khz) / 1000.0, min(khz) / 1000.0


def sample_forever(path: Path) -> None:
    """Write a sample every `PERIOD_S` to `path` until SIGTERM."""
    stop = False

    def _term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _term)
    parent = os.getppid()
    with contextlib.suppress(OSError):  # a container may refuse; the samples still count
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    steal0, all0 = _stat()
    with open(path, "a") as fh:
        while not stop and os.getppid() == parent:  # ends with the driver, however it ends
            t = time.time()
            ms = work()
            steal, total = _stat()
            share = (steal - steal0) / max(1, total - all0)
            steal0, all0 = steal, total
            mean_mhz, min_mhz = _clocks()
            row = [round(t, 3), round(ms, 4), round(share, 4), _pressure(), mean_mhz, min_mhz]
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            time.sleep(max(0.0, PERIOD_S - (time.time() - t)))


def start(path: Path) -> subprocess.Popen[bytes]:
    """The sampler as a process of its own, writing to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, __file__, str(path)], start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def window(path: Path, t0: float, t1: float) -> dict[str, Any] | None:
    """A run's seconds [t0, t1) of the samples in `path`: the loop's median and p90 (ms), the
    largest steal share and CPU pressure, the median of the cores' mean and min clocks; None
    with no sample there."""
    rows = []
    if path.exists():
        for ln in path.read_text().splitlines():
            try:
                r = json.loads(ln)
            except ValueError:
                continue  # a line the sampler was writing
            if t0 <= r[0] < t1:
                rows.append(r)
    if not rows:
        return None
    loop = sorted(r[1] for r in rows)
    out: dict[str, Any] = {
        "samples": len(rows),
        "loop_ms_p50": round(_median(loop), 4),
        "loop_ms_p90": round(loop[min(len(loop) - 1, int(0.9 * len(loop)))], 4),
        "steal_max": max(r[2] for r in rows),
    }
    for key, i, red in (("psi_max", 3, max), ("mhz_mean", 4, _median), ("mhz_min", 5, _median)):
        vals = [r[i] for r in rows if r[i] is not None]
        out[key] = round(red(vals), 1) if vals else None
    return out


def baselines(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per machine (a merged run's ``source``; one folder's runs are one machine): the median
    over its runs of their loop medians, what `line` sets each run against."""
    by: dict[str, list[float]] = {}
    for r in runs:
        if r.get("host"):
            by.setdefault(str(r.get("source", "")), []).append(float(r["host"]["loop_ms_p50"]))
    return {k: _median(v) for k, v in by.items()}


def matched_reps(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], tol: float = MATCH
) -> set[int]:
    """The repetitions whose runs of ``a`` and of ``b`` both sampled the host and found its
    loop within ``tol`` of each other. A speculative server's step at small batch is host-bound
    (its GPU idles between the draft, verify and extend launches), so its tokens per second
    follow the host's speed; a ratio over these repetitions is not moved by it."""
    la = {r["rep"]: float(r["host"]["loop_ms_p50"]) for r in a if r.get("host")}
    lb = {r["rep"]: float(r["host"]["loop_ms_p50"]) for r in b if r.get("host")}
    return {i for i in la.keys() & lb.keys() if lb[i] and abs(la[i] / lb[i] - 1) <= tol}


def line(
    trace: str, label: str, runs: Sequence[dict[str, Any]], base: dict[str, float] | None = None
) -> str | None:
    """``serve_host_probe[T][S]``, per run that sampled the host: the loop's median against
    its machine's (`baselines`, as "1.00x"), its p90, the worst steal share and CPU pressure,
    the cores' clocks."""
    hosts = [r for r in runs if r.get("host")]
    if not hosts:
        return None
    parts = []
    for r in hosts:
        h = r["host"]
        text = f"rep {r['rep']} loop {h['loop_ms_p50']:.3f} ms"
        ref = (base or {}).get(str(r.get("source", "")))
        if ref:
            text += f" ({h['loop_ms_p50'] / ref:.2f}x the machine's)"
        text += f", p90 {h['loop_ms_p90']:.3f}, steal {100 * h['steal_max']:.1f}%"
        if h.get("psi_max") is not None:
            text += f", cpu pressure {h['psi_max']:.1f}%"
        if h.get("mhz_mean") is not None:
            text += f", {h['mhz_mean']:.0f} MHz (min {h['mhz_min']:.0f})"
        parts.append(text)
    return (
        f"serve_host_probe[{trace}][{label}]: " + "; ".join(parts) + " (info: a fixed loop on a "
        "core of its own beside the servers, host_probe.py; the worst steal and pressure)"
    )


if __name__ == "__main__":
    sample_forever(Path(sys.argv[1]))
