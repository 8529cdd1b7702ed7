"""Stream pauses (benchmarks/serving/pauses.py): a stretch of at least 0.3 s in which requests
were streaming and no token reached the client is reported with its start, length and the
requests streaming; a shorter one, or a silence with nothing streaming, is not."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import pauses
from client import BIN_S


def _streams(n: int, silent: set[int], t_end: float = 3.0) -> list[dict[str, object]]:
    """n requests streaming from 0.05 s to `t_end`, a token in every bin but the `silent`."""
    last = int(t_end / BIN_S)
    bins = {b: 1 for b in range(1, last) if b not in silent}
    return [{"t_send": 0.0, "t_first": 0.05, "t_end": t_end, "bins": bins} for _ in range(n)]


def test_a_long_silence_while_streaming_is_a_pause() -> None:
    recs = _streams(10, set(range(10, 16)) | {20, 21})  # 0.6 s, then 0.2 s
    assert pauses.find(recs) == [[1.0, 0.6, 10]]


def test_a_silence_with_nothing_streaming_is_not() -> None:
    early = _streams(4, set(), t_end=1.0)
    late = [{"t_send": 2.0, "t_first": 2.05, "t_end": 3.0, "bins": {b: 1 for b in range(21, 30)}}]
    assert pauses.find(early + late) == []
    assert pauses.find([]) == []


def test_the_summary_line_counts_pauses_and_those_across_the_window_end() -> None:
    runs = [
        {"rep": 10, "stream_pauses": [[7.9, 0.5, 39], [27.5, 0.6, 252]]},
        {"rep": 11, "stream_pauses": []},
        {"rep": 12},  # recorded before pauses were measured
    ]
    text = pauses.line("bursty", "specfsm_goodput", 28.0, runs)
    assert text == (
        "serve_stream_pauses[bursty][specfsm_goodput]: 1.0 per run (runs: 2, 0); longest 0.6 s"
        " at +27.5 s in rep 10 (252 requests streaming); 1 across the window's end"
        " (info: >= 0.3 s with requests streaming and no token arriving)"
    )
    assert pauses.line("bursty", "nospec", 28.0, [{"rep": 0}]) is None


def test_long_collections_are_counted_where_the_warning_was_on(tmp_path: Path) -> None:
    head = "[2026-12-05 03:39:36] server_args=ServerArgs(model_path='m', "
    warn = (
        "[2026-12-05 03:40:01] LONG GARBAGE COLLECTION DETECTED | Generation {g} | Duration: {d}s"
        " | # Objects: gen0=1, gen1=2, gen2=3 | This may cause latency jitter.\n"
    )
    on = head + "gc_warning_threshold_secs=0.1, x=1)\n"
    # a committed results folder keeps its larger logs gzipped
    (tmp_path / "server_nospec.log.gz").write_bytes(
        gzip.compress((on + warn.format(g=2, d="0.4512") + warn.format(g=0, d="0.1203")).encode())
    )
    (tmp_path / "server_eagle.log").write_text(on)
    (tmp_path / "server_specfsm.log").write_text(head + "gc_warning_threshold_secs=0.0)\n")
    why = " (info: SGLang's warnings of a garbage collection over its threshold)"
    assert pauses.long_gc(tmp_path) == [
        "serve_long_gc[eagle]: 0" + why,
        "serve_long_gc[nospec]: 2, longest 0.45 s (generation 2)" + why,
    ]


def test_pauses_are_matched_to_the_collections_of_their_own_server(tmp_path: Path) -> None:
    """A pause overlapping a collection (the warning logged, to the second, as it ended) counts
    for the server whose log holds it; a run's label names its server as the merge reads it
    (servers.server_of: specfsm_goodput -> specfsm, specfsm_shapes -> specfsm_shapes)."""
    import calendar

    on = "[2026-12-05 13:20:03] server_args=ServerArgs(gc_warning_threshold_secs=0.1)\n"
    warn = (
        "[2026-12-05 13:24:22] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: "
        "0.4675s | # Objects: gen0=3, gen1=0, gen2=776597 | This may cause latency jitter.\n"
    )
    for name in ("specfsm", "specfsm_shapes"):
        (tmp_path / f"server_{name}.log").write_text(on + warn)
    t0 = calendar.timegm((2026, 12, 5, 13, 24, 0, 0, 0, 0))
    runs = [
        # 21.55 + 0.4: the collection ran 21.53-22.0 (logged at 22) -> in one; 40.0: in none
        {"server": "specfsm_goodput", "rep": 0, "t0": t0, "stream_pauses": [[21.55, 0.4, 9]]},
        {"server": "specfsm_example", "rep": 0, "t0": t0, "stream_pauses": [[40.0, 0.5, 9]]},
        {"server": "specfsm_shapes", "rep": 0, "t0": t0 + 30, "stream_pauses": [[0.0, 0.4, 9]]},
        {"server": "specfsm_spec", "rep": 1, "stream_pauses": [[21.55, 0.4, 9]]},  # no t0
    ]
    lines = pauses.long_gc(tmp_path, runs)
    assert "serve_long_gc[specfsm]: 1, longest 0.47 s (generation 2); 1 of the 2 " in lines[0]
    shapes = "serve_long_gc[specfsm_shapes]: 1, longest 0.47 s (generation 2); 0 of the 1 "
    assert shapes in lines[1]
    assert pauses.in_collection(t0 + 21.55, 0.4, pauses.collections(warn))
    assert not pauses.in_collection(t0 + 23.2, 0.4, pauses.collections(warn))


def test_a_warning_line_with_a_rank_tag_or_no_time_is_still_counted() -> None:
    """A warning under a "[time TP0]" prefix keeps its time; one without a time is counted
    and matched to no pause."""
    text = (
        "[2026-12-05 13:24:22 TP0] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: "
        "0.4675s | x\nLONG GARBAGE COLLECTION DETECTED | Generation 1 | Duration: 0.2s | x\n"
    )
    (tagged, bare) = pauses.collections(text)
    assert tagged[1:] == (0.4675, "2") and bare[1:] == (0.2, "1")
    assert not pauses.in_collection(tagged[0], 0.4, [bare])
    assert pauses.in_collection(tagged[0] - 0.3, 0.4, [tagged])


def test_collections_are_told_before_and_after_freeze_gc(tmp_path: Path) -> None:
    """A collection in the warm-up pass, before ``/freeze_gc`` answered, is told apart from one
    after it; a second start of the server (its own ``server_args``) unfreezes the count."""
    start = "[2026-12-06 08:22:20] server_args=ServerArgs(gc_warning_threshold_secs=0.1)\n"
    warn = (
        "[2026-12-06 08:28:23] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: "
        "0.6281s | # Objects: gen0=8 | This may cause latency jitter.\n"
    )
    freeze = '[2026-12-06 08:28:25] INFO:     127.0.0.1:1 - "GET /freeze_gc HTTP/1.1" 200 OK\n'
    text = start + warn + freeze + start + warn + freeze + warn
    assert pauses.after_freeze(text) == 1
    assert pauses.after_freeze(start + warn) is None
    (tmp_path / "server_nospec.log").write_text(text)
    (line,) = pauses.long_gc(tmp_path)
    assert line.startswith("serve_long_gc[nospec]: 3, longest 0.63 s (generation 2), 1 after ")
