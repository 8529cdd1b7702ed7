"""The serving simulator's prediction beside a measured serving run.

``predict(trace, server)`` serves one serving-benchmark trace (`traces.Trace`, the GPU bed's
``heavy`` / ``bursty`` ...) in the project's simulator (`specfsm.sim.engine.run`) with the
controller that stands for ``server`` and returns the predicted output tok/s over the trace's
window; `sim_lines` puts it beside every (trace, server) a ``runs.jsonl`` measured.

What the simulator models (specfsm/sim/engine.py, specfsm/model/costs.py): continuous batching
on a step-cost table, ``max_running`` 256; each iteration admits new requests (closed loop: up
to the concurrency; Poisson: from a queue), prefills them and runs one decode step of the
running batch, priced from the table by batch size: plain decode ``llama8b`` q=1, the chain-3
speculative iteration (verify q=4 + 2 draft steps + draft-extend q=4, tokens from the
acceptance model at ``accept_len``), specfsm's zero-tax PLAIN step (``plain_zero_tax_step``).
Prefill IS modelled, crudely: prompt tokens x "the cheapest per-token cost in the table"
(`CostModel.prefill_ms`: the target's bs 256 x q 16 verify row, 35.3 us per token, plus the
draft-extend's, 3.5 us, at ctx 1024), in one iteration however long the prompts, no chunking,
no KV-pool limit, no host time between iterations.

What this module adds, and where each constant comes from:

* Prefill per prompt token, ``MEASURED_PREFILL_US`` = (23.17, 1.55) us of GPU time (target,
  draft): the token-weighted means of ``prefill_gpu`` over every run of
  benchmarks/gpu/results/2026-12-02_serving/runs.jsonl (CUDA-event timings of the target's
  and the draft's prefill forwards; per run 21.7-26.1 and 1.4-3.3). They come from the
  measurement being predicted, so the prediction is PARTLY FITTED (the lines' header says
  so). The table's own approximation is 1.52x (target) and 2.3x (draft) too dear for a real
  prefill of ~3000-token chunks; `predict(prefill_us_per_token=None)` uses it unchanged, and
  `sim_lines` prints what it gives on one info line per trace.
* The load: the trace's phases as the simulator's `Load` (closed loop -> concurrency;
  Poisson -> each phase's rate taken as the trace's own arrivals in that phase /
  phase seconds, `traces.arrivals`: the measured servers all got that one fixed sample, 627
  arrivals on bursty where the nominal rates expect 672).
* The request lengths: the simulator draws uniform integer lengths (`Workload`), the trace
  log-uniform ones; the workload gets uniform ranges with the lower bounds of the trace and
  the mean prompt and output lengths of the trace's own requests (`traces.request` of the
  requests it issues: every Poisson arrival; the first ``CLOSED_REQUESTS`` of a closed loop),
  a client-cut request counting the tokens before its cut. Prefill is linear in tokens, so
  the mean carries the prefill work exactly; the spread of lengths only shapes batching.
* The controllers: ``nospec`` a server without a draft (`baselines.no_draft_server`: plain
  decode, target-only prefill); ``eagle`` and ``specfsm_spec`` always chain 3 (one engine
  path: specfsm pinned SPECULATING runs stock EAGLE's step, measured 1.026x it); ``specfsm_plain``
  the engine's PLAIN state held (zero-tax steps), its prompts prefilled by the target alone and
  counted as lag for the catch-up (the engine's ``lazy_draft_prefill``: the adapter's
  ``defer_prefill_tokens``, on by default, defers the draft's prefill while PLAIN);
  ``specfsm_plain_nodraft`` the same (the harness variant that skipped the draft's prefill
  before the adapter deferred it); ``specfsm_goodput`` the served policy through the real
  FSM (the GPU bed's `launch.GPU_GOODPUT` on this table; zero-tax PLAIN
  deferring the draft's prefill, and every prefill shown to the policy before it runs, as the
  adapter does, for every specfsm server here; the served one also had a start-up profile);
  ``specfsm_example`` the FSM with the policy of ``examples/gpu_server/specfsm.json`` (its
  thresholds as committed now: a run measured with other thresholds is not what it predicts);
  ``specfsm_shapes`` the FSM with the goodput policy of ``examples/gpu_server/specfsm_shapes.json``
  (with the keys ``--shapes-set`` set on its server, `launch.shapes_set_of`) launched at its
  policy's shape (the example's chain 7), RESHAPE among its shapes priced from the same
  table (the example's start-up profile measures what the simulator takes from the table);
  ``adaptive`` the simulator's port of SGLang's ``--speculative-adaptive``
  (`specfsm.sim.sglang_peer`, ported from 0.5.23) with 0.5.17's default config and the served
  CUDA-graph sizes, as served; its 1-step state is priced from the table's q=1 and q=4 rows.
* A ratio outside the goal gets a comment line naming what the runs' records show (`sim_miss`).
* ``seeds`` simulator seeds averaged (default 6): the simulator's arrival times and length
  draws are its own, so one seed moves a 32 s window by up to ~10%.

Standard library + the specfsm package (its ``sim`` extra: numpy, imported by the engine).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specfsm.fsm.decision import Policy
from specfsm.model.acceptance import DraftShape, alpha_from_accept_length, parse_shape
from specfsm.model.costs import CostModel, CostTable, load_table
from specfsm.policy.registry import make_policy
from specfsm.sim.baselines import PLAIN_STATE_NAME, StaticController, no_draft_server
from specfsm.sim.fsm_controller import FSMController
from specfsm.sim.plan import Controller, FixedController
from specfsm.sim.sglang_peer import SGLangAdaptiveController
from specfsm.sim.traces import Load, Workload

_HERE = str(Path(__file__).resolve().parent)  # benchmarks/serving: its traces.py
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import launch as bench_launch  # noqa: E402
import traces as bench_traces  # noqa: E402
from served_steps import NODRAFT_STEP_MODEL  # noqa: E402

__all__ = [
    "CLOSED_REQUESTS",
    "H200_TABLE",
    "MEASURED_PREFILL_US",
    "RESULTS",
    "SERVERS",
    "arrival_counts",
    "controller",
    "mean_lengths",
    "phase_seconds",
    "predict",
    "simulate",
]

ROOT = Path(__file__).resolve().parents[2]
#: the simulator's cost table where no other is named: SGLang 0.5.17's in-engine forwards on
#: the H200
H200_TABLE = "h200_sglang0517_llama8b"
#: the committed run `__main__` reads
RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "2026-12-02_serving"
#: the servers `predict` knows (the benchmark's labels)
SERVERS = (
    "nospec",
    "eagle",
    "specfsm_spec",
    "specfsm_plain",
    "specfsm_goodput",
    "specfsm_plain_nodraft",
    "specfsm_example",
    "specfsm_shapes",
    "adaptive",
)
#: the GPU example configuration, whose policy ``specfsm_example`` runs
EXAMPLE = ROOT / "examples" / "gpu_server" / "specfsm.json"
#: the shapes example, whose policy ``specfsm_shapes`` runs, and the shape it is launched at
SHAPES_EXAMPLE = bench_launch.SHAPES_EXAMPLE
SHAPES_LAUNCH = DraftShape.chain(7)
#: GPU us per prompt token (target, draft): token-weighted prefill_gpu of every run in
#: benchmarks/gpu/results/2026-12-02_serving/runs.jsonl (see the module docstring: FITTED)
MEASURED_PREFILL_US = (23.17, 1.55)
#: requests of a closed-loop trace whose mean lengths the workload gets (the measured heavy
#: runs issued 713-831)
CLOSED_REQUESTS = 800
#: the shape every speculative server of the benchmark ran (servers.CHAIN)
SHAPE = DraftShape.chain(3)
MAX_RUNNING = 256  # the servers' max_running_requests
#: the served servers' decode CUDA-graph batch sizes (servers.GPU_GRAPH_BS), to which SGLang's
#: adaptive speculation pads a batch before it picks the batch size's draft steps
GPU_GRAPH_BS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
#: SGLang 0.5.17's DEFAULT_ADAPTIVE_CONFIG (speculative/adaptive_spec_params.py), which the
#: served ``adaptive`` server ran: 0.5.23's (the simulator's default) adds 5 steps at bs 1-7
SGLANG_0517_ADAPTIVE: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}
GOAL = (0.9, 1.1)


class _Served(CostModel):
    """The table's step costs; a server without a draft priced from the table's
    ``nodraft_step`` series where it has one (`served_steps.py --nodraft`: that server's
    decode step as served), else from its target's decode forward (`CostModel.plain_ms`)."""

    def __init__(self, table: CostTable) -> None:
        super().__init__(table, SHAPE)
        self._nodraft = NODRAFT_STEP_MODEL in table.models

    def plain_ms(self, bs: float) -> float:
        if self._nodraft and bs > 0:
            return self._whole_step(NODRAFT_STEP_MODEL, bs, None)
        return super().plain_ms(bs)


