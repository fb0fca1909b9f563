"""The profile diff of two sides (the culprit's parent and the culprit), per decode step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from vllm_bisect.explain.stats import compare_sides
from vllm_bisect.explain.trace import TraceSummary

# the totals are shown, never ranked: a kernel that slows moves the busy total too
TOTALS = ("step:gpu_busy", "step:host", "step:launches")


class DeltaKind(StrEnum):
    NEW = "new"
    GONE = "gone"
    SLOWER = "slower"
    FASTER = "faster"


@dataclass(frozen=True)
class Delta:
    key: str             # kernel:<name>, cpu_op:<name>, step:gpu_idle, step:launches, ...
    kind: DeltaKind
    parent: float        # mean per decode step over the parent's servers
    culprit: float
    diff: float
    ratio: float | None
    spread: float        # run-to-run spread (largest range within a side)

    @property
    def what(self) -> str:
        return self.key.partition(":")[0]

    @property
    def name(self) -> str:
        return self.key.partition(":")[2]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


@dataclass(frozen=True)
class ProfileDiff:
    deltas: list[Delta]       # outside the spread, largest first (totals excluded)
    totals: list[Delta]       # the step totals, whether or not outside the spread
    within_spread: int        # metrics that moved, but not beyond the spread


def _kind(parent: Sequence[float], culprit: Sequence[float], diff: float) -> DeltaKind:
    if max(parent) == 0.0:
        return DeltaKind.NEW
    if max(culprit) == 0.0:
        return DeltaKind.GONE
    return DeltaKind.SLOWER if diff > 0 else DeltaKind.FASTER


def profile_diff(parent: Sequence[TraceSummary], culprit: Sequence[TraceSummary]) -> ProfileDiff:
    """Every metric of every server, compared side against side."""
    pm = [s.metrics() for s in parent]
    cm = [s.metrics() for s in culprit]
    keys = sorted({k for m in (*pm, *cm) for k in m})
    deltas, totals, within = [], [], 0
    for key in keys:
        a = [m.get(key, 0.0) for m in pm]
        b = [m.get(key, 0.0) for m in cm]
        s = compare_sides(a, b)
        d = Delta(key=key, kind=_kind(a, b, s.diff), parent=s.a_mean, culprit=s.b_mean,
                  diff=s.diff, ratio=s.ratio, spread=s.spread)
        if key in TOTALS:
            totals.append(d)
        elif s.outside:
            deltas.append(d)
        elif s.diff != 0.0:
            within += 1
    deltas.sort(key=lambda d: (d.key == "step:launches", -abs(d.diff)))
    return ProfileDiff(deltas=deltas, totals=totals, within_spread=within)
