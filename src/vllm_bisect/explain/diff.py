"""The profile diff of two sides (the culprit's parent and the culprit), per decode step."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from vllm_bisect.explain.report_section import COUNTS, OUTPUT, TOTALS
from vllm_bisect.explain.stats import compare_sides
from vllm_bisect.explain.trace import TraceSummary

# the totals are shown, never ranked: a kernel that slows moves the busy total too
SHOWN = (*TOTALS, "step:gpu_idle")
LEVEL = "step:gpu_level"  # every kernel alike (clocks, or a GPU-wide change)
MIN_COMMON = 3  # the step table (the idle gap is ranked as well)
# what a decode step yields: output tokens (OUTPUT: 1 + accepted drafts under speculative
# decoding), and the step's costs per output token; shown beside the per-step totals, never
# ranked
PER_TOKEN = {"token:gpu_busy": "step:gpu_busy", "token:host": "step:host"}
TOKENS_FLOOR = 0.05  # tokens per step: a change under 0.05 tokens is never reported


class DeltaKind(StrEnum):
    NEW = "new"
    GONE = "gone"
    SLOWER = "slower"
    FASTER = "faster"
    MORE = "more"      # a count per step (kernels run, launch calls, output tokens) rose
    FEWER = "fewer"


@dataclass(frozen=True)
class Delta:
    key: str             # kernel:<name>, cpu_op:<name>, step:gpu_idle, step:launches, ...
    kind: DeltaKind
    parent: float        # mean per decode step over the parent's servers
    culprit: float
    diff: float
    ratio: float | None
    spread: float        # run-to-run spread (largest range within a side)
    beyond: bool = False  # every server of one side beyond every server of the other

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

    @property
    def output(self) -> Delta | None:
        """Output tokens per decode step, where the probe's tokens are known."""
        return next((d for d in self.totals if d.key == OUTPUT), None)


def _kind(key: str, parent: Sequence[float], culprit: Sequence[float],
          diff: float) -> DeltaKind:
    if key in COUNTS:
        return DeltaKind.MORE if diff > 0 else DeltaKind.FEWER
    if max(parent) == 0.0:
        return DeltaKind.NEW
    if max(culprit) == 0.0:
        return DeltaKind.GONE
    return DeltaKind.SLOWER if diff > 0 else DeltaKind.FASTER


def _delta(key: str, a: Sequence[float], b: Sequence[float], **floors: float) -> Delta:
    s = compare_sides(a, b, **floors)
    return Delta(key=key, kind=_kind(key, a, b, s.diff), parent=s.a_mean, culprit=s.b_mean,
                 diff=s.diff, ratio=s.ratio, spread=s.spread, beyond=s.outside)


def output_totals(pm: Sequence[dict[str, float]], cm: Sequence[dict[str, float]],
                  tokens: tuple[Sequence[float | None], Sequence[float | None]]
                  ) -> list[Delta]:
    """Output tokens per decode step and the step's costs per output token, each server
    against its own tokens (so the spread is the per-token one); none unless every server
    of both sides knows its tokens. Tokens per step multiply every per-step cost: under
    speculative decoding, a drafter whose drafts stop being accepted leaves each step's
    kernels as they were and makes every output token cost ~2x (docs/validation.md (m))."""
    tp, tc = tokens
    if not tp or not tc or len(tp) != len(pm) or len(tc) != len(cm) or \
            any(t is None or t <= 0 for t in (*tp, *tc)):
        return []
    a = [float(t) for t in tp if t is not None]
    b = [float(t) for t in tc if t is not None]
    out = [_delta(OUTPUT, a, b, abs_floor=TOKENS_FLOOR)]
    for key, step_key in PER_TOKEN.items():
        out.append(_delta(key, [m.get(step_key, 0.0) / t for m, t in zip(pm, a, strict=True)],
                          [m.get(step_key, 0.0) / t for m, t in zip(cm, b, strict=True)]))
    return out


def gpu_levels(servers: Sequence[dict[str, float]]) -> list[float]:
    """Each server's GPU-wide speed level: the median, over the kernels every server ran,
    of its time over the mean of all servers (1.0 each with fewer than 3 such kernels). A
    change of clocks (or a GPU-wide change) moves every kernel alike; one kernel's change
    does not move the median."""
    common = [k for k in servers[0] if k.startswith("kernel:")
              and all(m.get(k, 0.0) > 0 for m in servers)]
    if len(common) < MIN_COMMON:
        return [1.0] * len(servers)
    means = {k: statistics.fmean(m[k] for m in servers) for k in common}
    return [statistics.median(m[k] / means[k] for k in common) for m in servers]


def _normalized(servers: list[dict[str, float]], levels: list[float]) -> None:
    """Kernel times at the common level (in place); the level itself as ``step:gpu_level``
    in microseconds of busy time (what the shift costs a step)."""
    busy = statistics.fmean(m.get("step:gpu_busy", 0.0) for m in servers)
    for m, lv in zip(servers, levels, strict=True):
        for k in [k for k in m if k.startswith("kernel:")]:
            m[k] /= lv
        m[LEVEL] = lv * busy


def profile_diff(parent: Sequence[TraceSummary], culprit: Sequence[TraceSummary],
                 tokens: tuple[Sequence[float | None], Sequence[float | None]] | None = None
                 ) -> ProfileDiff:
    """Every metric of every server, compared side against side; kernels after taking out
    each server's GPU-wide level (compared on its own, as ``step:gpu_level``). ``tokens``:
    each server's output tokens per decode step, per side (the per-token totals)."""
    pm = [s.metrics() for s in parent]
    cm = [s.metrics() for s in culprit]
    per_token = output_totals(pm, cm, tokens) if tokens is not None else []
    _normalized([*pm, *cm], gpu_levels([*pm, *cm]))
    keys = sorted({k for m in (*pm, *cm) for k in m})
    deltas, totals, within = [], [], 0
    for key in keys:
        d = _delta(key, [m.get(key, 0.0) for m in pm], [m.get(key, 0.0) for m in cm])
        if key in SHOWN:
            totals.append(d)
        if key in TOTALS:
            continue
        if d.beyond:
            deltas.append(d)
        elif d.diff != 0.0:
            within += 1
    deltas.sort(key=lambda d: -abs(d.diff))
    return ProfileDiff(deltas=deltas, totals=totals + per_token, within_spread=within)
