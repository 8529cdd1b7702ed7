"""The simulator's lines of a serving summary: its prediction beside each measured figure.

``sim_lines(runs_path, traces)`` puts `sim_predict.predict` beside every (trace, server) a
``runs.jsonl`` measured, as ``serve_sim_vs_measured[TRACE][SERVER]: ratio (...)``, with a header
saying what is fitted, a comment line after each miss beyond 0.9-1.1 (`sim_miss`) and per trace
one info line with the simulator's own prefill approximation. The table is chosen by the runs'
card (`table_for`): a card's decode steps as served where the project has them, else the
H200's. What the simulator models and where each constant comes from: `sim_predict`.

Run ``python benchmarks/serving/sim_lines.py`` for the committed 2026-12-02 run.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specfsm.model.costs import CostModel, load_table
from specfsm.sim.sglang_peer import SGLangAdaptiveController

_HERE = str(Path(__file__).resolve().parent)  # benchmarks/serving: its sibling modules
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import gpu_bed  # noqa: E402
import launch as bench_launch  # noqa: E402
import sim_miss  # noqa: E402
import sim_predict as sp  # noqa: E402
import traces as bench_traces  # noqa: E402

__all__ = ["AUTO_TABLE", "SERVED_BY_CARD", "sim_lines", "table_for"]


def _runs(runs_path: str | Path) -> list[dict[str, Any]]:
    out = []
    for line in Path(runs_path).read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _measured(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Run records with a tok/s, by (trace, server), in file order."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        if "trace" in r and "tok_s" in r:
            by.setdefault((str(r["trace"]), str(r["server"])), []).append(dict(r))
    return by


def _miss_line(
    trace: bench_traces.Trace,
    recs: Sequence[Mapping[str, Any]],
    server: str,
    ratio: float,
    sim_phases: Sequence[float],
    sim_tpot: Sequence[float],
) -> str:
    """`sim_miss.why` with the trace's facts; for ``adaptive`` its candidate steps per phase."""
    arrivals = sp.arrival_counts(trace) if trace.phases[0].kind == "poisson" else []
    ran = {}
    if server == "adaptive" and trace.phases[0].kind == "closed":
        ctl = sp.controller(server, sp.H200_TABLE, 2.4)
        assert isinstance(ctl, SGLangAdaptiveController)
        for i, p in enumerate(trace.phases):
            steps = ctl.candidate_steps(int(p.level))
            ran[i] = (
                f"SGLang 0.5.17's adaptive speculation runs {' or '.join(map(str, steps))} draft "
                f"steps at {int(p.level)} requests, whose served step the table does not hold"
            )
    return sim_miss.why(
        trace,
        recs,
        server,
        ratio,
        sim_phases,
        sim_tpot,
        prompt_mean=sp.mean_lengths(trace)[0],
        prefill_us=sp.MEASURED_PREFILL_US,
        arrivals=arrivals,
        ran=ran,
    )


#: `sim_lines`' table chosen by the runs' card (`table_for`)
AUTO_TABLE = "auto"
#: decode steps as served on a card, merged over the H200's in-engine forwards: the card's
#: name as the runs' header gives it (no spaces, upper case) -> the table
SERVED_BY_CARD = {"H100": f"{sp.H200_TABLE}+h100_sglang0517_llama8b_served"}


def _card_key(device: str) -> str:
    """A device as the runs' header names it, as `SERVED_BY_CARD` and table names match it."""
    return device.upper().replace(" ", "")


def table_for(devices: Sequence[str]) -> str:
    """The simulator's table for runs on `devices`: a card's served decode steps where every
    device is that card and the project has them (`SERVED_BY_CARD`), else the H200's table
    (the summary's header names the table, and says when its card is not the runs')."""
    names = {_card_key(d) for d in devices}
    for card, table in SERVED_BY_CARD.items():
        if names and all(card in n for n in names):
            return table
    return sp.H200_TABLE


