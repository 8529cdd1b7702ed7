"""The serving benchmark's command line (`benchmarks/serving_bench.py --help`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def parser(description: str) -> argparse.ArgumentParser:
    """Every option of the benchmark, with its default."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--bed", choices=["gpu", "cpu"], default="cpu")
    ap.add_argument("--servers", default="nospec,eagle,specfsm")
    ap.add_argument("--variants", default="goodput,plain,spec,example")
    ap.add_argument("--traces", default="light,heavy,bursty,day")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 2; --quick 1)")
    ap.add_argument(
        "--reps-of",
        default="",
        help="fewer repetitions for a server / variant, or one of its traces: spec=1,plain@day=0",
    )
    ap.add_argument(
        "--bracket",
        default="",
        help="a server whose repetitions run in two halves, before and after the other "
        "servers (started twice): a drift of the card over the driver falls on both sides of "
        "the ratios to it",
    )
    ap.add_argument("--phase-s", type=float, default=None, help="seconds per phase")
    ap.add_argument("--procs", type=int, default=None, help="client processes")
    ap.add_argument("--phase-pins", default="", help="variant phases: TRACE=MODE,...;...")
    ap.add_argument("--goodput", default=None, help="the specfsm server's goodput policy (JSON)")
    ap.add_argument(
        "--profile",
        default=None,
        help="specfsm's start-up profile config (JSON); empty (--profile=): none",
    )
    ap.add_argument(
        "--shapes-set",
        default="",
        help="keys set on the shapes example's config as shipped (JSON), e.g. "
        "'{\"shape_graph_max_bs\": 64}'",
    )
    ap.add_argument("--start-timeout", type=float, default=None)
    ap.add_argument(
        "--oom-retry",
        default="",
        help="STEP:FLOOR: a server out of GPU memory at start is started again STEP lower in "
        "--mem-fraction-static, down to FLOOR (e.g. 0.04:0.6; default: no retry)",
    )
    ap.add_argument("--iter-trace", action="store_true", help="per-iteration scheduler traces")
    ap.add_argument("--metrics-once", action="store_true", help="save /metrics once per server")
    ap.add_argument("--quick", action="store_true", help="CPU: short phases, 2 traces, 1 rep")
    ap.add_argument("--summary-only", action="store_true", help="re-summarize --out's runs")
    ap.add_argument(
        "--url", default="", help="play the traces against this running server (no launch)"
    )
    ap.add_argument("--label", default="server", help="--url's name in the summary")
    ap.add_argument(
        "--vocab", default="", help="prompt token ids drawn from LO,HI (default: the bed's)"
    )
    ap.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="leave a run out of the summary: SERVER:TRACE:REP=reason (named in the header)",
    )
    ap.add_argument(
        "--no-host-probe",
        action="store_true",
        help="no host sampler beside the servers (host_probe.py; on by default)",
    )
    ap.add_argument(
        "--freeze-gc",
        action="store_true",
        help="after each server's warm-up, GET /freeze_gc (every server alike; SGLang >= 0.5.23 "
        "does it itself after its own warm-up)",
    )
    ap.add_argument(
        "--no-warmup", action="store_true", help="skip the unrecorded warm-up trace per server"
    )
    ap.add_argument(
        "--from-log",
        type=Path,
        action="append",
        default=[],
        help="add the runs a driver log reports (a call whose runs.jsonl was lost); "
        "implies --summary-only",
    )
    ap.add_argument(
        "--mirror", type=Path, default=None, help="copy the results here after every run"
    )
    ap.add_argument(
        "--sim",
        action="store_true",
        help="add the simulator's prediction per trace and server (needs the sim extra)",
    )
    ap.add_argument(
        "--sim-table",
        default="auto",
        help="the simulator's cost table: a packaged name, a CSV, or several joined by +; "
        "auto: the runs' card's served decode steps where the project has them (an H100's), "
        "else the H200's table",
    )
    ap.add_argument(
        "--sync-debug",
        type=float,
        default=0.0,
        help="after each server's runs, a window of this many seconds under CUDA sync debug "
        "mode and cProfile (the scheduler's waits for the GPU, by call site; not a figure)",
    )
    ap.add_argument(
        "--sync-of",
        default="",
        help="the labels that get a sync-debug window, e.g. nospec,specfsm_plain (default all)",
    )
    ap.add_argument(
        "--windows-first",
        action="store_true",
        help="the sync-debug and torch-profiler windows right after each server's warm-up, "
        "before its measured runs (a driver cut short still has them), not after",
    )
    ap.add_argument("--torch-profile", type=int, default=0, help="profiled steps per window")
    ap.add_argument("--torch-profile-of", default="", help="labels with a window (default all)")
    ap.add_argument("--torch-profile-level", type=int, default=1, help="window's concurrency")
    ap.add_argument("--out", type=Path, required=True)
    return ap
