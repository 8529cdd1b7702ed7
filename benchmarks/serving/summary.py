"""What one trace did on one server, and the summary lines that compare servers.

A run's throughput is the output tokens that arrived inside the trace's window divided by the
window (per phase: inside the phase), so every server is judged on the same seconds of the
same load. Latencies (TTFT, TPOT) are per request, grouped by the phase the request was sent
in. Nothing is lost when every request either finished with exactly ``max_new_tokens`` tokens
or was cut by the client after its ``abort_after`` tokens.

Standard library only.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import gpu_bed
import host_probe
import iters
import launch
import pauses
from client import BIN_S, token_bins
from oracle import open_loop_notes, pair_lines, phase_oracle
from ratios import fmt_reps, ratio_line, tokens_line
from start_errors import failed_label
from traces import Trace


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def _tokens_between(bins: list[int], a: float, b: float) -> int:
    """The tokens of a run's `client.token_bins` that arrived in [a, b) seconds (a >= 0)."""
    return sum(bins[round(a / BIN_S) : round(b / BIN_S)])


def lost(r: dict[str, Any]) -> bool:
    """True when the request did not end as it had to: full length, or cut by the client."""
    if r["status"] == "done":
        return int(r["tokens"]) != int(r["max_new_tokens"])
    if r["status"] == "cut_by_client":
        return r.get("abort_after") is None or int(r["tokens"]) < int(r["abort_after"])
    return True


