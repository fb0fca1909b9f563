"""When is a difference between two sides real? Outside the run-to-run spread (pure).

Each side is one number per server start (a kernel's time per decode step on that server).
A delta is reported only when every server of one side lies beyond every server of the other
by more than the spread seen between servers of the same side (the larger of the two
ranges), and by more than a floor (a share of the larger mean, and an absolute amount) so
that two nearly identical sides are not told apart by chance.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

REL_FLOOR = 0.03   # a delta under 3% of the larger mean is never reported
ABS_FLOOR = 1.0    # nor one under 1 unit (1 us per step; 1 launch per step)


@dataclass(frozen=True)
class Spread:
    """Two sides' servers compared: means, the difference, the run-to-run spread, and
    whether the difference lies outside it."""

    a_mean: float
    b_mean: float
    spread: float
    margin: float
    outside: bool

    @property
    def diff(self) -> float:
        return self.b_mean - self.a_mean

    @property
    def ratio(self) -> float | None:
        return self.b_mean / self.a_mean if self.a_mean > 0 else None


def compare_sides(a: Sequence[float], b: Sequence[float], rel_floor: float = REL_FLOOR,
                  abs_floor: float = ABS_FLOOR) -> Spread:
    """``a`` and ``b``: one value per server start of each side (at least one each)."""
    if not a or not b:
        raise ValueError("each side needs at least one server")
    spread = max(max(a) - min(a), max(b) - min(b))
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    margin = max(spread, rel_floor * max(abs(ma), abs(mb)), abs_floor)
    outside = min(b) - max(a) > margin or min(a) - max(b) > margin
    return Spread(a_mean=ma, b_mean=mb, spread=spread, margin=margin, outside=outside)
