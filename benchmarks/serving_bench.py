#!/usr/bin/env python3
"""Serving benchmark: the same time-varying loads against real SGLang HTTP servers, one server
after another on one machine, tokens per second per phase and overall, side by side.

    python3 benchmarks/serving_bench.py --bed cpu --quick --out out/serving     # CPU test bed
    bash benchmarks/gpu/run_on_device.sh install serving                        # the H200 box

Servers: ``nospec`` (no speculation), ``eagle`` (stock EAGLE, no plugin), ``specfsm`` (EAGLE
plus the plugin, its variants ``goodput`` / ``plain`` / ``spec`` / ``example`` set through the
control file on the one server), ``adaptive`` (SGLang's ``--speculative-adaptive``); see
benchmarks/serving/servers.py. Traces: ``light``, ``heavy``, ``bursty``, ``day``
(benchmarks/serving/traces.py). Each server runs every trace (and each specfsm variant)
``--reps`` times, repetitions interleaved over traces and variants; ``--bracket SERVER`` runs
that server's repetitions half before the others and half after them (two starts), so a card
that drifts over the driver's run tilts no ratio to it one way. Written as it goes into
``--out``: ``runs.jsonl`` (one record per run, as it finishes), the server logs, specfsm's
transition log, the per-iteration traces; at the end ``serving_summary.txt`` (``name[trace]:
value`` lines, each with its repetitions and spread). A server that fails to start or dies is
reported in one line and the others still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "serving"))

import bench_args
import client
import driver_log
import gpu_bed
import host_probe
import iters
import phase_pins
import summary
import sync_report
import torch_profile
import torch_profile_window
import traces
from launch import CPU_GOODPUT, GPU_GOODPUT, shapes_config, shapes_launch
from servers import SERVERS, VARIANTS, Bed, Server, flush_cache
from start_errors import ExitedAtStart

GPU_PROFILE = {"bs": [1, 4, 16, 64, 128, 256], "forwards": 8, "prompt_tokens": 1024}
MIRRORED = (
    "requests", "iters", "prefill", "specfsm", "metrics", "logs", "sync", "torch_profile", "host"
)  # fmt: skip


def fsm_config(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "policy": json.loads(args.goodput),
        "plain": "zero_tax",
        "log": str(out / "specfsm" / "transitions-rank{rank}.jsonl"),
        # a sampled line (with the policy's prices) every ~1-2 s at 16 requests: several per
        # 7 s phase, to set beside the per-iteration traces
        "observe_every": 100,
        "contracts_every": 16,
        "control_every": 16,
    }
    if args.profile:
        cfg["profile"] = json.loads(args.profile)
        # the rows the policy priced from, kept with the run (the transition log has the
        # calibration on top of them in its observation lines)
        cfg["profile"].setdefault("save", str(out / "specfsm" / "profile-{rank}.csv"))
    return cfg


def run_server(
    name: str,
    args: argparse.Namespace,
    bed: Bed,
    tr: dict[str, traces.Trace],
    out: Path,
    log: Any,
    reps: range,
) -> None:
    cfg = None
    if name == "specfsm":
        cfg = fsm_config(args, out)
    elif name == "specfsm_shapes":
        cfg = shapes_config(out / "specfsm", args.bed, args.shapes_set)
    log_path = out / "logs" / f"server_{name}.log"
    srv = Server(bed, name, log_path, fsm_config=cfg)
    it_dir = out / "iters" / name
    pf_dir = out / "prefill" / name
    bed.env["SPECFSM_ITER_TRACE"] = str(it_dir) if args.iter_trace else ""
    bed.env["SPECFSM_ITER_PHASES"] = "1" if args.iter_trace else ""
    bed.env["SPECFSM_PREFILL_TIMING"] = str(pf_dir) if args.iter_trace and args.bed == "gpu" else ""
    bed.env["SPECFSM_SYNC_DEBUG"] = str(out / "sync" / "flag") if args.sync_debug else ""
    which = ""
    if name == args.bracket:  # started twice: which half of its repetitions this start runs
        which = f" for repetitions {args.rep_base + reps.start}-{args.rep_base + reps.stop - 1}"
    say(f"{name}: starting{which} ({' '.join(srv.argv()[3:])})")
    while True:
        try:
            srv.start(args.start_timeout, say)
            break
        except RuntimeError as exc:
            say(f"{name}: FAILED to start: {str(exc).splitlines()[0]}")
            frac = bed.engine_args(name).get("mem_fraction_static")
            rec: dict[str, Any] = {"server": name, "start_failed": str(exc)[-2000:]}
            rec["mem_fraction_static"] = frac
            log.write(json.dumps(rec) + "\n")
            log.flush()
            nxt = None
            if isinstance(exc, ExitedAtStart) and isinstance(frac, float):
                nxt = gpu_bed.oom_retry(exc.cause, frac, args.oom_retry)
            if nxt is None:
                return
            # the bed reads each server's fraction from its own variable at every start
            bed.env[f"MEM_FRACTION_{name.upper()}"] = f"{nxt:.2f}"
            srv = Server(bed, name, log_path, fsm_config=cfg)  # a fresh process and port
            say(f"{name}: out of GPU memory at start: starting again at {nxt:.2f}")
    kv = srv.kv_tokens()
    say(f"{name}: up in {srv.start_s:.1f} s, KV pool {kv} tokens")
    frac = bed.engine_args(name).get("mem_fraction_static")
    rec = {"server": name, "start_s": srv.start_s, "kv_tokens": kv, "mem_fraction_static": frac}
    if name == "specfsm_shapes":
        rec["shapes_set"] = args.shapes_set  # what the simulator serves beside it (sim_lines)
    log.write(json.dumps(rec) + "\n")
    variants = [v for v in args.variants.split(",") if v] if name == "specfsm" else [""]
    reps_of = args.repetitions
    try:
        if not args.no_warmup:
            # the first load after a start JIT-compiles kernels for new shapes (seconds of TTFT on
            # a fresh GPU box): one unrecorded pass of the first trace (phases of at most 3 s)
            # absorbs it
            first = next(iter(tr.values()))
            short = tuple(dataclasses.replace(p, seconds=min(p.seconds, 3.0)) for p in first.phases)
            first = dataclasses.replace(first, phases=short)
            client.play(first, srv.url, out / "warmup" / name, procs=args.procs)
            say(f"{name}: warm-up pass of {first.name} done")
        if args.freeze_gc:
            say(f"{name}: /freeze_gc: {srv.freeze_gc()}")
        # a bracketed server's windows come once: at its first start with --windows-first (so a
        # driver cut short still has them), else after its last runs
        if args.windows_first and reps.start == 0:
            diagnostic_windows(args, srv, name, variants, tr, out)
        for rep in reps:
            for trace in tr.values():
                for var in variants:
                    if rep >= reps_of(var or name, trace.name):
                        continue
                    label = f"{name}_{var}" if var else name
                    if not srv.alive():
                        raise RuntimeError(f"{name}: server died\n{srv.log_tail()}")
                    sw = None
                    if var == "phases":  # pinned phase by phase (phase_pins.py)
                        try:
                            sw = phase_pins.switcher(
                                trace, args.phase_pins, out / "runs.jsonl", srv.pin
                            )
                        except ValueError as exc:
                            say(f"{label} {trace.name} rep{rep}: skipped: {exc}")
                            continue
                    prepare(srv, sw.pins[0] if sw else var, args)
                    play_run(
                        args,
                        trace,
                        srv.url,
                        label,
                        args.rep_base + rep,
                        out,
                        log,
                        it_dir if args.iter_trace else None,
                        pf_dir,
                        sw,
                    )
                    mirror(args, out)
                    if args.metrics_once and not (out / "metrics" / f"{name}.txt").exists():
                        (out / "metrics").mkdir(exist_ok=True)
                        (out / "metrics" / f"{name}.txt").write_text(srv.get("/metrics"))
        if not args.windows_first and reps.stop == args.reps:
            diagnostic_windows(args, srv, name, variants, tr, out)
    except (RuntimeError, OSError) as exc:
        say(f"{name}: stopped early: {str(exc).splitlines()[0]}")
        log.write(json.dumps({"server": name, "error": str(exc)[-2000:]}) + "\n")
    finally:
        if args.iter_trace:
            # the iteration trace's last rows are written once the scheduler has been quiet
            # for half a second (benchmarks/gpu/sitecustomize.py), and a stop kills it
            time.sleep(1.0)
        srv.stop()
    text = srv.log_path.read_text(errors="replace")
    leak = "memory leak detected" in text
    log.write(json.dumps({"server": name, "stopped": True, "memory_leak_reported": leak}) + "\n")
    log.flush()
    say(f"{name}: stopped (memory leak reported: {leak})")


def diagnostic_windows(
    args: argparse.Namespace,
    srv: Server,
    name: str,
    variants: list[str],
    tr: dict[str, traces.Trace],
    out: Path,
) -> None:
    """One server's diagnostic windows, none a figure: the sync-debug window of each variant
    (``--sync-debug``, ``--sync-of``), then the torch-profiler windows (``--torch-profile``)."""
    if args.sync_debug:
        for var in variants:
            label = f"{name}_{var}" if var else name
            if not args.sync_of or label in args.sync_of:
                sync_report.window(args, srv, var, label, tr, out, prepare, Server.warm, say)
                mirror(args, out)
    if args.torch_profile:
        torch_profile_window.run_windows(args, srv, name, variants, tr, out, prepare, mirror)


def prepare(srv: Server, var: str, args: argparse.Namespace) -> None:
    """Before a run: the specfsm server's variant set (``var``; "" for other servers), a few
    requests so the control file is read, the radix cache flushed."""
    if var:
        srv.set_variant(var, json.loads(args.goodput))
    srv.warm()
    time.sleep(0.5)
    if not srv.flush_cache():
        say(f"{srv.server}: /flush_cache refused for 60 s; the run starts warm")


def play_run(
    args: argparse.Namespace,
    trace: traces.Trace,
    url: str,
    label: str,
    rep: int,
    out: Path,
    log: Any,
    it_dir: Path | None = None,
    pf_dir: Path | None = None,
    sw: phase_pins.Switcher | None = None,
) -> None:
    """One run: play ``trace`` against ``url``, record it in ``runs.jsonl`` (with the
    iterations of its window when ``it_dir`` holds per-iteration traces), one line on stdout
    (the line ``--from-log`` reads back). ``sw`` flips the pin at the phase boundaries."""
    rdir = out / "requests" / f"{label}_{trace.name}_rep{rep}"
    try:
        t0, recs = client.play(trace, url, rdir, args.procs, sw.start if sw else None)
    finally:
        if sw is not None:
            sw.stop()
    m = summary.metrics(trace, recs) | ({"pins": sw.pins, "pin_flips": sw.flips} if sw else {})
    if it_dir is not None or pf_dir is not None:
        time.sleep(0.6)  # the server's trace flushers write within half a second of going quiet
    if it_dir is not None:
        it_recs = iters.load(it_dir)
        m["iters"] = iters.window(it_recs, t0, t0 + trace.seconds)
        m["phase_iters"] = iters.phase_windows(it_recs, t0, trace.phase_bounds())
    if pf_dir is not None and pf_dir.exists():
        m["prefill_gpu"] = iters.prefill_window(pf_dir, t0, t0 + trace.seconds)
    m["t0"] = t0
    if (h := host_probe.window(out / "host" / "probe.jsonl", t0, t0 + trace.seconds)) is not None:
        m["host"] = h
    tlog = out / "specfsm" / "transitions-rank0.jsonl"
    if label.startswith("specfsm_") and tlog.exists():
        m["switches"] = iters.switches(tlog, t0, t0 + trace.seconds + m["drain_s"])
    summary.save_requests(rdir, recs)
    log.write(json.dumps({"server": label, "trace": trace.name, "rep": rep, **m}) + "\n")
    log.flush()
    say(
        f"{label} {trace.name} rep{rep}: {m['tok_s']:.1f} tok/s, "
        f"{m['finished']}/{m['requests']} finished, lost {m['lost']}, "
        + " ".join(f"{p['phase']}={p['tok_s']:.0f}" for p in m["phases"])
    )


def mirror(args: argparse.Namespace, out: Path) -> None:
    """Copy what is recorded so far to ``--mirror`` (runs.jsonl and a tarball of the rest), so
    a call cut at its time limit still brings back every finished run."""
    if args.mirror is None:
        return
    import shutil
    import tarfile

    args.mirror.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "runs.jsonl", args.mirror / "runs.jsonl")
    tmp = args.mirror / "serving_results.tgz.tmp"
    with tarfile.open(tmp, "w:gz") as tf:
        for sub in MIRRORED:
            if (out / sub).exists():
                tf.add(out / sub, arcname=sub)
    tmp.replace(args.mirror / "serving_results.tgz")


def run_url(args: argparse.Namespace, tr: dict[str, traces.Trace], out: Path, log: Any) -> None:
    """Play the traces against a server someone else started (``--url``), as ``--label``."""
    for rep in range(args.reps):
        for trace in tr.values():
            if not flush_cache(args.url):
                say(f"{args.url}: /flush_cache refused for 60 s; the run starts warm")
            play_run(args, trace, args.url, args.label, args.rep_base + rep, out, log)
            mirror(args, out)


T_START = time.time()


def say(text: str) -> None:
    print(f"[serving +{time.time() - T_START:.0f}s] {text}", flush=True)


def main() -> int:
    ap = bench_args.parser(__doc__.splitlines()[0])
    args = ap.parse_args()
    gpu = args.bed == "gpu"
    args.sync_of = {x for x in args.sync_of.split(",") if x}
    if args.quick:
        args.traces = "light,heavy" if args.traces == ap.get_default("traces") else args.traces
    if args.reps is None:  # an explicit --reps holds under --quick too
        args.reps = 1 if args.quick else 2
    phase_s = args.phase_s or (3.0 if gpu else 4.0 if args.quick else 8.0)
    args.procs = args.procs or (4 if gpu else 1)
    args.goodput = args.goodput or json.dumps(GPU_GOODPUT if gpu else CPU_GOODPUT)
    if args.profile is None and gpu:
        args.profile = json.dumps(GPU_PROFILE)
    args.start_timeout = args.start_timeout or (600.0 if gpu else 300.0)
    all_tr = traces.builtin(args.bed, phase_s)
    names = [t for t in args.traces.split(",") if t]
    bad = (
        [t for t in names if t not in all_tr]
        + [s for s in args.servers.split(",") if s and s not in SERVERS]
        + [v for v in args.variants.split(",") if v and v not in VARIANTS]
    )
    if bad:
        ap.error(
            f"unknown trace / server / variant: {', '.join(bad)} (traces: "
            f"{', '.join(all_tr)}; servers: {', '.join(SERVERS)}; variants: "
            f"{', '.join(VARIANTS)})"
        )
    tr = {t: all_tr[t] for t in names}
    try:
        args.shapes_set = json.loads(args.shapes_set or "{}")
        if not isinstance(args.shapes_set, dict):
            raise ValueError(f"--shapes-set: expected a JSON object, got {args.shapes_set!r}")
        try:  # the shapes server's launch, its policy's shape: refused here, not at its start
            shapes_launch(shapes_config(args.out, args.bed, args.shapes_set))
        except ValueError as exc:
            raise ValueError(f"--shapes-set: {exc}") from None
        args.phase_pins = phase_pins.parse(args.phase_pins)
        args.oom_retry = gpu_bed.parse_oom_retry(args.oom_retry)
        args.repetitions = traces.repetitions(args.reps_of, args.reps)
        args.order = traces.server_order(
            [s for s in args.servers.split(",") if s], args.bracket, args.reps
        )
    except ValueError as e:
        ap.error(str(e))
    if args.vocab:
        lo, hi = (int(x) for x in args.vocab.split(","))
        tr = {t: dataclasses.replace(x, vocab=(lo, hi)) for t, x in tr.items()}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.from_log:
        args.summary_only = True
        have = (out / "runs.jsonl").read_text() if (out / "runs.jsonl").exists() else ""
        with open(out / "runs.jsonl", "a") as log:
            for path in args.from_log:
                for rec in driver_log.runs_from_log(path.read_text()):
                    line = json.dumps(rec)
                    if line not in have:
                        log.write(line + "\n")
    if not args.summary_only:
        # a second driver into the same folder numbers its repetitions after the first's: the
        # summary pairs runs by repetition and the request records are named by it, so reusing
        # rep 0 would hide (and overwrite) the first driver's rep-0 runs
        args.rep_base = summary.next_rep(out / "runs.jsonl")
        if args.rep_base:
            say(
                f"{out / 'runs.jsonl'} has repetitions 0-{args.rep_base - 1}: numbering from "
                f"{args.rep_base}"
            )
        bed = Bed(args.bed, out)
        head = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "argv": sys.argv,
            "bed": args.bed,
            "device": bed.device() if not args.url else "unknown (a server of --url)",
            "phase_s": phase_s,
            "traces": {t: [p.label() for p in x.phases] for t, x in tr.items()},
        }
        probe = None if args.no_host_probe else host_probe.start(out / "host" / "probe.jsonl")
        try:
            with open(out / "runs.jsonl", "a") as log:
                log.write(json.dumps(head) + "\n")
                if args.url:
                    run_url(args, tr, out, log)
                else:
                    for name, reps in args.order:
                        run_server(name, args, bed, tr, out, log, reps)
        finally:
            if probe is not None:
                host_probe.stop(probe)
    excl = {}
    for item in args.exclude:
        key, _, why = item.partition("=")
        srv, tname, rep = key.split(":")
        excl[(srv, tname, int(rep))] = why or "excluded"
    lines = summary.summarize(out / "runs.jsonl", tr, excl)
    if (out / "sync").is_dir():
        lines += sync_report.report(out / "sync")
    if (out / "torch_profile").is_dir():
        lines += torch_profile.summary(out / "torch_profile")
    if args.sim:
        import sim_lines  # the specfsm package and numpy: on the development machine only

        lines += sim_lines.sim_lines(out / "runs.jsonl", tr, table=args.sim_table)
    (out / "serving_summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
