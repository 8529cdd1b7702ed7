"""Where a server's time went during one run: the scheduler's per-iteration records
(``SPECFSM_ITER_TRACE``, written by benchmarks/gpu/sitecustomize.py) inside the run's window.

Each iteration's wall time is the gap to the next launch (overlap on: as served). Prefill
iterations (E, M) and decode iterations (D) are summed apart, with the tokens they carried, so
two servers on the same trace can be compared piece by piece.

Standard library only (and `servers.server_of`, `served_steps.served_steps`).
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from served_steps import served_steps
from servers import SERVERS, server_of


def load(folder: Path) -> list[list[Any]]:
    recs: list[list[Any]] = []
    for f in sorted(folder.glob("iter-*.jsonl")):
        with open(f) as fh:
            recs.extend(json.loads(line) for line in fh if line.strip())
    recs.sort(key=lambda r: r[0])
    return recs


def window(recs: list[list[Any]], t0: float, t1: float) -> dict[str, Any]:
    """Totals over the iterations launched in [t0, t1) (wall-clock seconds)."""
    return totals([r for r in recs if t0 <= r[0] < t1])


def totals(rows: list[list[Any]]) -> dict[str, Any]:
    """`window`'s totals over `rows`, the iterations of one window in launch order."""
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
    clean = [ms for steps in served_steps([rows]).values() for _, ms in steps]
    if clean:
        # a decode launched after two decodes (`served_steps`): no prefill's time lands in its
        # gap, so the gap is the decode step as served (overlap on)
        out["decode"]["steady_ms_p50"] = round(statistics.median(clean), 3)
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


def phase_windows(
    recs: list[list[Any]], t0: float, bounds: list[tuple[float, float]]
) -> list[dict[str, Any]]:
    """Per phase of a run (``bounds`` in seconds after ``t0``): the seconds spent in prefill
    iterations, the decode iterations and their mean batch, the most requests running and
    queued, the fewest free KV tokens, and when a decode first ran while requests waited
    (admission blocked) with how many did. Under a burst that prefill binds, the tokens a
    client sees follow the decode iterations run between prefills, and once the running cap
    binds, the decodes run at it: this is where two servers' bursts differ."""
    out: list[dict[str, Any]] = []
    for a, b in bounds:
        rows = [r for r in recs if t0 + a <= r[0] < t0 + b]
        w = totals(rows)
        pf, dec = w.get("prefill", {}), w.get("decode", {})
        # a decode launched while requests wait: SGLang admits a waiting request whenever it
        # can, so admission was blocked (the running-request cap or the KV pool)
        blocked = [r[0] for r in rows if r[1] == "D" and r[4] > 0]
        out.append(
            {
                "prefill_s": pf.get("s", 0.0),
                "decode_n": dec.get("n", 0),
                "decode_bs": dec.get("bs_mean", 0.0),
                "decode_steady_ms": dec.get("steady_ms_p50"),
                "running_max": w.get("running_max"),
                "queue_max": w.get("queue_max"),
                "free_kv_min": w.get("free_kv_min"),
                "blocked_at": round(blocked[0] - t0 - a, 3) if blocked else None,
                "blocked_n": len(blocked),
            }
        )
    return out