def sim_lines(
    runs_path: str | Path,
    traces: Mapping[str, bench_traces.Trace],
    *,
    table: str = AUTO_TABLE,
    accept_len: float = 2.4,
    seeds: int = 6,
) -> list[str]:
    """Summary lines: ``serve_sim_vs_measured[TRACE][SERVER]: <predicted / measured>
    (predicted X tok/s, measured Y; goal 0.9-1.1)`` for every (trace, server) measured in
    `runs_path` whose trace is in `traces` (measured: the mean tok/s over its repetitions),
    a comment line after each miss beyond the goal, a header saying what is fitted, and per
    trace one info line with the simulator's own table prefill instead of the measured one.
    ``table`` ``"auto"``: `table_for` the runs' card."""
    runs = _runs(runs_path)
    devices = gpu_bed.devices(runs)
    table = table_for(devices) if table == AUTO_TABLE else table
    bench_traces.check_measured(runs, traces, "sim_lines")
    by = _measured(runs)
    # the shapes example as its server was started (keys set by --shapes-set)
    shapes_set = bench_launch.shapes_set_of(runs)
    sim = functools.partial(sp.simulate, seeds=seeds, shapes_set=shapes_set)
    # the simulator's own prefill approximation (the info line)
    pred_raw = functools.partial(sp.predict, seeds=seeds, shapes_set=shapes_set)
    t_us, d_us = sp.MEASURED_PREFILL_US
    probe = CostModel(load_table(table), sp.SHAPE)
    lines = [
        f"# simulator (specfsm.sim.engine.run) beside the measurement: table {table}, "
        f"{sp.SHAPE.label()}, accept length {accept_len:g}, mean of {seeds} simulator seeds; "
        "tok/s = output tokens committed inside the trace's window / window seconds",
        f"# PARTLY FITTED: prefill priced at {t_us:g} us (target) + {d_us:g} us (draft) of GPU "
        "time per prompt token, the pooled prefill_gpu of the H200 serving runs in "
        "benchmarks/gpu/results/2026-12-02_serving (fitted on those, out of sample for any "
        "other run; the simulator's own "
        f"table approximation, {1000 * probe.prefill_ms_per_token_target:.1f} + "
        f"{1000 * probe.prefill_ms_per_token_draft:.1f} us, on the serve_sim_table_prefill lines); "
        "Poisson rates and mean lengths from the trace's own requests; decode steps from the table",
    ]
    # a merged table (A+B) names a card per part: a served table of the runs' own card
    # prices their decode steps from it
    cards = sorted({Path(x).name.split("_", 1)[0].upper() for x in table.split("+") if x})
    if other := [d for d in devices if not any(c in _card_key(d) for c in cards)]:
        lines.append(
            f"# the table's card is the {' / '.join(cards)}; these runs' is {', '.join(other)}: "
            "the simulator prices their decode steps from another card"
        )
    for name in traces:
        tr = traces[name]
        servers = [s for s in sp.SERVERS if (name, s) in by]
        servers += sorted(s for (t, s) in by if t == name and s not in sp.SERVERS)
        table_ratios = []
        for server in servers:
            recs = by[(name, server)]
            measured = sum(float(r["tok_s"]) for r in recs) / len(recs)
            if server not in sp.SERVERS:
                lines.append(f"# serve_sim_vs_measured[{name}][{server}]: no simulated server")
                continue
            sim_phases, sim_tpot = sim(tr, server, table, accept_len)
            pred = sum(sim_phases) * sp.phase_seconds(tr) / tr.seconds
            ratio = pred / measured
            lines.append(
                f"serve_sim_vs_measured[{name}][{server}]: {ratio:.3f} (predicted {pred:.0f} "
                f"tok/s, measured {measured:.0f}; goal {sp.GOAL[0]:g}-{sp.GOAL[1]:g})"
            )
            if not sp.GOAL[0] <= ratio <= sp.GOAL[1]:
                lines.append(_miss_line(tr, recs, server, ratio, sim_phases, sim_tpot))
            raw = pred_raw(tr, server, table, accept_len, prefill_us_per_token=None)
            table_ratios.append(f"{server} {raw / measured:.2f}")
        if table_ratios:
            lines.append(
                f"serve_sim_table_prefill_vs_measured[{name}]: {', '.join(table_ratios)} "
                "(info: the simulator's own prefill approximation, nothing fitted)"
            )
    return lines


if __name__ == "__main__":
    trs = bench_traces.builtin("gpu", 8.0)
    out = sim_lines(sp.RESULTS / "runs.jsonl", {k: trs[k] for k in ("heavy", "bursty")})
    print("\n".join(out))
