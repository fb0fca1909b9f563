"""The rest check: does a culprit explain the whole effect?

After a culprit X of a noise-aware symptom, two questions (bisect.multi asks them): is the
bad end still clearly worse than X, and is X's parent clearly worse than the good end? Each
is asked of the two commits as the endpoints of that part of the range, with the two-level
calibration's numbers (:func:`~vllm_bisect.verdict.twolevel.calibration_step`, through
:class:`~vllm_bisect.bisect.policies.calibration.Calibration`), from every server already run of
them (the session's measurement store: the endpoints' calibration, the search's steps and
confirmations; a fresh verification's servers):

- **worse**: they separate by the smallest change that matters (the direction sure at the
  calibration's ``p_wrong``, the estimate at least the change): that part is bisected, and
  its calibration goes on from these servers.
- **explained** (futility): P(the change >= the smallest change that matters) < ``FUTILITY``
  under the posterior, i.e. even the one-sided 95% upper bound of the change is under it,
  with two servers an end at least. Nothing more runs.
- otherwise one fresh server for the end with fewer servers (the lower end on a tie), up to
  ``verdict.rest_servers`` server starts a check; then **undecided**, said so with the
  command that checks further (also as soon as the cap cannot settle it).

Why two servers an end for either answer, and why the verification's fresh servers matter
here: the search's servers of the culprit and of its parent are a biased sample (each was
judged on them: a plateau commit measured low looks good, a culprit measured high looks like
the whole step). The culprit's verification on fresh servers is the unbiased evidence these
checks start from (what judging without it cost: docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from vllm_bisect.bisect.policies.base import ServerRuns, VerdictPolicy
from vllm_bisect.bisect.policies.calibration import Calibration
from vllm_bisect.bisect.policies.twolevel import TwoLevelPolicy
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.models import Measurement, Verification
from vllm_bisect.spec import Symptom
from vllm_bisect.text import plural
from vllm_bisect.verdict.auto import direction, log_min_change, samples_of
from vllm_bisect.verdict.twolevel import CalStep

logger = logging.getLogger(__name__)
FUTILITY = 0.05   # P(the rest matters) under which the culprit explains the effect
MIN_SERVERS = 2   # per end, before the culprit explains it (one server's level is a guess)


Servers = tuple[list[list[float]], Measurement]   # samples per server, their measurement


class RestAnswer(StrEnum):
    WORSE = "yes"              # clearly worse: bisected
    EXPLAINED = "no"           # the culprit explains the effect
    UNDECIDED = "undecided"    # the server cap came first


@dataclass(frozen=True)
class RestCheck:
    answer: RestAnswer
    reason: str          # the numbers: change, P(it matters), servers per end
    servers: tuple[int, int]   # servers behind the answer: the lower end's, the upper end's
    started: int         # fresh servers the check itself started
    change: float = 0.0  # the estimated change (relative), the lower end to the upper
    p_matters: float = 1.0   # P(the change >= the smallest change that matters)
    need: int = 0        # not checked / undecided: servers an end that would rule it out
    worse_way: bool = True   # the change points the way the symptom gets worse


def check(policy: VerdictPolicy, runs: ServerRuns, cap: int,
          verified: Mapping[str, Servers] | None = None) -> RestCheck | None:
    """The rest check of ``runs``' range (its endpoints: the two commits compared), at most
    ``cap`` fresh servers. ``verified``: servers a culprit's verification ran of either
    commit (fresh ones, after the search: added to the search's). None: not the two-level
    test (the search's own calibration then answers, as before)."""
    if not isinstance(policy, TwoLevelPolicy):
        return None
    cal = Calibration(policy, runs, 0, announce=False)
    ends = (cal.old_sha, cal.new_sha)
    for sha, (groups, m) in (verified or {}).items():
        if sha in cal.last and groups:
            cal.groups[sha] += groups
            cal.earlier[sha].append(m)
    missing = [sha for sha in ends if not cal.groups[sha]]
    if missing:   # not measured by the search (a part's end it never judged)
        cal.run(missing, 2)
    started = len(missing)
    min_change = log_min_change(policy.v)
    while True:
        step = cal.step(math.log(2 / policy.v.alpha))
        answer = _answer(step, min(len(cal.groups[sha]) for sha in ends), started, cap)
        need = _cannot_settle(step, [cal.groups[sha] for sha in ends], cap - started,
                              min_change) if answer is None else 0
        if need:
            answer = RestAnswer.UNDECIDED
        if answer is not None:
            break
        old, new = (len(cal.groups[sha]) for sha in ends)
        cal.run([cal.new_sha if new < old else cal.old_sha], max(2, step.requests))
        started += 1
    if cal.fresh:   # the next calibration (a bisect of this part) goes on from them
        cal.record(told=False)
    servers = (len(cal.groups[cal.old_sha]), len(cal.groups[cal.new_sha]))
    matters = math.expm1(min_change)
    why = f"P(a change >= {matters:+.1%}) = {step.p_matters:.2g}; {step.numbers}"
    logger.info("rest check: %s: %s", answer.value, why)
    change = _change(step)
    return RestCheck(answer, why, servers, started, change=change, p_matters=step.p_matters,
                     need=need, worse_way=change * direction(policy.symptom)
                     * (-1 if policy.terms.fix else 1) > 0)


def _change(step: CalStep) -> float:
    if step.model is None:
        return 0.0
    lo, hi = step.model.means()
    return math.expm1(hi - lo)


def servers_to_explain(s2: float, t2: float, requests: float, min_change: float) -> int:
    """Servers an end before a change estimated at 0 is "explained": the one-sided 95%
    upper bound, z * sqrt((t2 + s2 / requests) * 2 / n), under ``min_change`` (log scale)."""
    z = 1.6449  # P(the rest matters) < FUTILITY = 0.05
    return math.ceil(2 * (t2 + s2 / max(requests, 1.0)) * (z / min_change) ** 2)


def _cannot_settle(step: CalStep, groups: list[list[list[float]]], left: int,
                   min_change: float) -> int:
    """The servers an end "explained" needs (0: go on) when there is no sign of a rest
    that matters (the ends apart by less than ``min_change``) and that is out of reach of
    the ``left`` server starts the cap allows."""
    model = step.model
    if model is None or left <= 0 or min(len(g) for g in groups) < MIN_SERVERS:
        return 0
    lo, hi = model.means()
    if abs(hi - lo) >= min_change:
        return 0
    s2, t2 = model.components()
    requests = sum(len(x) for g in groups for x in g) / sum(len(g) for g in groups)
    need = servers_to_explain(s2, t2, requests, min_change)
    return need if min(len(g) for g in groups) + left // 2 < need else 0


def _answer(step: CalStep, servers: int, started: int, cap: int) -> RestAnswer | None:
    # two servers an end either way: one server's level is a guess (a lone server at +12%
    # from its level, 3 server-level sd, was bisected as a second step: 61 starts)
    if step.separated and servers >= MIN_SERVERS:
        return RestAnswer.WORSE
    # two servers an end at least: the search's servers of a commit are a biased sample (it
    # judged the culprit's parent good on them: a plateau commit measured low looked good)
    if step.p_matters < FUTILITY and servers >= MIN_SERVERS:
        return RestAnswer.EXPLAINED
    return RestAnswer.UNDECIDED if started >= cap else None


def verified_servers(v: Verification | None, symptom: Symptom) -> dict[str, Servers]:
    """The servers a culprit's verification ran of it and its parent (fresh, after the
    search), for the rest checks of the same symptom."""
    out: dict[str, Servers] = {}
    if v is None or v.source != "fresh":   # the search's own servers: counted already
        return out
    for sha, groups, m in ((v.culprit, v.culprit_servers, v.culprit_measurement),
                           (v.parent, v.parent_servers, v.parent_measurement)):
        gs = [g for g in groups or [samples_of(m, symptom)] if g] if m is not None else []
        if m is not None and gs:
            out[sha] = (gs, m)
    return out


def starts_text(k: int) -> str:
    return f"{k} server start" + ("" if k == 1 else "s")


def note(what: str, found: RestCheck | None, why: str, starts: int, cap: int,
              rng: CommitRange, spec_path: str) -> str:
    """One line: a rest check's answer, what it cost, and how to check further."""
    head = f"rest check, {what}: "
    if found is None:
        return f"{head}untestable ({starts_text(starts)}): {why}"
    numbers = (f"change {found.change:+.1%}, P(it matters) = {found.p_matters:.2f} on "
               f"{found.servers[0]} + {found.servers[1]} servers")
    if found.answer is RestAnswer.EXPLAINED:
        return f"{head}no, the culprit explains the effect ({numbers}; {starts_text(starts)})"
    if found.need and starts == 0:
        why_not = (f"settling it takes ~{plural(found.need, 'server')} an end, more than "
                   f"verdict.rest_servers = {cap} allows: none started")
    else:
        why_not = (f"{starts_text(starts)}, the cap verdict.rest_servers = {cap}"
                   + (f"; ~{plural(found.need, 'server')} an end would settle it"
                      if found.need else ""))
    if not found.worse_way:   # no sign of a rest that is worse: nothing to bisect
        return f"{head}undecided, not worse so far ({numbers}; {why_not})"
    return (f"{head}undecided ({numbers}; {why_not}): to look further, "
            f"`vllm-bisect run --spec {spec_path} --good {rng.good.sha[:12]} --bad "
            f"{rng.bad.sha[:12]}`")