def phase_line(t: str, lab: str, names: list[str], runs: list[dict[str, Any]]) -> str | None:
    """``serve_phase_iters[T][S]``: per phase, over the runs that recorded ``phase_iters``,
    the mean prefill seconds, the range of decode iterations and their mean batch."""
    per = [r["phase_iters"] for r in runs if len(r.get("phase_iters") or []) == len(names)]
    if not per:
        return None
    parts = []
    for i, name in enumerate(names):
        pf = sum(p[i]["prefill_s"] for p in per) / len(per)
        dn = sorted(int(p[i]["decode_n"]) for p in per)
        bs = sum(p[i]["decode_bs"] for p in per) / len(per)
        span = _span(dn, "{}")
        step = [p[i]["decode_steady_ms"] for p in per if p[i].get("decode_steady_ms")]
        at = f" at {statistics.median(step):.2f} ms" if step else ""
        parts.append(f"{name}=prefill {pf:.1f}s decode {span}x bs{bs:.0f}{at}{_blocked(i, per)}")
    return (
        f"serve_phase_iters[{t}][{lab}]: "
        + " ".join(parts)
        + f" (info: per phase, {len(per)} runs: seconds in prefill iterations, decode"
        " iterations (fewest-most), their mean batch and, where recorded, the median over"
        " runs of a steady decode step: one launched after two decodes, served_steps.py;"
        " 'blocked from': seconds into the phase of the first decode run while requests"
        " waited, admission blocked by the running cap or the KV pool, earliest-latest over"
        " runs, and how many such decodes)"
    )


def _blocked(i: int, per: list[list[dict[str, Any]]]) -> str:
    """Phase `i`'s first blocked decode over the runs that had one (`phase_windows`)."""
    at = sorted(p[i]["blocked_at"] for p in per if p[i].get("blocked_at") is not None)
    if not at:
        return ""
    n = sorted(int(p[i].get("blocked_n") or 0) for p in per)
    return f" blocked from {_span(at, '{:.3f}')}s ({_span(n, '{}')}x)"


def _span(values: list[Any], fmt: str) -> str:
    """The fewest and most of sorted `values`, each as `fmt` gives it: one figure when equal."""
    lo, hi = fmt.format(values[0]), fmt.format(values[-1])
    return lo if values[0] == values[-1] else f"{lo}-{hi}"


def prefill_line(t: str, lab: str, runs_t: list[dict[str, Any]]) -> str | None:
    """Where the prefill time went (GPU time from CUDA events, ``--iter-trace`` on the GPU)."""
    tgt_ms = dr_ms = 0.0
    tok = 0
    share = [r["iters"]["prefill"]["share"] for r in runs_t if r.get("iters", {}).get("prefill")]
    for r in runs_t:
        for key, a in (r.get("prefill_gpu") or {}).items():
            if key.startswith("target"):
                tgt_ms += a["ms"]
                tok += a["tokens"]
            elif key.startswith("draft"):
                dr_ms += a["ms"]
    if not tok:
        return None
    return (
        f"serve_prefill_gpu[{t}][{lab}]: target_us_per_token={1e3 * tgt_ms / tok:.2f} "
        f"draft_us_per_token={1e3 * dr_ms / tok:.2f} prefill_tokens_per_run={tok // len(runs_t)}"
        + (f" prefill_iteration_share={statistics.fmean(share):.3f}" if share else "")
    )


def fill_phase_iters(out: Path, runs: list[dict[str, Any]], bounds: dict[str, Any]) -> None:
    """Give ``phase_iters`` to the runs recorded without it or without its later fields,
    where ``out/iters/`` holds their server's iteration traces (a results folder's tgz
    unpacked into it): the specfsm variants share the ``specfsm`` server's
    (`servers.server_of`). ``bounds``: trace name -> its phase bounds."""
    cache: dict[Path, list[list[Any]]] = {}
    for r in runs:
        have = r.get("phase_iters")
        if have is not None and all("blocked_n" in p for p in have):
            continue
        if "t0" not in r or r["trace"] not in bounds:
            continue
        folder = out / "iters" / server_of(r["server"], SERVERS)
        if not folder.is_dir():
            continue
        if folder not in cache:
            cache[folder] = load(folder)
        r["phase_iters"] = phase_windows(cache[folder], r["t0"], bounds[r["trace"]])


def running_max(runs: list[dict[str, Any]]) -> int:
    """The most requests any of `runs` held running at once (0: no iteration trace)."""
    return max((int((r.get("iters") or {}).get("running_max") or 0) for r in runs), default=0)
