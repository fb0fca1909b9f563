"""Geometry of the HTML report's plots (the template draws them): round tick values, x
labels that never overlap, one point per judged commit, scaled into a fixed viewBox that the
page stretches to its width."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 1000, 260          # the SVG viewBox; the page scales it to its width
PAD_L, PAD_R, PAD_T, PAD_B = 70, 20, 34, 44
X_LABEL_PX = 34                    # room one x tick label needs (up to 4 digits at 11 px)
COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#f9a825"}


def nice_step(span: float, max_ticks: int) -> float:
    """The smallest 1, 2 or 5 times a power of ten that splits span into <= max_ticks steps."""
    if span <= 0:
        return 1.0
    raw = span / max(max_ticks, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return float(m * mag)
    return float(10 * mag)


def nice_ticks(lo: float, hi: float, max_ticks: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (the first <= lo, the last >= hi)."""
    step = nice_step(hi - lo, max_ticks)
    start, stop = math.floor(lo / step) * step, math.ceil(hi / step) * step
    n = round((stop - start) / step)
    return [round(start + i * step, 10) for i in range(n + 1)]


def tick_label(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) else f"{v:,.6g}"


@dataclass(frozen=True)
class Tick:
    pos: float      # pixels along its axis
    label: str


@dataclass(frozen=True)
class Point:
    x: float
    y: float | None         # None: skipped or not measured (a shaded band, never a 0)
    verdict: str
    colour: str
    title: str              # the tooltip


@dataclass(frozen=True)
class Plot:
    title: str
    unit: str
    width: int
    height: int
    x0: float               # plot area, pixels
    x1: float
    y0: float               # bottom
    y1: float               # top
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    points: list[Point]
    culprit_x: float | None


def make_plot(title: str, unit: str, points: list[tuple[int, float | None, str, bool]]
              ) -> Plot | None:
    """points: (commit index, value, verdict, is_culprit). None when nothing has a value."""
    vals = [v for _, v, _, _ in points if v is not None]
    if not vals:
        return None
    xs = [i for i, _, _, _ in points]
    lo_x, hi_x = min(xs), max(max(xs), min(xs) + 1)
    x0, x1, y0, y1 = PAD_L, WIDTH - PAD_R, HEIGHT - PAD_B, PAD_T
    y_ticks = nice_ticks(0.0, max(vals) * 1.05 or 1.0)
    top = y_ticks[-1]

    def px(i: float) -> float:
        return x0 + (i - lo_x) / (hi_x - lo_x) * (x1 - x0)

    def py(v: float) -> float:
        return y0 - v / top * (y0 - y1)

    max_labels = max(2, int((x1 - x0) // X_LABEL_PX))
    step = max(1, int(nice_step(hi_x - lo_x, max_labels)))
    first = math.ceil(lo_x / step) * step
    x_ticks = [Tick(px(i), str(i)) for i in range(first, hi_x + 1, step)]
    pts = [Point(px(i), None if v is None else py(v), verdict, COLOURS.get(verdict, "#555"),
                 f"#{i}: " + (f"{v:.4g} {unit}" if v is not None else "no value") + f" ({verdict})")
           for i, v, verdict, _ in points]
    culprit = next((px(i) for i, _, _, c in points if c), None)
    return Plot(title, unit, WIDTH, HEIGHT, x0, x1, y0, y1, x_ticks,
                [Tick(py(t), tick_label(t)) for t in y_ticks], pts, culprit)