class _PrefillAt(_Served):
    """`_Served` with prefill at a given GPU us per prompt token."""

    def __init__(self, table: CostTable, target_us: float, draft_us: float) -> None:
        super().__init__(table)
        self.prefill_ms_per_token_target = target_us / 1000.0
        self.prefill_ms_per_token_draft = draft_us / 1000.0


def _served(name: str, policy: Policy, shape: DraftShape) -> FSMController:
    """A specfsm server's policy through the real FSM, as the adapter serves it: the draft's
    prefill deferred while PLAIN, each prefill shown to the policy before it runs."""
    return FSMController(name, policy, shape, lazy_draft_prefill=True, prefill_observations=True)


def controller(
    server: str, table: str, accept_len: float, shapes_set: Mapping[str, Any] | None = None
) -> Controller:
    if server == "nospec":
        return no_draft_server()
    if server in ("eagle", "specfsm_spec"):
        return FixedController(True, SHAPE)
    if server in ("specfsm_plain", "specfsm_plain_nodraft"):
        ctl = StaticController(PLAIN_STATE_NAME, None)
        ctl.lazy_draft_prefill = True  # the adapter defers the draft's prefill while PLAIN
        return ctl
    if server == "specfsm_goodput":
        spec = {**bench_launch.GPU_GOODPUT, "table": table, "accept_len": accept_len}
        return _served("specfsm-goodput", make_policy(spec), SHAPE)
    if server == "specfsm_example":
        spec = json.loads(EXAMPLE.read_text())["policy"]
        return _served("specfsm-example", make_policy(spec), SHAPE)
    if server == "specfsm_shapes":
        # the example as shipped with the keys the driver's --shapes-set set, launched at its
        # policy's shape as the benchmark launches it (launch.shapes_launch)
        spec = bench_launch.shapes_example(dict(shapes_set or {}))["policy"]
        launch = parse_shape(spec["shape"]) if "shape" in spec else SHAPES_LAUNCH
        return _served("specfsm-shapes", make_policy(spec), launch)
    if server == "adaptive":
        return SGLangAdaptiveController(
            SGLANG_0517_ADAPTIVE, max_bs=MAX_RUNNING, shape=SHAPE, graph_bs=GPU_GRAPH_BS
        )
    raise ValueError(f"predict: unknown server {server!r} (known: {', '.join(SERVERS)})")


