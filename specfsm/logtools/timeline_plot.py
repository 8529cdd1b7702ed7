"""The mode-band timeline, drawn once for the simulator (`specfsm sim`) and for real logs
(`specfsm logs timeline`): the mode as shaded bands behind a series (decode batch size),
transitions as ticks along the bottom. Needs matplotlib (the `sim` extra), imported by callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MODE_COLORS = {
    "SPECULATING": "tab:green",
    "DRAINING": "tab:orange",
    "PLAIN": "tab:blue",
    "RESYNCING": "tab:red",
}
#: The long modes lightly, the short ones (a few iterations) strongly, so they stay visible.
MODE_ALPHA = {"SPECULATING": 0.25, "PLAIN": 0.25, "DRAINING": 0.8, "RESYNCING": 0.8}

Span = tuple[float, float, str]


def spans_from_samples(samples: Sequence[tuple[float, str]], start: float = 0.0) -> list[Span]:
    """(x, mode) samples -> (x0, x1, mode) spans: a sample's mode holds from the previous
    sample's x (or `start`) to its own."""
    out: list[Span] = []
    i = 0
    while i < len(samples):
        j = i
        while j + 1 < len(samples) and samples[j + 1][1] == samples[i][1]:
            j += 1
        x0 = samples[i - 1][0] if i > 0 else start
        out.append((x0, samples[j][0], samples[i][1]))
        i = j + 1
    return out


def draw_mode_timeline(
    ax: Any,
    spans: Sequence[Span],
    x: Sequence[float],
    y: Sequence[float],
    *,
    ylabel: str = "bs",
    series_label: str = "decode bs",
    transitions: Sequence[tuple[float, str]] = (),
    y_band: tuple[Sequence[float], Sequence[float]] | None = None,
    legend: bool = True,
    **plot_kw: Any,
) -> None:
    """Mode bands (one collection per mode, so 100k spans stay cheap) behind the series `y`
    over `x`; `y_band` = (low, high) draws a min..max envelope (downsampled series);
    `transitions` = (x, destination mode): every one a tick at the bottom, none dropped;
    `plot_kw` go to the series' `ax.plot` (e.g. drawstyle, marker)."""
    by_mode: dict[str, list[tuple[float, float]]] = {}
    for x0, x1, mode in spans:
        by_mode.setdefault(mode, []).append((x0, max(x1 - x0, 0.0)))
    trans = ax.get_xaxis_transform()
    for mode, colour in MODE_COLORS.items():
        if mode in by_mode:
            ax.broken_barh(
                by_mode[mode],
                (0, 1),
                transform=trans,
                facecolors=colour,
                alpha=MODE_ALPHA[mode],
                lw=0,
                label=mode,
            )
    if y_band is not None:
        ax.fill_between(x, y_band[0], y_band[1], color="black", alpha=0.2, lw=0)
    ax.plot(x, y, color="black", lw=0.6, label=series_label, **plot_kw)
    if transitions:
        ax.vlines(
            [t for t, _ in transitions],
            0,
            0.12,
            transform=trans,
            colors=[MODE_COLORS.get(m, "grey") for _, m in transitions],
            lw=1.0,
            label=f"transitions ({len(transitions)})",
        )
    ax.set_ylabel(ylabel, fontsize=8)
    if legend:
        ax.legend(fontsize=6, loc="upper left", ncol=6, framealpha=0.9)
