"""Plain `git bisect run` with repeats: what a user who knows the benchmark is noisy runs.

The hook runs ``r`` requests on each of ``s`` fresh servers of the checked-out commit and
judges the median of all ``r * s`` requests at the midpoint between the endpoints' true
means (ITL), or the cap shown on any server (a length symptom: a good commit never caps);
every server that crashed is lost, and when all ``s`` did the hook exits 125 (skip). The
search is git's binary search (``strategy.next_step``), no endpoint checks. Arms are named
``plain rRsS``; ``plain`` is r = s = 1 (the one-run hook of the earlier tables).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from vllm_bisect.bisect.search.steps import next_step
from vllm_bisect.models import EvalStatus, Verdict
from vllm_bisect.sim.virtual import Scenario, VirtualCluster, measurement
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict import Judge

REQUESTS = (1, 3, 5, 10)
SERVERS = (1, 2, 3)


def arm_names() -> list[str]:
    return [name(r, s) for s in SERVERS for r in REQUESTS]


def name(r: int, s: int) -> str:
    return "plain" if r == s == 1 else f"plain r{r}s{s}"


def parse(arm: str) -> tuple[int, int] | None:
    """(r, s) of a plain arm; None for another arm."""
    if arm == "plain":
        return 1, 1
    if not arm.startswith("plain r"):
        return None
    r, s = arm.removeprefix("plain r").split("s")
    return int(r), int(s)


def judge_commit(i: int, sha: str, judge: Judge, cluster: VirtualCluster, servers: int
                 ) -> Verdict:
    itls: list[float] = []
    capped = False
    for _ in range(servers):
        ev = cluster.evaluate(sha)
        if ev.status is EvalStatus.UNAVAILABLE:
            return Verdict.SKIP
        if ev.status is not EvalStatus.MEASURED or ev.measurement is None:
            continue  # this server crashed: the others still count
        itls += [q.itl_ms or 0.0 for q in ev.measurement.requests]
        capped = capped or not ev.measurement.length_ok
    if not itls:
        return Verdict.SKIP
    return judge.judge(measurement(itls, 128 if capped else 256)).verdict


def plain_repeats(s: Scenario, sp: BisectSpec, cluster: VirtualCluster, servers: int
                  ) -> int | None:
    """The culprit index a repeated-run hook under `git bisect run` names (None: none)."""
    judge = Judge(sp.verdict, sp.min_output_tokens())
    return git_bisect(s.n, lambda i: judge_commit(i, cluster.rng.sha(i), judge, cluster,
                                                  servers))


def git_bisect(n: int, verdict_of: Callable[[int], Verdict]) -> int | None:
    """`git bisect run` over commits 0..n-1 (0 good, n-1 bad): the culprit index its hook's
    verdicts lead to (None: skipped commits leave no single one)."""
    verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
    while True:
        step = next_step(n, verdicts)
        if step.test is None:
            return step.culprit
        verdicts[step.test] = verdict_of(step.test)


class RowLike(Protocol):
    label: str
    arm: str
    exact: float
    starts: float
    hours: float


def equal_accuracy(rows: Sequence[RowLike], target: float = 0.99) -> Iterator[str]:
    """Per row: plain-1, the cheapest plain arm reaching ``target`` exact (or none does),
    the default arm, and its wall against that plain arm (a markdown table)."""
    labels = list(dict.fromkeys(r.label for r in rows))
    by = {(r.label, r.arm): r for r in rows}
    yield (f"| row | plain (r1s1) exact / wall | cheapest plain arm >= {target:.0%} exact: "
           "exact / starts / wall | vllm-bisect default: exact / starts / wall | default wall "
           "/ that plain arm's |")
    yield "|---|---|---|---|---|"
    for label in labels:
        plains = [r for r in rows if r.label == label and parse(r.arm) is not None]
        p1, d = by.get((label, "plain")), by.get((label, "default"))
        best = min((r for r in plains if r.exact >= target), key=lambda r: r.hours,
                   default=None)
        one = f"{p1.exact:.1%} / {p1.hours:.2f} h" if p1 else "-"
        cheap = (f"{best.arm}: {best.exact:.1%} / {best.starts:.1f} / {best.hours:.2f} h"
                 if best else f"none does (best: {max(plains, key=lambda r: r.exact).arm} "
                 f"{max(r.exact for r in plains):.1%})" if plains else "-")
        dflt = f"{d.exact:.1%} / {d.starts:.1f} / {d.hours:.2f} h" if d else "-"
        ratio = f"{d.hours / best.hours:.2f}x" if d and best else "-"
        yield f"| {label.replace('|', '&#124;')} | {one} | {cheap} | {dflt} | {ratio} |"


class Predicted(Protocol):
    minutes: float
    predicted: float | None
    first: float | None
    first_range: tuple[float, float] | None


def forecast_lines(groups: Mapping[tuple[str, str], Sequence[Predicted]], first: bool = False,
                   ) -> Iterator[str]:
    """Per row, the default arm's forecast against its wall: median ratio, 90% range, and
    the share within 0.67x..1.5x (``first``: the first forecast, made before any switch,
    with how often the wall fell inside its printed range, where one was printed)."""
    extra = " actual inside the printed range |" if first else ""
    yield ("| row | scenarios with a forecast | median predicted / actual | 90% range | "
           f"within 0.67x..1.5x |{extra}")
    yield "|---|---|---|---|---|" + ("---|" if first else "")
    every: list[float] = []
    inside: list[bool] = []
    oracle = 0  # within 0.67x..1.5x at each row's best factor
    for (label, arm), outs in groups.items():
        if arm != "default":
            continue
        said = [o.first if first else o.predicted for o in outs]
        ratios = sorted(p / o.minutes for p, o in zip(said, outs, strict=True)
                        if p is not None and o.minutes > 0)
        every += ratios
        oracle += _best_factor(ratios)[0]
        row = _ratio_row(label.replace("|", "&#124;"), len(outs), ratios)
        if first:
            ins = [r[0] <= o.minutes <= r[1] for o in outs if (r := o.first_range)]
            inside += ins
            row += f" {_share(ins)} |"
        yield row
    yield _ratio_row("all rows", None, sorted(every)) + (f" {_share(inside)} |" if first
                                                         else "")
    if first and every:
        hits, m = _best_factor(every)
        yield (f"\nThe best one factor m on every first forecast (m x the forecast, m 0.5..4 "
               f"in steps of 0.05) is within 0.67x..1.5x in {hits / len(every):.1%} (m = "
               f"{m:.2f}); each row at its own best factor (a forecast that knew the row's "
               f"effect or flake rate) {oracle / len(every):.1%}.")


def _best_factor(ratios: list[float]) -> tuple[int, float]:
    """(scenarios within 0.67x..1.5x, m) at the factor m that puts most there."""
    return max(((sum(0.67 <= m * r <= 1.5 for r in ratios), m)
                for m in (k / 20 for k in range(10, 81))), default=(0, 1.0))


def _share(xs: list[bool]) -> str:
    return f"{sum(xs) / len(xs):.1%} of {len(xs)}" if xs else "-"


def _ratio_row(label: str, n: int | None, ratios: list[float]) -> str:
    if not ratios:
        return f"| {label} | 0 | - | - | - |"
    lo, hi = ratios[int(0.05 * (len(ratios) - 1))], ratios[int(0.95 * (len(ratios) - 1))]
    within = sum(0.67 <= r <= 1.5 for r in ratios) / len(ratios)
    count = f"{len(ratios)} of {n}" if n is not None else str(len(ratios))
    return (f"| {label} | {count} | {statistics.median(ratios):.2f} | {lo:.2f}..{hi:.2f} | "
            f"{within:.1%} |")