def arrival_counts(trace: bench_traces.Trace) -> list[int]:
    """The trace's own Poisson arrivals per phase (`traces.arrivals`)."""
    counts = [0] * len(trace.phases)
    for i, _ in bench_traces.arrivals(trace):
        counts[i] += 1
    return counts


def _load(trace: bench_traces.Trace) -> Load:
    kinds = {p.kind for p in trace.phases}
    if len(kinds) != 1:
        raise ValueError(f"predict: trace {trace.name} mixes phase kinds {sorted(kinds)}")
    bounds = trace.phase_bounds()
    if trace.phases[0].kind == "closed":
        kind, levels = "concurrency", [p.level for p in trace.phases]
    else:
        kind = "poisson"
        counts = arrival_counts(trace)
        levels = [n / p.seconds for n, p in zip(counts, trace.phases, strict=True)]

    def level(t: float) -> float:
        for lv, (_, t1) in zip(levels, bounds, strict=True):
            if t < t1:
                return lv
        return levels[-1]

    return Load(trace.name, kind, level, trace.seconds)


@functools.cache
def mean_lengths(trace: bench_traces.Trace) -> tuple[float, float]:
    """(prompt, output) mean lengths of the requests `trace` issues (a cut request counts the
    tokens before its cut)."""
    n = CLOSED_REQUESTS if trace.phases[0].kind == "closed" else len(bench_traces.arrivals(trace))
    reqs = [bench_traces.request(trace, k) for k in range(max(1, n))]
    prompt = sum(len(r.prompt) for r in reqs) / len(reqs)
    out = sum(r.abort_after or r.max_new_tokens for r in reqs) / len(reqs)
    return prompt, out


