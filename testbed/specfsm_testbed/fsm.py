"""Test-bed helpers for engines that run specfsm: start, steer, observe.

The scheduler runs in a spawned process; tests reach it through the test-only channel
(`SPECFSM_TEST_DIR`): `inject()` writes commands the controller picks up at its next decode
forward (fault injection, a stale-state injection, a policy change), `counters()` reads what
it last wrote, `transitions()` reads its JSON transition log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from specfsm_testbed import engine as E


@contextlib.contextmanager
def temporary_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` (and so in processes spawned meanwhile), restored
    afterwards (a variable that was unset is removed again)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fsm_env(
    test_dir: str | Path,
    policy: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The environment that turns specfsm on (``SPECFSM_CONFIG_JSON``) with its test channel
    and JSON log in ``test_dir`` and its control file ``test_dir/control.json``."""
    test_dir = Path(test_dir)
    test_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "policy": policy or {"name": "fixed", "speculate": True},
        "log": str(test_dir / "transitions-{rank}.jsonl"),
        "control_file": str(test_dir / "control.json"),
        "control_every": 4,
    }
    cfg.update(config or {})
    return {"SPECFSM_CONFIG_JSON": json.dumps(cfg), "SPECFSM_TEST_DIR": str(test_dir)}


def make_fsm_engine(
    test_dir: str | Path,
    policy: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **engine_kwargs: Any,
) -> Any:
    """A started CPU engine with specfsm on, its test channel and JSON log in `test_dir`."""
    with temporary_env(fsm_env(test_dir, policy, config)):
        return E.make_engine(**engine_kwargs)


def write_control(test_dir: str | Path, change: dict[str, Any]) -> None:
    """Write the operator's control file (``{"pin": "PLAIN"}``, ``{"pin": None}``, ...)
    atomically, with a fresh mtime."""
    path = Path(test_dir) / "control.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(change))
    os.replace(tmp, path)
    time.sleep(0.01)


def inject(test_dir: str | Path, **cmd: Any) -> None:
    """Send a command to every rank's controller (applied at its next decode forward):
    fail={"enter_plain": 1}, stale_spec_info=1, control={"policy": {...}} / {"pin": "PLAIN"}."""
    path = Path(test_dir) / "inject.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cmd))
    os.replace(tmp, path)
    # make sure the next write gets a different mtime even on coarse clocks
    time.sleep(0.01)


def set_policy(test_dir: str | Path, policy: dict[str, Any]) -> None:
    inject(test_dir, control={"policy": policy})


def counters(test_dir: str | Path, rank: int = 0, wait_s: float = 0.0) -> dict[str, Any]:
    """The controller's counters as last written (optionally wait for a fresh write)."""
    path = Path(test_dir) / f"counters-rank{rank}.json"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def transitions(test_dir: str | Path, rank: int = 0) -> list[dict[str, Any]]:
    """Every line of the rank's JSON transition log."""
    path = Path(test_dir) / f"transitions-{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# ---------------------------------------------------------------------------------- traces
def random_trace(
    rng: random.Random, n: int, max_new: tuple[int, int] = (4, 40), p_abort: float = 0.15
) -> list[dict[str, Any]]:
    """A load trace: per request its arrival delay (s), prompt, length, optional abort delay."""
    trace = []
    for i in range(n):
        trace.append(
            {
                "rid": f"r{i}-{rng.randrange(1 << 30)}",
                "delay": rng.choice([0.0, 0.0, 0.02, 0.1, 0.4]),
                "prompt": [rng.randrange(3, 1000) for _ in range(rng.randrange(4, 24))],
                "max_new": rng.randrange(*max_new),
                "abort_after": rng.uniform(0.05, 0.6) if rng.random() < p_abort else None,
            }
        )
    return trace


def run_trace(engine: Any, trace: Sequence[dict[str, Any]], greedy: bool = True) -> dict[str, Any]:
    """Submit the trace's requests at their delays (arrivals during whatever mode is on),
    abort some mid-flight, and return {rid: {"output_ids": [...], "finish": ...}}."""

    async def one(req: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = E.sampling_params(req["max_new"])
        if not greedy:
            params = {**params, "temperature": 0.8, "top_p": 0.9}
        gen = engine.async_generate(input_ids=req["prompt"], sampling_params=params, rid=req["rid"])
        out = await gen
        return req["rid"], {
            "output_ids": list(out["output_ids"]),
            "finish": out["meta_info"].get("finish_reason"),
            "meta": out["meta_info"],
        }

    async def abort_later(rid: str, after: float) -> None:
        await asyncio.sleep(after)
        engine.tokenizer_manager.abort_request(rid=rid)

    async def main() -> dict[str, Any]:
        tasks, aborts = [], []
        for req in trace:
            if req["delay"]:
                await asyncio.sleep(req["delay"])
            tasks.append(asyncio.ensure_future(one(req)))
            if req.get("abort_after") is not None:
                aborts.append(asyncio.ensure_future(abort_later(req["rid"], req["abort_after"])))
        results = await asyncio.gather(*tasks)
        await asyncio.gather(*aborts)
        return dict(results)

    return dict(engine.loop.run_until_complete(main()))


def check_trace_outputs(
    trace: Sequence[dict[str, Any]], got: dict[str, Any], ref: Sequence[Sequence[int]]
) -> int:
    """Assert `run_trace`'s outputs against the no-speculation ones: a request that was not
    aborted equals its reference, an aborted one is a prefix of it (an abort in a request's
    finishing step can return extra, correct tokens: cut at max_new). Returns how many were
    cut short."""
    cut = 0
    for req, expected in zip(trace, ref, strict=True):
        out = got[req["rid"]]["output_ids"][: req["max_new"]]
        if len(out) < req["max_new"]:
            cut += 1
            assert req["abort_after"] is not None, "a request ended early without an abort"
        assert out == list(expected[: len(out)])
    return cut
