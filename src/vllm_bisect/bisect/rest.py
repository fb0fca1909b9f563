"""The rest check (issue 28): does a culprit explain the whole effect?

After a culprit X of a noise-aware symptom, two questions (bisect.multi asks them): is the
bad end still clearly worse than X, and is X's parent clearly worse than the good end? Each
is asked of the two commits as the endpoints of that part of the range, with the two-level
calibration's numbers (:func:`~vllm_bisect.verdict.twolevel.calibration_step`, through
:class:`~vllm_bisect.bisect.policies.twolevel.Calibration`), starting from every server
already run of them (the session's measurement store: the endpoints' calibration, the
search's steps and confirmations; the culprit's verification), and adding fresh servers only
while it is open:

- **worse**: they separate by the smallest change that matters (the direction sure at the
  calibration's ``p_wrong``, the estimate at least the change): that part is bisected, and
  its calibration goes on from these servers.
- **explained** (futility): P(the change >= the smallest change that matters) < ``FUTILITY``
  under the posterior, i.e. even the one-sided 95% upper bound of the change is under it,
  with two servers an end at least. Nothing more runs.
- otherwise one fresh server for the end with fewer servers (the lower end on a tie), up to
  ``verdict.rest_servers`` server starts a check; then **undecided**, said so with the
  command that checks further. Before, the check was a whole calibration (to its 1% refusal,
  or 12 servers an end): on a real H200 at a 10% server-level spread it ran 4+ servers and
  stayed undecided (docs/validation.md (j)).

Tried and dropped (docs/benchmarks.md, bench_multi.py, 100 scenarios a row): the search's
noise posterior as the prior of the check's (a two-step range's search learns plateau
commits into its sides: the server level it teaches is too wide where the check matters),
and "explained" asked only of servers no verdict chose (a culprit's search servers are a
biased sample): neither named both steps more often, the second cost ~5 more starts a run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from vllm_bisect.bisect.policies.base import ServerRuns, VerdictPolicy
from vllm_bisect.bisect.policies.twolevel import Calibration, TwoLevelPolicy
from vllm_bisect.models import Measurement, Verification
from vllm_bisect.spec import Symptom
from vllm_bisect.verdict.auto import log_min_change, samples_of
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


def check(policy: VerdictPolicy, runs: ServerRuns, cap: int,
          verified: Mapping[str, Servers] | None = None) -> RestCheck | None:
    """The rest check of ``runs``' range (its endpoints: the two commits compared), at most
    ``cap`` fresh servers. ``verified``: servers a culprit's verification ran of either
    commit (fresh ones, after the search: added to the search's). None: not the two-level
    test (the search's own calibration then answers, as before)."""
    if not isinstance(policy, TwoLevelPolicy):
        return None
    cal = Calibration(policy, runs, 0)
    ends = (cal.old_sha, cal.new_sha)
    for sha, (groups, m) in (verified or {}).items():
        if sha in cal.last and groups:
            cal.groups[sha] += groups
            cal.earlier[sha].append(m)
    missing = [sha for sha in ends if not cal.groups[sha]]
    if missing:   # not measured by the search (a part's end it never judged)
        cal.run(missing, 2)
    started = len(missing)
    while True:
        step = cal.step(math.log(2 / policy.v.alpha))
        answer = _answer(step, min(len(cal.groups[sha]) for sha in ends), started, cap)
        if answer is not None:
            break
        old, new = (len(cal.groups[sha]) for sha in ends)
        cal.run([cal.new_sha if new < old else cal.old_sha], max(2, step.requests))
        started += 1
    if cal.fresh:   # the next calibration (a bisect of this part) goes on from them
        cal.record()
    servers = (len(cal.groups[cal.old_sha]), len(cal.groups[cal.new_sha]))
    change = math.expm1(log_min_change(policy.v))
    why = f"P(a change >= {change:+.1%}) = {step.p_matters:.2g}; {step.numbers}"
    logger.info("rest check: %s: %s", answer.value, why)
    return RestCheck(answer, why, servers, started)


def _answer(step: CalStep, servers: int, started: int, cap: int) -> RestAnswer | None:
    if step.separated:
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
    for sha, groups, m in ((v.culprit, v.culprit_servers, v.culprit_measurement),
                           (v.parent, v.parent_servers, v.parent_measurement)) if v else ():
        gs = [g for g in groups or [samples_of(m, symptom)] if g] if m is not None else []
        if m is not None and gs:
            out[sha] = (gs, m)
    return out
