"""The one progress bar of specfsm's long-running commands (sim, sweeps, the demo): one line on
stderr, redrawn at most every 0.1 s, with elapsed time and an estimate of what is left."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A one-line progress bar: ``tick()`` one step (or ``update(done)``), ``close()`` at the end.

    ``enabled=False`` (or a total of 0) draws nothing; on a stream that is not a terminal it
    draws only the final line, so logs do not fill with carriage returns.
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        enabled: bool = True,
        *,
        unit: str = "",
        out: TextIO | None = None,
        width: int = 30,
    ) -> None:
        self.total, self.n, self.label, self.unit, self.width = total, 0, label, unit, width
        self.out = out if out is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self._drawn = 0.0
        self._closed = False

    def tick(self, what: str = "") -> None:
        """One more step done (closes the bar when the total is reached)."""
        self.update(self.n + 1, what)

    def update(self, done: int, what: str = "") -> None:
        """``done`` steps done so far."""
        self.n = done
        if not self.enabled:
            return
        if done >= self.total:
            self.close(what)
            return
        now = time.monotonic()
        if not self.tty or now - self._drawn < 0.1:
            return
        self._drawn = now
        self._draw(what)

    def _draw(self, what: str = "") -> None:
        frac = min(self.n / self.total, 1.0)
        filled = int(self.width * frac)
        bar = "#" * filled + "." * (self.width - filled)
        el = time.monotonic() - self.t0
        eta = el / frac - el if frac > 0 else 0.0
        unit = f" {self.unit}" if self.unit else ""
        tail = f" {what[:40]:<40}" if what else ""
        self.out.write(
            f"\r{self.label} [{bar}] {self.n}/{self.total}{unit} {el:5.1f}s eta {eta:4.0f}s{tail}"
        )
        self.out.flush()

    def close(self, what: str = "") -> None:
        """Draw the final state and end the line (once)."""
        if self._closed or not self.enabled:
            return
        self._closed = True
        self._draw(what)
        self.out.write("\n")
        self.out.flush()
