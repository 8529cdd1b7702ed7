"""The GPU bed's machine-dependent settings: the card's name and each server's memory fraction.

- `device_name`: ``nvidia-smi``'s name of GPU 0, written into the runs' header, because every
  figure of the bed is of one card (the simulator's tables are of a named card too), and
  `devices`: the cards a runs file's headers name;
- `mem_fraction`: ``--mem-fraction-static`` per server, from ``MEM_FRACTION`` (default 0.8),
  overridden for one server by ``MEM_FRACTION_<SERVER>`` (``MEM_FRACTION_ADAPTIVE``; the
  shapes example's ``MEM_FRACTION_SHAPES``). On an 80 GiB card the shapes example's extra
  states and SGLang's adaptive server's runtime states do not fit beside a 0.8 pool
  (docs/serving.md), while the other servers keep their largest pool: the strongest
  alternative an operator has on that card;
- `oom_retry`: with ``--oom-retry STEP:FLOOR``, the fraction a server that ran out of GPU
  memory at start is started again at (``STEP`` lower, down to ``FLOOR``), so a peer gets
  the largest pool it starts beside on the card rather than no figure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any


def device_name() -> str:
    """GPU 0's name, or "unknown" when nvidia-smi does not answer."""
    try:
        got = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    names = got.stdout.strip().splitlines()
    return names[0].strip() if got.returncode == 0 and names else "unknown"


def devices(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The cards named by the headers among `records` (a runs file's lines), sorted."""
    return sorted({str(r["device"]) for r in records if "started" in r and r.get("device")})


def mem_fraction(server: str, env: Mapping[str, str] = os.environ) -> float:
    """`server`'s ``--mem-fraction-static`` in `env` (the bed's environment): its own
    ``MEM_FRACTION_<SERVER>`` where set, else ``MEM_FRACTION`` (module docstring); a fraction
    outside (0, 1) is refused before any server starts."""
    own = env.get(f"MEM_FRACTION_{server.upper()}")
    if own is None and server == "specfsm_shapes":
        own = env.get("MEM_FRACTION_SHAPES")
    raw = own if own is not None else env.get("MEM_FRACTION", "0.8")
    try:
        frac = float(raw)
    except ValueError:
        raise ValueError(f"{server}: --mem-fraction-static {raw!r} is not a number") from None
    if not 0.0 < frac < 1.0:
        raise ValueError(f"{server}: --mem-fraction-static {frac} is not in (0, 1)")
    return frac


def parse_oom_retry(spec: str) -> tuple[float, float] | None:
    """``--oom-retry STEP:FLOOR`` -> (step, floor); "" -> None (no retry). Raises ValueError on
    anything else, before any server starts."""
    if not spec:
        return None
    step_s, colon, floor_s = spec.partition(":")
    try:
        step, floor = float(step_s), float(floor_s)
    except ValueError:
        raise ValueError(f"--oom-retry: {spec!r} is not STEP:FLOOR (e.g. 0.04:0.6)") from None
    if not colon or not 0.0 < step < 0.5 or not 0.0 < floor < 1.0:
        raise ValueError(f"--oom-retry: {spec!r}: STEP in (0, 0.5), FLOOR in (0, 1)")
    return step, floor


def oom_retry(cause: str, frac: float, retry: tuple[float, float] | None) -> float | None:
    """The fraction to start a server at again after a start that failed with `cause` at
    `frac`: `frac` less the step, to two places, where the cause is running out of GPU memory
    and that is still at or above the floor; else None."""
    if retry is None or not cause.startswith("OutOfMemoryError"):
        return None
    step, floor = retry
    nxt = round(frac - step, 2)
    return nxt if nxt >= floor else None
