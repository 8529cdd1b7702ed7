"""Stream pauses: stretches where requests were streaming and no token reached the client.

A server decoding a batch sends each streaming request a token every step (10-60 ms on the
H200); a prefill backlog stops decode, but each prefill chunk completes prompts whose first
tokens arrive at its end (an 8192-token chunk took ~190 ms there). So a stretch of at least
`MIN_S` in which some request was streaming throughout and no token of any request arrived is
not the scheduler's work: on the H200 (2026-12-05) such pauses of 0.35-0.6 s, the server's
HTTP side admitting and streaming nothing while its scheduler kept decoding, were in nearly
every bursty run of every server, and one that straddled the window's end held a run's last
decoded tokens past it (0.940 of the server without speculation where its other runs read
1.015 and 0.994). A run's pauses are measured from its token bins (`client.BIN_S`), which the
saved request files drop, so runs recorded before this module have none.

Beside them, the servers' own long garbage collections: the GPU bed launches every server with
SGLang's ``--gc-warning-threshold-secs`` (0.1 s), whose warning lines `long_gc` counts in each
server's log, so a pause and a collection of the same length can be put side by side.

Standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client import BIN_S

#: the shortest silence reported (s)
MIN_S = 0.3


def find(recs: Sequence[dict[str, Any]]) -> list[list[float]]:
    """[start s, seconds, requests streaming at its start] of every pause of a run's requests
    (times since the run's start, as the records keep them)."""
    ends = [float(r["t_end"]) for r in recs if "t_end" in r]
    if not ends:
        return []
    n = math.ceil(max(ends) / BIN_S) + 1
    tokens = [0] * n
    streaming = [0] * (n + 1)
    for r in recs:
        for k, v in (r.get("bins") or {}).items():
            if 0 <= int(k) < n:
                tokens[int(k)] += int(v)
        if "t_first" not in r or "t_end" not in r:
            continue
        # the bins the request streamed through whole: after its first token, before its end
        a, b = math.ceil(float(r["t_first"]) / BIN_S), math.floor(float(r["t_end"]) / BIN_S)
        if a < b:
            streaming[a] += 1
            streaming[b] -= 1
    out: list[list[float]] = []
    live, start = 0, -1
    need = round(MIN_S / BIN_S)
    for i in range(n + 1):
        if i < n:
            live += streaming[i]
        silent = i < n and live > 0 and tokens[i] == 0
        if silent and start < 0:
            start, at_start = i, live
        elif not silent and start >= 0:
            if i - start >= need:
                out.append([round(start * BIN_S, 3), round((i - start) * BIN_S, 3), at_start])
            start = -1
    return out


def line(trace: str, label: str, seconds: float, runs: Sequence[dict[str, Any]]) -> str | None:
    """``serve_stream_pauses[T][S]`` over the runs that measured them: pauses per run, the
    longest, and how many reached past the window's end (`seconds` after the start)."""
    measured = [r for r in runs if "stream_pauses" in r]
    if not measured:
        return None
    every = [(r["rep"], p) for r in measured for p in r["stream_pauses"]]
    counts = ", ".join(str(len(r["stream_pauses"])) for r in measured)
    text = f"serve_stream_pauses[{trace}][{label}]: {len(every) / len(measured):.1f} per run"
    text += f" (runs: {counts})"
    if every:
        rep, (start, length, live) = max(every, key=lambda x: x[1][1])
        edge = sum(p[0] < seconds < p[0] + p[1] for _, p in every)
        text += (
            f"; longest {length:.1f} s at +{start:.1f} s in rep {rep} ({live} requests"
            f" streaming); {edge} across the window's end"
        )
    return text + f" (info: >= {MIN_S:g} s with requests streaming and no token arriving)"


_GC = re.compile(r"LONG GARBAGE COLLECTION DETECTED \| Generation (\S+) \| Duration: ([0-9.]+)s")


def long_gc(logs: Path) -> list[str]:
    """``serve_long_gc[SERVER]`` per server log in `logs` (``server_<name>.log``) launched with
    the warning on: collections over the threshold, the longest and its generation."""
    out = []
    for log in sorted(logs.glob("server_*.log")):
        text = log.read_text(errors="replace")
        if "gc_warning_threshold_secs=0.0" in text or "gc_warning_threshold_secs" not in text:
            continue
        found = [(float(d), g) for g, d in _GC.findall(text)]
        line = f"serve_long_gc[{log.stem[len('server_') :]}]: {len(found)}"
        if found:
            d, g = max(found)
            line += f", longest {d:.2f} s (generation {g})"
        out.append(line + " (info: SGLang's warnings of a garbage collection over its threshold)")
    return out