def _latencies(done: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """TTFT and TPOT (ms) of finished requests."""
    ttft = [1e3 * (r["t_first"] - r["t_send"]) for r in done if "t_first" in r]
    tpot = [
        1e3 * (r["t_last"] - r["t_first"]) / (r["tokens"] - 1)
        for r in done
        if r["tokens"] > 1 and "t_first" in r
    ]
    return ttft, tpot


def metrics(trace: Trace, recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase and overall: tok/s, finished requests, TTFT / TPOT p50 / p99 (ms)."""
    bins = token_bins(recs)
    phases = []
    for i, (p, (a, b)) in enumerate(zip(trace.phases, trace.phase_bounds(), strict=True)):
        mine = [r for r in recs if r["phase"] == i and r["status"] == "done"]
        ttft, tpot = _latencies(mine)
        phases.append(
            {
                "phase": p.label(),
                "tok_s": _tokens_between(bins, a, b) / (b - a),
                "finished": len(mine),
                "ttft_p50_ms": _pct(ttft, 0.5),
                "ttft_p99_ms": _pct(ttft, 0.99),
                "tpot_p50_ms": _pct(tpot, 0.5),
                "tpot_p99_ms": _pct(tpot, 0.99),
            }
        )
    end = max((r["t_end"] for r in recs), default=trace.seconds)
    done = [r for r in recs if r["status"] == "done"]
    ttft_all, tpot_all = _latencies(done)
    return {
        "ttft_p50_ms": _pct(ttft_all, 0.5),
        "ttft_p99_ms": _pct(ttft_all, 0.99),
        "tpot_p50_ms": _pct(tpot_all, 0.5),
        "tpot_p99_ms": _pct(tpot_all, 0.99),
        "tok_s": _tokens_between(bins, 0.0, trace.seconds) / trace.seconds,
        "finished_tok_per_s_to_last": sum(r["tokens"] for r in done) / max(end, 1e-9),
        "requests": len(recs),
        "finished": len(done),
        "cut_by_client": sum(r["status"] == "cut_by_client" for r in recs),
        "lost": sum(lost(r) for r in recs),
        "lost_examples": [
            {k: r.get(k) for k in ("k", "status", "tokens", "max_new_tokens", "error")}
            for r in recs
            if lost(r)
        ][:5],
        "drain_s": max(0.0, end - trace.seconds),
        "stream_pauses": pauses.find(recs),
        "phases": phases,
        "tok_bins": bins,
    }


def greedy_mismatches(recs: list[dict[str, Any]], ref: list[dict[str, Any]]) -> tuple[int, int]:
    """(compared, differing) finished requests of the same index with the reference run."""
    want = {r["k"]: r["ids_sha"] for r in ref if r["status"] == "done"}
    both = [r for r in recs if r["status"] == "done" and r["k"] in want]
    return len(both), sum(r["ids_sha"] != want[r["k"]] for r in both)


STATIC = ("nospec", "eagle")
#: the specfsm configurations judged against the best static server and the phase oracle, and
#: the prefix of their lines
CONFIGURATIONS = {
    "specfsm_goodput": "serve_specfsm",
    "specfsm_example": "serve_specfsm_example",
    "specfsm_shapes": "serve_specfsm_shapes",
}
GOALS = {
    "serve_plain_vs_nospec_server": ("specfsm_plain", "nospec", ">= 0.99"),
    "serve_spec_vs_stock_server": ("specfsm_spec", "eagle", ">= 0.99"),
}
#: ratios that are measurements, not goals (the plain_nodraft variant is a harness switch)
INFO = {
    "serve_plain_nodraft_vs_nospec_server": ("specfsm_plain_nodraft", "nospec"),
    "serve_plain_nodraft_vs_plain": ("specfsm_plain_nodraft", "specfsm_plain"),
    # the per-phase oracle run on one server (the phases variant, phase_pins.py)
    "serve_specfsm_vs_phase_pinned": ("specfsm_goodput", "specfsm_phases"),
    "serve_specfsm_example_vs_phase_pinned": ("specfsm_example", "specfsm_phases"),
    # beside the best static server: every repetition that ran the no-spec server, those of
    # a machine that ran no stock EAGLE server included
    "serve_specfsm_vs_nospec_server": ("specfsm_goodput", "nospec"),
    "serve_specfsm_example_vs_nospec_server": ("specfsm_example", "nospec"),
}


def _load(
    path: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    heads: list[dict[str, Any]] = []
    runs, servers = [], []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if "started" in rec:
            heads.append(rec)
        elif "trace" in rec:
            runs.append(rec)
        else:
            servers.append(rec)
    return heads, runs, servers


def next_rep(path: Path) -> int:
    """The first repetition number no run of ``path`` (a runs.jsonl) uses: 0 for a new one."""
    if not path.exists():
        return 0
    _, runs, _ = _load(path)
    return 1 + max((int(r["rep"]) for r in runs), default=-1)


def save_requests(rdir: Path, recs: list[dict[str, Any]]) -> None:
    """The run's requests as one gzipped JSON-lines file beside ``rdir`` (token bins dropped:
    the run's metrics already hold what they counted), ``rdir`` removed."""
    with gzip.open(rdir.with_suffix(".jsonl.gz"), "wt") as fh:
        for r in recs:
            fh.write(json.dumps({k: v for k, v in r.items() if k != "bins"}) + "\n")
    shutil.rmtree(rdir, ignore_errors=True)


def _requests(out: Path, run: dict[str, Any]) -> list[dict[str, Any]]:
    """One run's requests: the source file its record names (``requests_file``, relative to
    ``out``: a merge with ``--refer``), else its file in ``out/requests/``; [] when none."""
    name = f"{run['server']}_{run['trace']}_rep{run['rep']}.jsonl.gz"
    path = out / run.get("requests_file", Path("requests") / name)
    if not path.exists():
        return []
    with gzip.open(path, "rt") as fh:
        return [json.loads(x) for x in fh if x.strip()]


def _asked_tokens(out: Path, runs: list[dict[str, Any]], trace: Trace) -> dict[int, int]:
    """Per repetition of `runs` (one server's on `trace`), the output tokens all of an
    open-loop trace's requests ask for (a cut request: the tokens before its cut); {} for a
    trace with a closed-loop phase, whose requests depend on the server's speed."""
    if any(p.kind != "poisson" for p in trace.phases):
        return {}
    asked = {}
    for run in runs:
        recs = _requests(out, run)
        if recs:
            asked[run["rep"]] = sum(
                min(r["max_new_tokens"], r["abort_after"] or r["max_new_tokens"]) for r in recs
            )
    return asked


def _best_static(vals: dict[str, dict[int, float]], statics: list[str]) -> dict[int, float]:
    """Per repetition every static server ran, the better static server's figure."""
    reps = sorted(set.intersection(*(set(vals[s]) for s in statics)))
    return {i: max(vals[s][i] for s in statics) for i in reps}


def _alone_note(statics: list[str]) -> str:
    """What a best-static line adds when one of the static servers did not run: the folder
    judges against the other alone ("" with both)."""
    alone = [s for s in STATIC if s not in statics]
    return f" (no {', '.join(alone)} run: against {', '.join(statics)} alone)" if alone else ""


def _drained_lines(t: str, by: dict[tuple[str, str], list[dict[str, Any]]]) -> list[str]:
    """Tokens of the finished requests over the time to the last one's end, and the goal
    ratios on it (info: the window's figure is the goal's). It counts every token whenever it
    comes, so it does not split a burst's backlog at the window's edge, where a fraction of a
    second moves hundreds of tokens per second between phases."""
    got = {
        lab: {r["rep"]: r["finished_tok_per_s_to_last"] for r in rs}
        for (lab, tt), rs in by.items()
        if tt == t and all(r.get("finished_tok_per_s_to_last") for r in rs)
    }
    lines = [
        f"serve_drained_tok_s[{t}][{lab}]: {fmt_reps(list(xs.values()), 1)}"
        for lab, xs in got.items()
    ]
    pairs = {f"{k}_drained": (a, b) for k, (a, b, _) in GOALS.items()}
    statics = [s for s in STATIC if s in got]
    note = ""
    if statics:
        got["best_static"] = _best_static(got, statics)
        for lab, line in CONFIGURATIONS.items():
            pairs[f"{line}_vs_best_static_drained"] = (lab, "best_static")
        note = _alone_note(statics)
    lines += [
        ratio_line(f"{name}[{t}]", got[a], got[b], "none: info")
        + (note if b == "best_static" else "")
        for name, (a, b) in pairs.items()
        if a in got and b in got
    ]
    return lines


def _host_matched_line(name: str, ra: list[dict[str, Any]], rb: list[dict[str, Any]]) -> list[str]:
    """A goal's ratio over the repetitions whose two runs (``ra``'s server's and ``rb``'s) saw
    the host at one speed (`host_probe.matched_reps`), where some did not; none where a run
    did not sample the host (info: the goal's own line is the judged one)."""
    ta, tb = ({r["rep"]: float(r["tok_s"]) for r in rs} for rs in (ra, rb))
    keep, shared = host_probe.matched_reps(ra, rb), set(ta) & set(tb)
    if keep == shared or not all(r.get("host") for r in ra + rb):
        return []
    sub = [{i: v for i, v in d.items() if i in keep} for d in (ta, tb)]
    why = f"reps {sorted(keep)} of {sorted(shared)}: host loops within {host_probe.MATCH:.0%}"
    return [ratio_line(name, sub[0], sub[1], "none: info") + f" ({why})"]


def summarize(
    runs_path: Path,
    traces: dict[str, Trace],
    exclude: dict[tuple[str, str, int], str] | None = None,
) -> list[str]:
    """The summary lines of every run recorded in ``runs_path``, less the excluded
    (server, trace, rep) runs, each named with its reason in the header."""
    out = runs_path.parent
    heads, runs, servers = _load(runs_path)
    exclude = exclude or {}
    runs = [r for r in runs if (r["server"], r["trace"], r["rep"]) not in exclude]
    iters.fill_phase_iters(out, runs, {n: t.phase_bounds() for n, t in traces.items()})
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: r["rep"]):
        by.setdefault((r["server"], r["trace"]), []).append(r)
    labels = sorted({r["server"] for r in runs}, key=lambda s: (s not in STATIC, s))
    host_base = host_probe.baselines(runs)
    # a merged folder's own header comes first; its sources' carry ``source``
    top = [h for h in heads if "source" not in h] or heads
    head = top[-1] if top else {}
    lines = [
        f"# serving benchmark, started {head.get('started', '?')}, bed {head.get('bed', '?')}",
        f"# command: {' '.join(head.get('argv', []))}",
    ]
    lines += [
        f"# runs of {h['source']} (repetitions +{h.get('rep_offset', 0)}), started "
        f"{h.get('started', '?')}: {' '.join(h.get('argv', []))}"
        for h in heads
        if "source" in h
    ]
    cards = gpu_bed.devices(heads)
    lines.append(f"# device: {', '.join(cards) if cards else 'not recorded'}")
    lines += [
        "# tok/s = output tokens that arrived inside the trace's window / window seconds; "
        "ratios are per repetition (the repetitions both servers share), then mean and spread; "
        "two servers that share none: the ratio of their means, said so; drained tok/s = "
        "finished requests' tokens / seconds to the last one's end",
    ]
    lines += [f"# excluded: {s}:{t}:rep{r}: {why}" for (s, t, r), why in exclude.items()]
    measured = [s for s in STATIC if any(r["server"] == s for r in runs)]
    missing = [s for s in STATIC if s not in measured]
    lines.append(
        f"serve_static_servers_measured: {', '.join(measured) or 'none'}"
        + (
            f" (no runs: {', '.join(missing)}; best static and oracle use the measured only)"
            if missing
            else ""
        )
    )
    lost = mism = compared = 0
    greedy_ref: dict[str, str] = {}  # trace -> the server its outputs were compared with
    for t, trace in traces.items():
        lines.append(
            f"serving_trace[{t}]: {' '.join(p.label() for p in trace.phases)} "
            f"({trace.phases[0].seconds:g} s each)"
        )
        tok = {lab: {r["rep"]: r["tok_s"] for r in by.get((lab, t), [])} for lab in labels}
        tok = {k: v for k, v in tok.items() if v}
        for lab, xs in tok.items():
            runs_t = by[(lab, t)]
            lines.append(f"serve_tok_s[{t}][{lab}]: {fmt_reps(list(xs.values()), 1)}")
            ph = runs_t[0]["phases"]
            means = [
                statistics.fmean(r["phases"][i]["tok_s"] for r in runs_t) for i in range(len(ph))
            ]
            lines.append(
                f"serve_phase_tok_s[{t}][{lab}]: "
                + " ".join(f"{p['phase']}={m:.0f}" for p, m in zip(ph, means, strict=True))
            )
            lat = {
                k: statistics.fmean(r[k] for r in runs_t if r.get(k) is not None)
                for k in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")
                if any(r.get(k) is not None for r in runs_t)
            }
            lines.append(
                f"serve_latency_ms[{t}][{lab}]: "
                + " ".join(f"{k[:-3]}={v:.1f}" for k, v in lat.items())
            )
            for extra in (
                iters.prefill_line(t, lab, runs_t),
                iters.phase_line(t, lab, [p.label() for p in trace.phases], runs_t),
            ):
                if extra is not None:
                    lines.append(extra)
            sw = [float(r["switches"]) for r in runs_t if "switches" in r]
            if sw:
                lines.append(
                    f"serve_switches[{t}][{lab}]: {fmt_reps(sw, 1)} (load switches per run)"
                )
            if (pl := pauses.line(t, lab, trace.seconds, runs_t)) is not None:
                lines.append(pl)
            if (hl := host_probe.line(t, lab, runs_t, host_base)) is not None:
                lines.append(hl)
            lost += sum(r["lost"] for r in runs_t)
        for name, (a, b, goal) in GOALS.items():
            if a in tok and b in tok:
                lines.append(ratio_line(f"{name}[{t}]", tok[a], tok[b], goal))
                lines += _host_matched_line(f"{name}_host_matched[{t}]", by[(a, t)], by[(b, t)])
        for name, (a, b) in INFO.items():
            if a in tok and b in tok:
                lines.append(ratio_line(f"{name}[{t}]", tok[a], tok[b], "none: measured"))
        statics = [s for s in STATIC if s in tok]
        if statics:
            # per repetition that every static server ran
            best = _best_static(tok, statics)
            reps = list(best)
            run_of = {(s, r["rep"]): r for s in statics for r in by[(s, t)]}
            oracle = phase_oracle(trace, statics, run_of, reps)
            asked = _asked_tokens(out, [run_of[(statics[0], i)] for i in reps], trace)
            notes = open_loop_notes(t, oracle, best, asked, trace.seconds, fmt_reps)
            lines += notes.lines
            note = _alone_note(statics)
            cap = max((iters.running_max(rs) for (_, u), rs in by.items() if u == t), default=0)
            for lab in [x for x in tok if x in CONFIGURATIONS]:
                line = CONFIGURATIONS[lab]
                for name, ref, goal, why in (
                    (f"{line}_vs_best_static[{t}]", best, ">= 1.00", notes.best),
                    (f"{line}_vs_phase_oracle[{t}]", oracle, ">= 0.97", notes.oracle),
                ):
                    lines.append(ratio_line(name, tok[lab], ref, goal) + note + why)
                name = f"{line}_vs_best_static_tokens[{t}]"
                if (tl := tokens_line(name, tok[lab], best, trace.seconds, cap)) is not None:
                    lines.append(tl)
            lines += pair_lines(t, trace, statics, run_of, best, tok, CONFIGURATIONS)
        lines += _drained_lines(t, by)
        if "adaptive" in tok:
            lines.append(
                f"serve_sglang_adaptive[{t}]: {fmt_reps(list(tok['adaptive'].values()), 1)}"
            )
            if "specfsm_goodput" in tok:
                lines.append(
                    ratio_line(
                        f"serve_specfsm_vs_sglang_adaptive[{t}]",
                        tok["specfsm_goodput"],
                        tok["adaptive"],
                        ">= 1.00",
                    )
                )
        ref_lab = "nospec" if "nospec" in tok else (next(iter(tok)) if tok else None)
        if ref_lab is not None and by.get((ref_lab, t)):
            first = min(by[(ref_lab, t)], key=lambda r: int(r["rep"]))  # its first measured run
            ref_recs = _requests(out, first)
            greedy_ref[t] = ref_lab
            for lab in tok:
                for r in by[(lab, t)]:
                    if r is first:
                        continue
                    c, m = greedy_mismatches(_requests(out, r), ref_recs)
                    compared += c
                    mism += m
    kv = {s["server"]: s["kv_tokens"] for s in servers if s.get("kv_tokens")}
    frac = {s["server"]: s["mem_fraction_static"] for s in servers if s.get("mem_fraction_static")}
    for s, v in kv.items():
        lines.append(
            f"serve_kv_tokens[{s}]: {v}"
            + (f" (--mem-fraction-static {frac[s]:g})" if s in frac else "")
        )
    if "specfsm" in kv and "eagle" in kv:
        lines.append(
            f"serve_kv_tokens_vs_stock_server: {kv['specfsm'] / kv['eagle']:.3f} (goal >= 0.98)"
        )
    if "specfsm_shapes" in kv and "eagle" in kv:
        # what the server ran: the example as shipped with the keys --shapes-set set
        overrides = next(s for s in servers if s["server"] == "specfsm_shapes").get("shapes_set")
        cfg = launch.shapes_example(overrides)
        extra = (
            f"extra shapes {','.join(cfg['shapes'])}"
            if "shapes" in (overrides or {})
            else "its example's extra shapes"
        )
        lines.append(
            "serve_kv_tokens_shapes_vs_stock_server: "
            f"{kv['specfsm_shapes'] / kv['eagle']:.3f} (goal >= 0.98; launched at "
            f"{cfg['policy'].get('shape', 'chain7')} with {extra}, the stock server at chain3)"
        )
    lines.append(f"serve_lost_requests: {lost}")
    lines.append(f"serve_greedy_compared_requests: {compared}")
    lines.append(f"serve_greedy_mismatches: {mism}")
    if refs := ", ".join(f"{t}={lab}" for t, lab in greedy_ref.items()):
        lines.append(f"serve_greedy_reference: {refs} (info: outputs compared with its first run)")
    failed = [failed_label(s) for s in servers if "start_failed" in s or "error" in s]
    lines.append(
        f"serve_servers_failed: {len(failed)}" + (f" ({'; '.join(failed)})" if failed else "")
    )
    leaks = [s["server"] for s in servers if s.get("memory_leak_reported")]
    lines.append(
        f"serve_memory_leaks_reported: {len(leaks)}" + (f" ({', '.join(leaks)})" if leaks else "")
    )
    return lines + pauses.long_gc(out / "logs", runs)