def _workload(trace: bench_traces.Trace) -> Workload:
    """Uniform ranges from the trace's lower bounds with the trace's mean lengths."""
    prompt, out = mean_lengths(trace)
    ln = trace.lengths
    p_hi = max(ln.prompt_min, round(2 * prompt - ln.prompt_min))
    o_hi = max(ln.output_min, round(2 * out - ln.output_min))
    return Workload((ln.prompt_min, p_hi), (ln.output_min, o_hi), MAX_RUNNING)


def phase_seconds(trace: bench_traces.Trace) -> float:
    """The simulator's phase length: the trace's, when every phase has the same length (the
    builtin traces), else the whole window as one phase."""
    lengths = {p.seconds for p in trace.phases}
    return trace.phases[0].seconds if len(lengths) == 1 else trace.seconds


def simulate(
    trace: bench_traces.Trace,
    server: str,
    table: str = H200_TABLE,
    accept_len: float = 2.4,
    *,
    prefill_us_per_token: tuple[float, float] | None = MEASURED_PREFILL_US,
    seeds: int = 6,
    shapes_set: Mapping[str, Any] | None = None,
) -> tuple[list[float], list[float]]:
    """Per phase of `trace` (`predict`'s arguments; one value for the whole window when the
    phases differ in length), the mean over `seeds` simulator seeds of: output tok/s (the
    tokens the simulator commits inside the phase / its seconds) and TPOT in ms (request-ms
    decoding / tokens committed by the iterations started in it)."""
    from specfsm.sim.engine import run  # numpy (the sim extra), imported when first used

    cost_table = load_table(table)
    if prefill_us_per_token is None:
        cost: CostModel = _Served(cost_table)
    else:
        cost = _PrefillAt(cost_table, *prefill_us_per_token)
    load, workload = _load(trace), _workload(trace)
    alpha = alpha_from_accept_length(accept_len, SHAPE)
    phase_s = phase_seconds(trace)
    n = round(trace.seconds / phase_s)
    sums, tpots = [0.0] * n, [0.0] * n
    k = max(1, seeds)
    for seed in range(k):
        ctl = controller(server, table, accept_len, shapes_set)
        res = run(ctl, load, cost, alpha, workload=workload, seed=seed, phase_s=phase_s)
        for i, tok in enumerate(res.phase_tokens[:n]):
            sums[i] += tok
        for i, tp in enumerate(res.phase_tpot_ms[:n]):
            tpots[i] += tp if tp == tp else 0.0  # nan: a phase with no decode
    return [x / k / phase_s for x in sums], [x / k for x in tpots]


def predict(
    trace: bench_traces.Trace,
    server: str,
    table: str = H200_TABLE,
    accept_len: float = 2.4,
    *,
    prefill_us_per_token: tuple[float, float] | None = MEASURED_PREFILL_US,
    seeds: int = 6,
    shapes_set: Mapping[str, Any] | None = None,
) -> float:
    """Predicted output tok/s of `server` (one of `SERVERS`) over `trace`'s window: the tokens
    the simulator commits inside [0, trace.seconds) / trace.seconds, the mean over `seeds`
    simulator seeds, on cost table `table` (a packaged name or a CSV path) with the chain-3
    acceptance at mean accept length `accept_len`. `prefill_us_per_token`: (target, draft) GPU
    us per prompt token, default the measured `MEASURED_PREFILL_US`; None: the simulator's own
    approximation from the table (`CostModel.prefill_ms`)."""
    phases, _ = simulate(
        trace,
        server,
        table,
        accept_len,
        prefill_us_per_token=prefill_us_per_token,
        seeds=seeds,
        shapes_set=shapes_set,
    )
    return sum(phases) * phase_seconds(trace) / trace.seconds
