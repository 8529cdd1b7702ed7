"""Where a server's time went during one run: the scheduler's per-iteration records
(``SPECFSM_ITER_TRACE``, written by benchmarks/gpu/sitecustomize.py) inside the run's window.

Each iteration's wall time is the gap to the next launch (overlap on: as served). Prefill
iterations (E, M) and decode iterations (D) are summed apart, with the tokens they carried, so
two servers on the same trace can be compared piece by piece.

Standard library only.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any


def load(folder: Path) -> list[list[Any]]:
    recs: list[list[Any]] = []
    for f in sorted(folder.glob("iter-*.jsonl")):
        with open(f) as fh:
            recs.extend(json.loads(line) for line in fh if line.strip())
    recs.sort(key=lambda r: r[0])
    return recs


def window(recs: list[list[Any]], t0: float, t1: float) -> dict[str, Any]:
    """Totals over the iterations launched in [t0, t1) (wall-clock seconds)."""
    rows = [r for r in recs if t0 <= r[0] < t1]
    out: dict[str, Any] = {"iterations": len(rows)}
    if len(rows) < 2:
        return out
    acc: dict[str, list[float]] = {}
    for cur, nxt in itertools.pairwise(rows):
        gap = nxt[0] - cur[0]
        mode = "prefill" if cur[1] in "EM" else "decode" if cur[1] == "D" else "idle"
        a = acc.setdefault(mode, [0, 0.0, 0, 0])
        a[0] += 1
        a[1] += gap
        a[2] += cur[2]
        a[3] += cur[3]
    span = rows[-1][0] - rows[0][0]
    for mode, (n, s, bs, ext) in acc.items():
        out[mode] = {
            "n": n,
            "s": round(s, 3),
            "share": round(s / span, 3) if span else None,
            "ms_mean": round(1e3 * s / n, 3),
            "bs_mean": round(bs / n, 1),
            **({"extend_tokens_mean": round(ext / n, 1)} if mode == "prefill" else {}),
        }
    out["queue_max"] = max(r[4] for r in rows)
    out["running_max"] = max(r[5] for r in rows)
    out["free_kv_min"] = min(r[6] for r in rows)
    out["span_s"] = round(span, 3)
    return out


def prefill_window(folder: Path, t0: float, t1: float) -> dict[str, Any]:
    """GPU time of the prefill pieces launched in [t0, t1) (``SPECFSM_PREFILL_TIMING``
    records: [t, stage, tokens, bs, ms, mode]), per stage and specfsm mode."""
    out: dict[str, Any] = {}
    for f in sorted(folder.glob("prefill-*.jsonl")):
        with open(f) as fh:
            for line in fh:
                if not line.strip():
                    continue
                t, stage, tok, _bs, ms, mode = json.loads(line)
                if not t0 <= t < t1:
                    continue
                key = f"{stage}@{mode}" if mode else stage
                a = out.setdefault(key, {"n": 0, "tokens": 0, "ms": 0.0})
                a["n"] += 1
                a["tokens"] += tok
                a["ms"] += ms
    for a in out.values():
        a["ms"] = round(a["ms"], 2)
        a["us_per_token"] = round(1e3 * a["ms"] / a["tokens"], 3) if a["tokens"] else None
    return out


def switches(log: Path, t0: float, t1: float) -> int:
    """Load switches (LOAD_HIGH / LOAD_LOW transitions) a specfsm transition log holds with
    ``ts`` in [t0, t1) (wall-clock seconds): the mode changes a run's policy decided."""
    n = 0
    with open(log) as fh:
        for line in fh:
            if '"LOAD_' not in line:
                continue
            rec = json.loads(line)
            if rec.get("trigger") in ("LOAD_HIGH", "LOAD_LOW") and t0 <= rec.get("ts", -1.0) < t1:
                n += 1
    return n
