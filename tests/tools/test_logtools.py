"""`specfsm logs summary|timeline|replay` and `specfsm bundle` on real logs: one CPU engine run
(a forced flapping schedule, cached for the module), the committed H200 acceptance-suite logs,
hand-made multi-rank logs. Shapes in replay: test_logtools_shapes.py; malformed lines,
faults and catch-ups: test_logs_recognize.py."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from _log_lines import flap_lines, line, run_cli

from specfsm.logtools.reader import read_logs
from specfsm.logtools.replay import replay
from specfsm.logtools.summary import dwells, reason_pattern, summarize
from specfsm.logtools.timeline import downsample
from specfsm.policy.registry import PolicySpecError, make_policy, parse_spec

ROOT = Path(__file__).resolve().parents[2]
H200_TGZ = ROOT / "benchmarks/gpu/results/2026-11-30_specfsm/specfsm_logs.tgz"
H200_ENGINES = ("agree_full", "agree_mid", "chain_fsm", "chain_fsm_overlap", "tree_fsm")
FLAP = {"name": "every", "k": 2}

ENGINE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["SPECFSM_SGLANG_CPU"] = "1"
    from specfsm_cpu import boot as cpu_boot
    cpu_boot.boot()
    from specfsm_testbed import engine as E
    from specfsm_testbed import fsm as F
    d = sys.argv[1]
    eng = F.make_fsm_engine(d, policy=json.loads(sys.argv[2]), config={"observe_every": 1},
                            spec="EAGLE", agree="mid")
    try:
        for n, seed in ((2, 1), (6, 2), (2, 3)):  # a small load ramp under the flapping policy
            E.generate(eng, E.default_prompts(n, seed=seed), max_new_tokens=16)
    finally:
        eng.shutdown()
    """
)


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def h200_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed H200 acceptance-suite logs, extracted."""
    d = tmp_path_factory.mktemp("h200")
    with tarfile.open(H200_TGZ) as tar:
        tar.extractall(d, filter="data")
    return d


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONE real CPU engine (EAGLE, agreeing draft ~0.6) under a flapping schedule, every
    iteration observed; its log is shared by the module's engine tests."""
    pytest.importorskip("sglang")
    d = tmp_path_factory.mktemp("engine")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", ENGINE_SCRIPT, str(d), json.dumps(FLAP)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = d / "transitions-0.jsonl"
    assert log.exists(), f"no log after {time.monotonic() - t0:.0f} s: {proc.stderr[-2000:]}"
    return log


