"""`specfsm demo`, the README's main job: the real engines on CPU, then the measured H200 part."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from specfsm_testbed import demo_h200


@pytest.mark.engine
def test_demo_shows_mechanism_correctness_and_the_h200(tmp_path: Path) -> None:
    """A short ramp: both engines run, specfsm leaves and re-enters speculation, every greedy
    output equals no speculation, the accept length (4.00, the agreeing draft) is explained, the
    CPU verdict and the measured H200 table are printed, the plot is written; `specfsm logs
    summary` and `timeline` read the ramp's log."""
    plot = tmp_path / "h200.png"
    cmd = [sys.executable, "-m", "specfsm.cli", "demo", "--ramp", "2,8,2"]
    cmd += ["--max-new-tokens", "12", "--plot", str(plot)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "agrees with its target by construction" in out
    assert re.search(r"greedy outputs: 12/12 sequences token-identical", out)
    assert "SPECULATING -> DRAINING" in out and "RESYNCING -> SPECULATING" in out
    assert re.search(r"^few\s+2 .* 4\.00 ", out, re.MULTILINE)
    assert "On this CPU speculation" in out
    assert "measured on one NVIDIA H200" in out
    assert plot.exists() and plot.stat().st_size > 10_000
    # the operators' tools on the demo's load-ramp log (a real engine's, 2 -> 8 -> 2 requests)
    log = re.search(r"log (\S+transitions\.jsonl)", out)
    assert log is not None
    tool = [sys.executable, "-m", "specfsm.cli", "logs"]
    summary = subprocess.run(
        [*tool, "summary", "--json", log.group(1)], capture_output=True, text=True, timeout=120
    )
    assert summary.returncode == 0, summary.stderr
    assert "SPECULATING" in summary.stdout and "DRAINING" in summary.stdout
    png = tmp_path / "ramp.png"
    timeline = subprocess.run(
        [*tool, "timeline", log.group(1), "-o", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert timeline.returncode == 0, timeline.stderr
    assert png.exists() and png.stat().st_size > 10_000


def test_h200_table_is_the_measured_sweep() -> None:
    """The packaged H200 sweep has both agreement levels at 9 concurrencies; the report names
    where speculating stops paying at mid agreement and that warm PLAIN runs at ~half speed."""
    levels = demo_h200.load_levels()
    assert sorted({lv.agreement for lv in levels}) == ["full", "mid"]
    assert [lv.c for lv in levels if lv.agreement == "full"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert all(lv.warm_plain < 0.7 * lv.nospec for lv in levels)
    buf = io.StringIO()
    demo_h200.report(levels, buf)
    assert "stops paying from c 32 on" in buf.getvalue()


def test_h200_serving_table_is_the_measured_run() -> None:
    """The demo's serving part prints the packaged H200 serving runs, PLAIN's ratio to the
    server without a draft before and after the deferred draft prefill, the context-priced
    run's goodput policy against the best static server and SGLang's adaptive speculation
    (benchmarks/gpu/results/2026-12-02_serving_ctx/), and the run with the policies deciding
    before prefill forwards (benchmarks/gpu/results/2026-12-02_serving_prefill/): goodput and
    the example against the best static server of each repetition, mean and spread, as that
    run's serving_summary.txt prints them, and every server on one machine on 2026-12-03; all
    computed from the table."""
    buf = io.StringIO()
    demo_h200.report_serving(buf)
    text = buf.getvalue()
    assert "As served (2026-12-02" in text
    assert "0.897x a server without a draft before, 1.032x with the deferred" in text
    assert re.search(r"^ctx\s+day\s+1521\s", text, re.MULTILINE)
    assert re.search(r"^ctx\s+heavy\s+1933\s+1806\s+1609\s+2088\s+-\s+2012\s+2042$", text, re.M)
    assert "goodput 1.055x / 1.041x / 1.000x / 0.878x the best\nstatic server" in text
    assert "(light / heavy / day / bursty), 1.263x / 1.251x / 0.904x SGLang's adaptive" in text
    # the newest run: rows after ctx, no adaptive / pinned columns, no day row
    assert text.index("\nprefill  light") > text.index("\nctx      day")
    assert re.search(r"^prefill\s+heavy\s+2061\s+1851(\s+-){3}\s+2134\s+2126$", text, re.M)
    assert re.search(r"^prefill\s+light\s+976\s+996(\s+-){3}\s+1066\s+1052$", text, re.M)
    assert not re.search(r"^prefill\s+day", text, re.M)
    assert (
        "(prefill, 2026-12-02, 2 reps each,\nbenchmarks/gpu/results/2026-12-02_serving_prefill/)"
        in text
    )
    assert (
        "goodput vs best static: light 1.070x (1.4%), heavy 1.037x (10.0%), bursty 1.000x (0.5%)"
        in text
    )
    assert (
        "example vs best static: light 1.056x (1.4%), heavy 1.033x (10.2%), bursty 0.995x (2.7%)"
        in text
    )
    assert "better static server in each rep: light EAGLE, heavy no-spec, bursty no-spec" in text
    assert (
        "Not in this run: SGLang's adaptive speculation (so no ratio to it), the day trace" in text
    )
    # every server on one machine (2026-12-03): per-repetition ratios as that machine's
    # serving_summary.txt prints them, and the day trace served whole by all but adaptive
    assert re.search(r"^dec03\s+day\s+1521\s+1522\s+1406\s+1521\s+1522\s+1522\s+1522$", text, re.M)
    assert "pinned PLAIN vs no-spec: light 0.966 0.975, day 1.000" in text
    assert "pinned SPECULATING vs EAGLE: light 1.028 1.033, bursty 1.009 0.992, day 1.000" in text
    assert "goodput vs best static: bursty 0.890, day 0.999" in text
    assert "example vs best static: bursty 0.984, day 0.999" in text
    assert "day: every server but SGLang's adaptive one read 1521-1522 tok/s" in text
    # one machine again after the prefill pressure and the lighter PLAIN step (machine 5),
    # its rows after dec03's and its ratios as its serving_summary.txt prints them
    assert text.index("\ndec03b   light") > text.index("\ndec03    day")
    assert re.search(r"^dec03b\s+bursty\s+1186\s+1048\s+-\s+-\s+1069\s+1114\s+-$", text, re.M)
    assert "2026-12-03_machine5/), each repetition's ratio:" in text
    assert "pinned PLAIN vs no-spec: light 0.989 0.981 0.984\n" in text
    assert "pinned SPECULATING vs EAGLE: bursty 1.019 1.020\n" in text
    assert "goodput vs best static: light 1.015 1.041, bursty 0.901 0.993\n" in text
    # machine 6: the publish-first deferred prefill and the prefill dwell credit, its ratios as
    # its serving_summary.txt prints them
    assert text.index("\ndec03c   light") > text.index("\ndec03b   bursty")
    assert re.search(r"^dec03c\s+bursty\s+1252\s+1069\s+-\s+-\s+-\s+1242\s+-$", text, re.M)
    assert "2026-12-03_machine6/), each repetition's ratio:" in text
    assert "pinned PLAIN vs no-spec: light 0.984 0.995 1.011\n" in text
    assert "goodput vs best static: light 1.064 1.029, bursty 0.995 0.998\n" in text
    # machine 7: heavy and bursty with machine 6's runtime, SGLang's adaptive server beside
    assert text.index("\ndec04    heavy") > text.index("\ndec03c   bursty")
    assert re.search(
        r"^dec04\s+heavy\s+2024\s+1811\s+1660\s+2114\s+1820\s+2084\s+2088$", text, re.M
    )
    assert (
        "(dec04, 2026-12-04,\nbenchmarks/gpu/results/2026-12-04_serving/2026-12-04_machine7/)"
        in text
    )
    assert "pinned SPECULATING vs EAGLE: heavy 0.991 1.019\n" in text
    assert "goodput vs best static: heavy 1.081 0.982, bursty 1.020 0.869\n" in text
    # machine 8: light and bursty, the goodput policy with its reversal guard
    assert text.index("\ndec04b   light") > text.index("\ndec04    bursty")
    assert re.search(r"^dec04b\s+bursty\s+1242\s+1068\s+-\s+1246\s+1093\s+1210\s+1211$", text, re.M)
    assert "pinned SPECULATING vs EAGLE: light 1.003 0.975, bursty 1.014 1.044\n" in text
    assert "goodput vs best static: light 1.005 1.044, bursty 0.961 0.964 0.999\n" in text
    # machine 9: the resumed goodput policy; no stock EAGLE server, so against no-spec alone
    assert re.search(r"^dec04c\s+bursty\s+1234\s+-\s+-\s+-\s+-\s+1260\s+1140$", text, re.M)
    assert "goodput vs no-spec (no EAGLE run): light 1.072 1.066, bursty 1.043 0.999\n" in text
    # machine 10: the debounce and the stall guard served, and the shapes example
    assert re.search(r"^dec05\s+bursty\s+1228\s+1113\s+-\s+-\s+-\s+1207\s+1228$", text, re.M)
    assert "example vs best static: bursty 1.010 1.004 0.986\n" in text
    assert "shapes example vs best static: light 0.994, bursty 1.001 1.014\n" in text
    # machine 13: every server's collector frozen, the shapes example with its profile
    assert re.search(r"^dec05b\s+bursty\s+1228\s+1077\s+-\s+-\s+-\s+1192\s+1216$", text, re.M)
    assert "shapes example vs best static: light 0.980 1.026, bursty 0.967 0.963 0.941\n" in text
    # the per-rep ratios match the summary's own reps (heavy goodput 1.089, 0.986)
    _, reps = demo_h200.load_serving()
    heavy = demo_h200.rep_ratios(reps["prefill"]["heavy"], "specfsm_goodput")
    assert [round(r, 3) for r in heavy] == [1.089, 0.986]
