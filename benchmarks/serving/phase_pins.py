"""The per-phase oracle, run on one server: specfsm pinned, phase by phase, to the mode of the
better static server of that phase (the specfsm variant ``phases``).

The summary's ``serve_specfsm_vs_phase_oracle`` adds up, phase by phase, the tokens of the
better static server. Where a phase leaves work behind (the prompts of a burst, prefilled by one
server, decoded by it in the next phase) that sum counts tokens that no one server serves: the
burst phase of the server that did not prefill them and the next phase of the one that did. This
variant runs the same per-phase choice on one server instead: the pin flips at each phase
boundary through the control file (read every ``control_every`` iterations), so the work one
phase leaves is carried into the next as on a server that switches.

Pins come from ``--phase-pins`` (``TRACE=MODE,MODE,...;TRACE=...``, MODE ``PLAIN`` or
``SPECULATING``, one per phase) or, for a trace not named there, from the static servers' runs
already in the results folder: per phase, PLAIN where the no-spec server's mean tok/s is at
least the stock EAGLE server's, else SPECULATING.

Standard library only.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traces import Trace

MODES = ("PLAIN", "SPECULATING")


def parse(text: str) -> dict[str, list[str]]:
    """``TRACE=MODE,MODE;TRACE=...`` -> {trace: [mode per phase]}; ValueError when malformed."""
    out: dict[str, list[str]] = {}
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        name, eq, modes = item.partition("=")
        pins = [m.strip().upper() for m in modes.split(",") if m.strip()]
        if not eq or not name.strip() or not pins or any(m not in MODES for m in pins):
            raise ValueError(
                f"--phase-pins {item!r}: expected TRACE=MODE,MODE,... with MODE PLAIN or "
                "SPECULATING, one per phase"
            )
        out[name.strip()] = pins
    return out


def from_runs(runs_path: Path, trace: str, phases: int) -> list[str] | None:
    """The better static server's mode per phase of ``trace`` from the runs recorded in
    ``runs_path`` (mean tok/s over repetitions); None unless both static servers ran it."""
    if not runs_path.exists():
        return None
    tok: dict[str, list[list[float]]] = {}
    for line in runs_path.read_text().splitlines():
        if not line.strip():
            continue
        r: dict[str, Any] = json.loads(line)
        static = r.get("server") in ("nospec", "eagle")
        if static and r.get("trace") == trace and len(r.get("phases", [])) == phases:
            tok.setdefault(r["server"], []).append([p["tok_s"] for p in r["phases"]])
    if set(tok) != {"nospec", "eagle"}:
        return None
    return [
        "PLAIN"
        if statistics.fmean(x[i] for x in tok["nospec"])
        >= statistics.fmean(x[i] for x in tok["eagle"])
        else "SPECULATING"
        for i in range(phases)
    ]


def pins_for(trace: str, phases: int, given: dict[str, list[str]], runs_path: Path) -> list[str]:
    """The pin of each phase of ``trace``: ``given``'s, else from the static servers' runs.
    ValueError (the operator's next step in it) when neither has them."""
    if trace in given:
        pins = given[trace]
        if len(pins) != phases:
            raise ValueError(f"--phase-pins {trace}: {len(pins)} pins for {phases} phases")
        return pins
    found = from_runs(runs_path, trace, phases)
    if found is None:
        raise ValueError(
            f"variant phases on trace {trace}: no pins (give --phase-pins {trace}=MODE,... or "
            f"run the nospec and eagle servers on it first, into the same --out)"
        )
    return found


class Switcher:
    """Flip the pin at each phase boundary after the first, on its own thread: ``start(t0)``
    with the trace's wall-clock start, ``stop()`` after the run. ``pin`` writes the control
    file; the first phase's pin is set before the run, with the other variants' settings."""

    def __init__(
        self, pins: list[str], bounds: list[tuple[float, float]], pin: Callable[[str], None]
    ):
        self.pins, self.bounds, self.pin = pins, bounds, pin
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: (seconds after t0, mode) of every flip made
        self.flips: list[tuple[float, str]] = []

    def start(self, t0: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True)
        self._thread.start()

    def _run(self, t0: float) -> None:
        current = self.pins[0]
        for (a, _), mode in list(zip(self.bounds, self.pins, strict=True))[1:]:
            if self._stop.wait(max(0.0, t0 + a - time.time())):
                return
            if mode != current:
                self.pin(mode)
                self.flips.append((round(time.time() - t0, 3), mode))
                current = mode

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)


def switcher(
    trace: Trace, given: dict[str, list[str]], runs_path: Path, pin: Callable[[str], None]
) -> Switcher:
    """The switcher of one run of ``trace`` (its pins: `pins_for`)."""
    pins = pins_for(trace.name, len(trace.phases), given, runs_path)
    return Switcher(pins, trace.phase_bounds(), pin)