# ------------------------------------------------------------------------------ CPU engine
@pytest.mark.engine
def test_engine_log_summary(engine_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU engine's flapping log: every transition counted, iterations add up, exit 0."""
    rc, out, err = run_cli(capsys, "logs", "summary", str(engine_log))
    assert rc == 0, err
    lines = [json.loads(x) for x in engine_log.read_text().splitlines()]
    n_trans = sum(x["event"] == "specfsm.transition" for x in lines)
    assert n_trans >= 8 and f"transitions: {n_trans} (" in out
    assert "PLAIN->RESYNCING LOAD_LOW: scripted: target SPECULATING at iteration N" in out
    rc, out, _ = run_cli(capsys, "logs", "summary", "--json", str(engine_log))
    s = json.loads(out)["overall"]
    last_obs = max(x["iteration"] for x in lines if x["event"] == "specfsm.observation")
    assert sum(s["mode_iterations"].values()) == s["iterations"] == last_obs
    assert s["switches_per_100_iterations"] > 10


@pytest.mark.engine
def test_engine_log_replay_reproduces(engine_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Replaying the recorded policy decides exactly as the engine did; another one differs."""
    rc, out, err = run_cli(capsys, "logs", "replay", str(engine_log), "--policy", "every:k=2")
    assert rc == 0, err
    assert "iterations where the decisions differ: 0" in out
    assert "samples in a different mode: 0 of" in out
    rc, out, _ = run_cli(
        capsys,
        "logs",
        "replay",
        str(engine_log),
        "--policy",
        '{"name": "fixed", "speculate": true}',
    )
    assert rc == 0 and "iterations where the decisions differ: 0" not in out
    assert "replayed policy" in out and "always speculate" in out


@pytest.mark.engine
def test_engine_log_timeline(
    engine_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine log's timeline PNG, over iteration and over time."""
    pytest.importorskip("matplotlib")
    for x in ("iteration", "time"):
        png = tmp_path / f"t_{x}.png"
        rc, out, err = run_cli(
            capsys, "logs", "timeline", str(engine_log), "-o", str(png), "--x", x
        )
        assert rc == 0, err
        assert png.read_bytes()[:4] == b"\x89PNG" and "samples from observation lines" in out


# ------------------------------------------------------------------------------ H200 logs
def test_h200_summary_matches_engine_counters(h200_dir: Path) -> None:
    """Per mode, the iterations the summary counts (plus the unlogged tail in the last mode)
    equal the engine's own per-mode forward counters; transitions equal its counts."""
    checked = 0
    for name in H200_ENGINES:
        counters = h200_dir / f"counters_{name}.json"
        if not counters.exists():
            continue
        c = json.loads(counters.read_text())
        s = summarize(read_logs([str(h200_dir / f"transitions_{name}.jsonl")]))
        assert s.ok
        (_, _, st), run = s.per_rank[0], s.engines[0].ranks[0][0]
        per_mode = dict(st.mode_iterations)
        per_mode[dwells(run)[-1].mode] += c["iteration"] - run.last_iteration
        assert per_mode == c["mode_forwards"], name
        pairs: dict[str, int] = {}
        for (src, dst, _, _), n in st.transitions.items():
            pairs[f"{src}->{dst}"] = pairs.get(f"{src}->{dst}", 0) + n
        assert pairs == c["transitions"], name
        checked += 1
    assert checked >= 4


def test_h200_summary_cli(h200_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """All five H200 logs at once: five engines of rank 0 (not compared), 1846 transitions; the
    tree log holds two engine starts (two runs)."""
    logs = [str(h200_dir / f"transitions_{n}.jsonl") for n in H200_ENGINES]
    rc, out, err = run_cli(capsys, "logs", "summary", *logs)
    assert rc == 0, err
    assert "transition 1846" in out and "malformed 0" in out
    assert out.count(" rank 0: 1 run(s)") == 4 and "tree_fsm.jsonl rank 0: 2 run(s)" in out
    assert "== overall: 6 run(s), 14487 iterations" in out


def test_h200_replay(h200_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Replay on an H200 log (transition lines only): decisions diffed, four prices."""
    log = str(h200_dir / "transitions_agree_full.jsonl")
    rc, out, err = run_cli(capsys, "logs", "replay", log, "--policy", "threshold:high=32,low=8")
    assert rc == 0, err
    assert "0 observation lines, 221 transition lines" in out
    for name in ("recorded modes", "replayed policy", "always speculate", "never speculate"):
        assert name in out
    assert "changed its policy 34 time(s)" in out


def test_h200_timeline(h200_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Timeline of an H200 log: every transition marked."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "h200.png"
    log = str(h200_dir / "transitions_chain_fsm.jsonl")
    rc, out, err = run_cli(capsys, "logs", "timeline", log, "-o", str(png))
    assert rc == 0, err
    assert "426 transitions marked" in out and png.stat().st_size > 10_000


# ------------------------------------------------------------------------------ hand-made
def test_multirank_disagreement_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ranks' files, one switching where the other does not: reported, exit 1."""
    a, b = tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"
    a.write_text("\n".join(flap_lines(0)) + "\n")
    b.write_text("\n".join(flap_lines(1, extra=True)) + "\n")
    rc, out, err = run_cli(capsys, "logs", "summary", str(a), str(b))
    assert rc == 1
    assert "RANKS DISAGREED at 2 iteration(s)" in out
    assert "iteration 6: rank 0: no transition; rank 1: PLAIN->RESYNCING (LOAD_LOW)" in out
    assert "iteration 8: rank 0: in PLAIN; rank 1: in RESYNCING" in out
    assert "ranks disagreed at 2 iteration(s)" in err


def test_multirank_one_file_agreeing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One file holding two ranks that agree: per rank and overall, exit 0."""
    f = tmp_path / "all.jsonl"
    f.write_text(
        "\n".join(x for pair in zip(flap_lines(0), flap_lines(1), strict=True) for x in pair) + "\n"
    )
    rc, out, err = run_cli(capsys, "logs", "summary", str(f))
    assert rc == 0, err
    assert "rank 0: 1 run(s), 8 iterations" in out and "rank 1: 1 run(s)" in out
    assert "== overall: 2 run(s), 16 iterations" in out
    assert "every rank did the same at every iteration" in out


def test_timeline_100k_iterations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 100k-iteration log: series downsampled, all 2000 transitions drawn."""
    pytest.importorskip("matplotlib")
    f = tmp_path / "long.jsonl"
    rows = [line("specfsm.config", 0, 0, 0.0, initial_mode="SPECULATING")]
    mode = "SPECULATING"
    for it in range(1, 100_001):
        if it % 100 == 0:
            dst = "PLAIN" if mode == "SPECULATING" else "SPECULATING"
            trig = "LOAD_HIGH" if dst == "PLAIN" else "LOAD_LOW"
            rows.append(
                line(
                    "specfsm.transition",
                    0,
                    it,
                    it * 1e-3,
                    src=mode,
                    dst=dst,
                    trigger=trig,
                    reason="x",
                    bs=it % 64,
                )
            )
            mode = dst
        if it % 5 == 0:
            rows.append(
                line(
                    "specfsm.observation",
                    0,
                    it,
                    it * 1e-3,
                    mode=mode,
                    bs=it % 64,
                    accept_lens=[2, 3],
                )
            )
    f.write_text("\n".join(rows) + "\n")
    png = tmp_path / "long.png"
    rc, out, err = run_cli(capsys, "logs", "timeline", str(f), "-o", str(png))
    assert rc == 0, err
    assert "1000 transitions marked" in out and "downsampled to 2000 buckets" in out


def test_downsample_keeps_envelope() -> None:
    """Downsampling keeps each bucket's min and max."""
    xs = [float(i) for i in range(10_000)]
    ys = [float(i % 7) for i in range(10_000)]
    s = downsample(xs, ys, 100)
    assert len(s.x) == 100 and s.lo is not None and s.hi is not None
    assert min(s.lo) == 0.0 and max(s.hi) == 6.0


def test_timeline_needs_sim_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib the timeline says, in one line, to install specfsm[sim]."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(flap_lines(0)) + "\n")
    rc, _, err = run_cli(capsys, "logs", "timeline", str(f))
    assert rc == 2 and err.count("\n") == 1 and 'pip install "specfsm[sim]"' in err


def test_reason_pattern() -> None:
    """Reasons group by their text with numbers stripped."""
    assert reason_pattern("decode_bs=40 > high=32 for 4 iterations") == (
        "decode_bs=N > high=N for N iterations"
    )


def test_replay_in_process(tmp_path: Path) -> None:
    """Replay feeds recorded inputs to a real SpecFSM; a never-speculate policy drains at once."""
    from specfsm.model.acceptance import DraftShape
    from specfsm.model.costs import CostModel, load_table

    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(flap_lines(0)) + "\n")
    run = read_logs([str(f)]).engines()[0].ranks[0][0]
    cost = CostModel(load_table("h200_sglang0517_llama8b"), DraftShape.chain(3))
    res = replay(run, make_policy(parse_spec("fixed:speculate=false")), cost)
    assert [(d.iteration, d.trigger) for d in res.replayed] == [(3, "LOAD_HIGH"), (3, "DRAINED")]
    assert res.decision_diffs() == []


def test_policy_spec() -> None:
    """The shorthand and the JSON object build the same policy; bad ones are refused."""
    a = make_policy(parse_spec("threshold:high=32,low=8"))
    b = make_policy(parse_spec('{"name": "threshold", "high": 32, "low": 8}'))
    assert a.describe() == b.describe()
    for bad in ("threshold:high=8,low=32", "nosuch", "fixed:speculate=maybe", "{oops"):
        with pytest.raises(PolicySpecError):
            make_policy(parse_spec(bad))


def test_bundle_markdown_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle: resolved config, versions (a missing package says so), log tail, diagram."""
    from specfsm.logtools import bundle

    monkeypatch.setattr(bundle, "PACKAGES", (*bundle.PACKAGES, "no-such-package-xyz"))
    monkeypatch.setenv("SPECFSM_POLICY", "threshold:high=32,low=8")
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(flap_lines(0)) + "\n")
    md = tmp_path / "b.md"
    rc, _, err = run_cli(capsys, "bundle", str(f), "-o", str(md), "--last", "1")
    assert rc == 0, err
    text = md.read_text()
    assert "- no-such-package-xyz: not installed" in text and "```mermaid" in text
    assert '"high": 32' in text and "### Last 1 transitions" in text
    js = tmp_path / "b.json"
    rc, _, _ = run_cli(capsys, "bundle", str(f), "-o", str(js))
    data = json.loads(js.read_text())
    assert rc == 0 and len(data["transitions"]) == 2 and data["versions"]["python"]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused inputs: one stderr line, exit 2, no traceback."""
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(flap_lines(0)) + "\n")
    for argv in (
        ["logs", "summary", str(tmp_path / "missing.jsonl")],
        ["logs", "nosuch"],
        ["logs", "replay", str(f), "--policy", "threshold:high=1"],
        ["logs", "replay", str(f)],
        ["logs", "timeline", str(f), "--x", "seconds"],
    ):
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, argv


def test_sim_timeline_uses_shared_drawing(tmp_path: Path) -> None:
    """`specfsm sim`'s timeline draws through the same mode-band function as the log timeline."""
    pytest.importorskip("matplotlib")
    from specfsm.logtools import timeline_plot
    from specfsm.sim.engine import RunResult
    from specfsm.sim.report import plot_timeline

    calls: list[int] = []
    real = timeline_plot.draw_mode_timeline

    def spy(ax: Any, spans: Any, *a: Any, **k: Any) -> None:
        calls.append(len(spans))
        real(ax, spans, *a, **k)

    tl = [(0.1 * i, 4, "SPECULATING" if i < 50 else "PLAIN") for i in range(100)]
    r = RunResult("p", "l", 100, 10.0, 1, 1.0, [], [], 1, {}, timeline=tl)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timeline_plot, "draw_mode_timeline", spy)
        plot_timeline(str(tmp_path / "sim.png"), [r], "t")
    assert calls == [2] and (tmp_path / "sim.png").stat().st_size > 5000
