#!/usr/bin/env python3
"""Turn an acceptance-suite results folder into ``specfsm_summary.txt`` and a per-mode cost table.

Input: the folder ``specfsm_suite.py`` wrote (``results_<tag>.jsonl``, ``greedy_<tag>.json``,
``timing_<tag>.jsonl``, ``counters_<tag>.json``, ``transitions_<tag>.jsonl``, ``engine_<tag>.log``).
Tags the summary knows: ``none`` (no speculation: the greedy reference, decode costs, the sweep's
no-speculation column), ``chain_fsm`` / ``tree_fsm`` / ``chain_fsm_overlap`` (specfsm on),
``chain`` (same engine configuration without specfsm), and any tag starting ``agree`` (the
controlled-acceptance engines: specfsm on, sweep phase).

Output: one ``name: value`` line per check (``greedy_mismatches: 0``, ``action_failures: 0``,
``contract_violations: 0``, ``plain_step_vs_decode_bs64: ...``) and the CSV (cost-table format
``model,bs,q,ctx,ms_per_step``) with every mode's step measured in the engine:

- ``llama8b`` q=1: plain decode step (no speculation), per-step synchronize;
- ``step_plain_warm`` q=1 / ``step_resync_warm`` q=1: specfsm's whole PLAIN / RESYNCING step
  (chain engine; ``_tree`` suffix: tree engine) = the 1-wide verify + the 1-token draft-extend;
- ``step_spec`` q=K: the whole K-wide iteration with specfsm (q=4 chain, q=16 tree);
  ``step_spec_nofsm`` q=4: the same without specfsm;
- ``llama8b_verify`` q=1/4/16: EAGLEWorkerV2.verify by width; ``eagle3_draft_extend8b``
  q=1/4/16: the draft-extend by width (q=1 is PLAIN's);
- ``e2e_decode`` q=1, ``e2e_plain_warm`` q=1, ``e2e_spec`` q=K: milliseconds per output token
  end to end (no per-step synchronize), the figures that count.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

K = {"chain": 4, "tree": 16}


def jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def timing_medians(path: Path) -> dict[tuple[str, str | None, int, int], tuple[float, int]]:
    """(stage, mode, bs, ctx) -> (median ms, samples), from records inside begin/end marks."""
    recs = jsonl(path)
    windows: list[tuple[float, float, int, int]] = []
    begin: dict[tuple[int, int], float] = {}
    for r in recs:
        if r.get("mark") == "begin":
            begin[(r["bs"], r.get("ctx", 1024))] = r["t"]
        elif r.get("mark") == "end":
            key = (r["bs"], r.get("ctx", 1024))
            if key in begin:
                windows.append((begin.pop(key), r["t"], *key))
    acc: dict[tuple[str, str | None, int, int], list[float]] = defaultdict(list)
    for r in recs:
        if "stage" not in r:
            continue
        for t0, t1, bs, ctx in windows:
            if t0 <= r["t"] <= t1 and r["bs"] == bs:
                acc[(r["stage"], r.get("mode"), bs, ctx)].append(r["ms"])
    return {k: (statistics.median(v), len(v)) for k, v in acc.items()}


def _plain_kind(log: Path) -> str | None:
    """ "zero_tax" or "warm": the PLAIN implementation an engine's specfsm config line names
    (logs from before zero-tax PLAIN have no such key: warm)."""
    if not log.exists():
        return None
    for line in log.read_text().splitlines():
        if '"specfsm.config"' in line:
            plain = str(json.loads(line).get("plain", "warm"))
            return "zero_tax" if plain.startswith("zero_tax") else "warm"
    return None


def _reentry_accept(log: Path) -> tuple[float, int, float, int, int] | None:
    """From a transition log with observation lines (observe_every 1): the mean accept length
    of the first K-wide round after each RESYNCING -> SPECULATING, its request-rounds, the
    mean over every other round, its request-rounds, and the number of re-entries."""
    if not log.exists():
        return None
    reentries: list[int] = []
    rounds: dict[int, list[int]] = {}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if r.get("event") == "specfsm.transition" and (r["src"], r["dst"]) == (
            "RESYNCING",
            "SPECULATING",
        ):
            reentries.append(int(r["iteration"]))
        elif r.get("event") == "specfsm.observation" and r.get("accept_lens"):
            rounds[int(r["accept_lens_iteration"])] = list(r["accept_lens"])
    if not reentries or not rounds:
        return None
    its = sorted(rounds)
    first: list[int] = []
    rest: list[int] = []
    for it in its:
        prev = [x for x in reentries if x <= it]
        is_first = bool(prev) and not [y for y in its if max(prev) <= y < it]
        (first if is_first else rest).extend(rounds[it])
    if not first or not rest:
        return None
    return sum(first) / len(first), len(first), sum(rest) / len(rest), len(rest), len(reentries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--summary", type=Path, required=True)
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument(
        "--zero-tax-tag",
        default=None,
        help="the engine whose PLAIN rows give the plain_step_vs_decode_bsN goal lines "
        "(default: the only zero-tax engine with e2e rows)",
    )
    args = ap.parse_args()
    d: Path = args.dir
    lines: list[str] = []

    def put(name: str, value: Any) -> None:
        lines.append(f"{name}: {value}")

    tags = sorted(p.name[len("results_") : -len(".jsonl")] for p in d.glob("results_*.jsonl"))
    results = {t: jsonl(d / f"results_{t}.jsonl") for t in tags}
    started = [
        t for t in tags if any(r.get("phase") == "start" and r.get("ok") for r in results[t])
    ]
    put("engines", " ".join(tags))
    put("engines_started", f"{len(started)}/{len(tags)}")
    for t in tags:
        s = [r["start_s"] for r in results[t] if r.get("phase") == "start" and r.get("ok")]
        done = [r["phase"][: -len("_done")] for r in results[t] if r["phase"].endswith("_done")]
        put(
            f"engine_{t}",
            f"start {s[0]:.1f} s; phases done: {','.join(done) or 'none'}"
            if s
            else "FAILED to start",
        )

    # ---------------------------------------------------------------- greedy equality
    ref_p = d / "greedy_none.json"
    mism_tokens = mism_seqs = seqs = 0
    if ref_p.exists():
        ref = json.loads(ref_p.read_text())["reference"]
        for t in tags:
            p = d / f"greedy_{t}.json"
            if t == "none" or t.startswith("agree") or not p.exists():
                continue
            for sched, sets in json.loads(p.read_text()).items():
                bad_here = 0
                for set_name, outs in sets.items():
                    for a, b in zip(outs, ref[set_name], strict=True):
                        seqs += 1
                        n_bad = sum(x != y for x, y in zip(a, b, strict=False)) + abs(
                            len(a) - len(b)
                        )
                        if n_bad:
                            mism_seqs += 1
                            mism_tokens += n_bad
                            bad_here += 1
                put(
                    f"greedy_{t}_{sched}",
                    "equal" if not bad_here else f"{bad_here} sequences differ",
                )
        put("greedy_sequences_compared", seqs)
        put("greedy_mismatched_sequences", mism_seqs)
        put("greedy_mismatches", mism_tokens)
    else:
        put("greedy_mismatches", "n/a (no reference engine 'none' in this folder)")
    # controlled acceptance: every variant of one engine must agree with its pinned-PLAIN output
    for t in tags:
        p = d / f"greedy_{t}.json"
        if t.startswith("agree") and p.exists():
            g = json.loads(p.read_text())
            base = g.get("pin_plain")
            bad = sum(
                a != b
                for sched, sets in g.items()
                for set_name, outs in sets.items()
                for a, b in zip(outs, base[set_name] if base else outs, strict=True)
            )
            put(f"greedy_{t}_vs_its_pinned_plain_mismatched_sequences", bad)

    # ---------------------------------------------------------------- FSM health
    fails = viol = checks = idle = 0
    for t in tags:
        c_p = d / f"counters_{t}.json"
        if not c_p.exists():  # the engine did not shut down cleanly: the test channel's copy
            c_p = d / f"testdir_{t}" / "counters-rank0.json"
        if not c_p.exists():
            continue
        c = json.loads(c_p.read_text())
        fails += int(c.get("action_failures", 0))
        checks += int(c.get("contract_checks", 0))
        idle += int(c.get("idle_checks", 0))
        put(f"transitions_{t}", json.dumps(c.get("transitions", {}), sort_keys=True))
        put(f"forwards_by_mode_{t}", json.dumps(c.get("mode_forwards", {})))
        log = d / f"transitions_{t}.jsonl"
        text = log.read_text() if log.exists() else ""
        viol += text.count("contract_violation") + text.count("SpecStateError")
        elog = d / f"engine_{t}.log"
        etext = elog.read_text(errors="replace") if elog.exists() else ""
        viol += etext.count("SpecStateError")
        put(f"machine_failed_{t}", bool(c.get("failed")))
    for t in tags:
        elog = d / f"engine_{t}.log"
        etext = elog.read_text(errors="replace") if elog.exists() else ""
        errs = [ln.strip()[:160] for ln in etext.splitlines() if "Error" in ln and ":" in ln]
        errs = [e for e in errs if not e.startswith(("File ", "warn", "Warn"))]
        if errs:
            put(f"engine_errors_{t}", f"{len(errs)} line(s); last: {errs[-1]}")
    put("action_failures", fails)
    put("contract_violations", viol)
    put("contract_checks", checks)
    put("sglang_idle_memory_checks_passed", idle)

    # ---------------------------------------------------------------- step costs
    rows: list[tuple[str, int, int, int, float]] = []
    tm = {t: timing_medians(d / f"timing_{t}.jsonl") for t in tags}

    def pick(
        t: str, stage: str, mode: str | None, model: str, q: int
    ) -> dict[tuple[int, int], float]:
        got = {}
        for (st, md, bs, ctx), (ms, _n) in tm.get(t, {}).items():
            if st == stage and md == mode:
                rows.append((model, bs, q, ctx, ms))
                got[(bs, ctx)] = ms
        return got

    decode = pick("none", "decode", None, "llama8b", 1)
    plain = pick("chain_fsm", "spec_step", "PLAIN", "step_plain_warm", 1)
    pick("chain_fsm", "spec_step", "RESYNCING", "step_resync_warm", 1)
    spec = pick("chain_fsm", "spec_step", "SPECULATING", "step_spec", 4)
    nofsm = pick("chain", "spec_step", None, "step_spec_nofsm", 4)
    pick("tree_fsm", "spec_step", "PLAIN", "step_plain_warm_tree", 1)
    pick("tree_fsm", "spec_step", "SPECULATING", "step_spec", 16)
    pick("chain_fsm", "verify", "PLAIN", "llama8b_verify", 1)
    pick("chain_fsm", "verify", "SPECULATING", "llama8b_verify", 4)
    pick("tree_fsm", "verify", "SPECULATING", "llama8b_verify", 16)
    fe1 = pick("chain_fsm", "draft_extend", "PLAIN", "eagle3_draft_extend8b", 1)
    fe4 = pick("chain_fsm", "draft_extend", "SPECULATING", "eagle3_draft_extend8b", 4)
    pick("tree_fsm", "draft_extend", "SPECULATING", "eagle3_draft_extend8b", 16)
    pick("chain_fsm", "draft", "SPECULATING", "eagle3_draft_call8b", 1)
    nofsm_fe = pick("chain", "draft_extend", None, "nofsm_draft_extend", 4)
    nofsm_vf = pick("chain", "verify", None, "nofsm_verify", 4)
    nofsm_dr = pick("chain", "draft", None, "nofsm_draft_call", 1)
    for (bs, ctx), ms in sorted(plain.items()):
        if (bs, ctx) in decode:
            put(f"sync_plain_step_vs_decode_bs{bs}_ctx{ctx}", f"{ms / decode[(bs, ctx)]:.3f}")
    for (bs, ctx), ms in sorted(spec.items()):
        if (bs, ctx) in nofsm:
            put(
                f"sync_kwide_step_with_vs_without_specfsm_bs{bs}_ctx{ctx}",
                f"{ms / nofsm[(bs, ctx)]:.3f}",
            )
    for (bs, ctx), ms in sorted(fe1.items()):
        if (bs, ctx) in fe4:
            put(f"sync_draft_extend_q1_vs_q4_bs{bs}_ctx{ctx}", f"{ms / fe4[(bs, ctx)]:.3f}")
    for name, with_fsm, without in (
        ("verify", "llama8b_verify", nofsm_vf),
        ("draft_extend", "eagle3_draft_extend8b", nofsm_fe),
        ("draft", "eagle3_draft_call8b", nofsm_dr),
    ):
        q = 1 if name == "draft" else 4
        mine = {(bs, ctx): ms for m, bs, qq, ctx, ms in rows if m == with_fsm and qq == q}
        for key in sorted(set(mine) & set(without)):
            if key[0] in (1, 64, 256):
                put(
                    f"sync_{name}_with_vs_without_specfsm_bs{key[0]}_ctx{key[1]}",
                    f"{mine[key] / without[key]:.3f}",
                )

    # end to end
    e2e: dict[tuple[str, str, int, int], float] = {}
    acc: dict[tuple[str, str, int, int], Any] = {}
    for t in tags:
        for r in results[t]:
            if r.get("phase") == "e2e":
                e2e[(t, r["mode"], r["bs"], r["ctx"])] = r["ms_per_token"]
                acc[(t, r["mode"], r["bs"], r["ctx"])] = r.get("accept_length")
    for (t, mode, bs, ctx), ms in sorted(e2e.items()):
        model = {
            ("none", "none"): ("e2e_decode", 1),
            ("chain_fsm", "PLAIN"): ("e2e_plain_warm", 1),
            ("chain_fsm", "SPECULATING"): ("e2e_spec", 4),
            ("tree_fsm", "PLAIN"): ("e2e_plain_warm_tree", 1),
            ("tree_fsm", "SPECULATING"): ("e2e_spec", 16),
            ("chain", "spec"): ("e2e_spec_nofsm", 4),
        }.get((t, mode))
        if model:
            rows.append((model[0], bs, model[1], ctx, ms))
    for (t, mode, bs, ctx), ms in sorted(e2e.items()):
        base = e2e.get(("none", "none", bs, ctx))
        if base and t != "none":
            label = {"PLAIN": "plain", "SPECULATING": "spec", "spec": "spec_nofsm"}[mode]
            suffix = "" if ctx == 1024 else f"_ctx{ctx}"
            put(
                f"{label}_step_vs_decode_{t}_bs{bs}{suffix}",
                f"{ms / base:.3f} ({ms:.2f} vs {base:.2f} ms; accept {acc[(t, mode, bs, ctx)]})",
            )
    # accept length right after re-entry vs the rest (agreeing weights: a known steady state)
    for t in tags:
        ra = _reentry_accept(d / f"transitions_{t}.jsonl") if t.startswith("agree") else None
        if ra is not None:
            put(
                f"reentry_accept_{t}",
                f"{ra[0]:.3f} in the first K-wide round after each of {ra[4]} re-entries "
                f"({ra[1]} request-rounds) vs {ra[2]:.3f} in every other round ({ra[3]})",
            )

    # the goal lines: PLAIN's end-to-end step vs the no-spec engine's decode step
    kinds = {t: _plain_kind(d / f"transitions_{t}.jsonl") for t in tags}
    with_e2e = {t for (t, mode, _, _) in e2e if mode == "PLAIN"}
    zt_tags = sorted(t for t in with_e2e if kinds.get(t) == "zero_tax")
    zt_tag = args.zero_tax_tag or (zt_tags[0] if len(zt_tags) == 1 else None)
    for bs in (1, 16, 64, 256):
        b = ("none", "none", bs, 1024)
        if zt_tag is not None and (zt_tag, "PLAIN", bs, 1024) in e2e and b in e2e:
            put(
                f"plain_step_vs_decode_bs{bs}",
                f"{e2e[(zt_tag, 'PLAIN', bs, 1024)] / e2e[b]:.3f} (goal <= 1.02; zero-tax "
                f"PLAIN, engine {zt_tag})",
            )
        for t in sorted(with_e2e):
            if kinds.get(t) == "warm" and (t, "PLAIN", bs, 1024) in e2e and b in e2e:
                put(
                    f"warm_plain_step_vs_decode_bs{bs}",
                    f"{e2e[(t, 'PLAIN', bs, 1024)] / e2e[b]:.3f} (warm PLAIN: SGLang's steps=0, "
                    f"engine {t})",
                )

    # controlled-acceptance sweep
    nospec = {r["c"]: r["tok_s"] for r in results.get("none", []) if r.get("phase") == "sweep"}
    for t in tags:
        sw = [r for r in results[t] if r.get("phase") == "sweep" and t != "none"]
        if not sw:
            continue
        by_c: dict[int, dict[str, Any]] = defaultdict(dict)
        for r in sw:
            by_c[r["c"]][r["variant"]] = r
        lines.append(
            f"sweep_{t}: c | nospec tok/s | always_speculate | plain (warm) | specfsm | accept"
            " | specfsm/best"
        )
        worst = None
        for c in sorted(by_c):
            v = by_c[c]
            ns = nospec.get(c)
            al = v.get("always_speculate", {}).get("tok_s")
            pl = v.get("plain", {}).get("tok_s")
            sf = v.get("specfsm", {}).get("tok_s")
            ac = v.get("always_speculate", {}).get("accept_length")
            best = max(x for x in (ns, al) if x) if (ns or al) else None
            ratio = sf / best if (sf and best) else None
            if ratio is not None:
                worst = ratio if worst is None else min(worst, ratio)
            f = lambda x: f"{x:.0f}" if x else "-"  # noqa: E731
            lines.append(
                f"sweep_{t}_c{c}: {f(ns)} | {f(al)} | {f(pl)} | {f(sf)} | "
                f"{ac if ac is None else round(ac, 3)} | "
                f"{ratio if ratio is None else round(ratio, 3)}"
            )
        put(
            f"sweep_{t}_worst_specfsm_vs_best_of_nospec_and_always",
            None if worst is None else round(worst, 3),
        )

    # shape choice: every static choice on one engine (each shape held, PLAIN pinned) vs the
    # shape-choosing policy, at each concurrency of the shapes phase
    for t in tags:
        sh = [r for r in results[t] if r.get("phase") == "shapes"]
        if not sh:
            continue
        by_cs: dict[int, dict[str, Any]] = defaultdict(dict)
        for r in sh:
            by_cs[r["c"]][r["variant"]] = r
        statics = sorted({v for r in sh for v in [r["variant"]] if v.startswith("static_")})
        lines.append(
            f"shapes_{t}: c | "
            + " | ".join(f"{v[7:]} tok/s (accept)" for v in statics)
            + " | specfsm tok/s (accept) | best static | specfsm/best static | specfsm ran"
        )
        worst = None
        for c in sorted(by_cs):
            v = by_cs[c]
            cells = []
            best_name: str | None = None
            best = 0.0
            for name in statics:
                r = v.get(name, {})
                tps = r.get("tok_s") or 0.0
                acc = r.get("accept_length")
                cells.append(f"{tps:.0f} ({'-' if acc is None else f'{acc:.2f}'})")
                if tps > best:
                    best_name, best = name[7:], tps
            sf = v.get("specfsm", {})
            stps = sf.get("tok_s") or 0.0
            sacc = sf.get("accept_length")
            ratio = stps / best if best else None
            if ratio is not None:
                worst = ratio if worst is None else min(worst, ratio)
            lines.append(
                f"shapes_{t}_c{c}: "
                + " | ".join(cells)
                + f" | {stps:.0f} ({'-' if sacc is None else f'{sacc:.2f}'}) | {best_name} | "
                + f"{'-' if ratio is None else f'{ratio:.3f}'} | "
                + json.dumps(sf.get("ran", {}), sort_keys=True)
            )
        put(
            f"shapes_{t}_worst_specfsm_vs_best_static",
            None if worst is None else round(worst, 3),
        )

    args.summary.write_text("\n".join(lines) + "\n")
    with open(args.csv, "w") as fh:
        for h in args.header:
            fh.write(f"# {h}\n")
        fh.write("model,bs,q,ctx,ms_per_step\n")
        for model, bs, q, ctx, ms in sorted(set(rows)):
            fh.write(f"{model},{bs},{q},{ctx},{ms:.4f}\n")
    print("\n".join(lines))
    print(f"wrote {args.summary} and {args.csv} ({len(set(rows))} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
