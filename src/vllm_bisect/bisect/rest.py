"""The rest check (issue 28): does a culprit explain the whole effect?

After a culprit X of a noise-aware symptom, two questions (bisect.multi asks them): is the
bad end still clearly worse than X, and is X's parent clearly worse than the good end? Each
is asked of the two commits as the endpoints of that part of the range, with the two-level
calibration's numbers (:func:`~vllm_bisect.verdict.twolevel.calibration_step`, through
:class:`~vllm_bisect.bisect.policies.twolevel.Calibration`), starting from every server
already run of them (the session's measurement store: the endpoints' calibration, the
search's steps and confirmations; the culprit's verification), with what the search's
servers taught about the noise as the prior, and adding fresh servers only while it is open:

- **worse** (asked of every server): they separate by the smallest change that matters (the
  direction sure at the calibration's ``p_wrong``, the estimate at least the change): that
  part is bisected, and its calibration goes on from these servers.
- **explained** (futility): P(the change >= the smallest change that matters) < ``FUTILITY``
  (even the one-sided 95% upper bound of the change is under it), asked of the servers no
  verdict chose: a culprit's or a parent's servers in the search ran until they looked like
  the side they were put on (a culprit high, a parent low: both towards "explained"), so an
  end a search judged counts its verification's and fresh servers only.
- otherwise one fresh server for the end with the fewest servers no verdict chose, up to
  ``verdict.rest_servers`` server starts a check; then **undecided**, said so with the
  command that checks further. Before, the check was a whole calibration, to its 1%
  refusal or 12 servers an end: on a real H200 at a 10% server-level spread it ran 4+
  servers and stayed undecided (docs/validation.md (j)).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from vllm_bisect.bisect.policies.base import ServerRuns, VerdictPolicy
from vllm_bisect.bisect.policies.twolevel import Calibration, TwoLevelPolicy
from vllm_bisect.models import Measurement, Verification
from vllm_bisect.spec import Symptom
from vllm_bisect.verdict.auto import log_min_change, samples_of
from vllm_bisect.verdict.twolevel import Arr, CalStep, TwoLevel, to_logs

logger = logging.getLogger(__name__)
FUTILITY = 0.05   # P(the rest matters) under which the culprit explains the effect


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
          verified: Mapping[str, Servers] | None = None, noise: TwoLevel | None = None,
          judged: Collection[str] = ()) -> RestCheck | None:
    """The rest check of ``runs``' range (its endpoints: the two commits compared), at most
    ``cap`` fresh servers. ``verified``: servers a culprit's verification ran of either
    commit (fresh, after the search). ``noise``: the search's model, whose servers (less the
    two commits') are the prior of the noise (two commits' few servers alone leave the
    server level wide open). ``judged``: the ends a search judged (a culprit, a parent): its
    servers of them are a biased sample (kept until they looked like the side they were put
    on: a culprit high, a parent low, both towards "explained"), so they count towards
    "worse" (where the bias is against the answer) but not towards "explained", which needs
    one of their servers that no verdict chose (a verification's or a fresh one) at least.
    None: not the two-level test (the search's own calibration then answers, as before)."""
    if not isinstance(policy, TwoLevelPolicy):
        return None
    c = _Servers(Calibration(policy, runs, 0), verified or {}, judged)
    prior = _prior(noise, [g for sha in c.ends for g in c.cal.groups[sha]])
    threshold = math.log(2 / policy.v.alpha)
    while True:
        every = c.cal.step(threshold, prior=prior)           # "worse": every server
        fair = (c.cal.step(threshold, prior=prior, groups=c.fair)   # "explained": no verdict's
                if all(c.fair.values()) else None)
        answer = _answer(every, fair, c.started, cap)
        if answer is not None:
            break
        c.more(max(2, every.requests))
    if c.cal.fresh:   # the next calibration (a bisect of this part) goes on from them
        c.cal.record()
    step = fair if fair is not None and answer is RestAnswer.EXPLAINED else every
    servers = (len(c.cal.groups[c.cal.old_sha]), len(c.cal.groups[c.cal.new_sha]))
    change = math.expm1(log_min_change(policy.v))
    on = f" on the {_fair(c)} servers no verdict chose" if step is fair and judged else ""
    why = (f"P(a change >= {change:+.1%}) = {step.p_matters:.2g}{on}; "
           f"{every.reason.split(': ', 1)[-1]}")
    logger.info("rest check: %s: %s", answer.value, why)
    return RestCheck(answer, why, servers, c.started)


class _Servers:
    """Both commits' servers: every one (``cal.groups``) and those no verdict chose
    (``fair``); fresh ones go to the end with fewer of those."""

    def __init__(self, cal: Calibration, verified: Mapping[str, Servers],
                 judged: Collection[str]) -> None:
        self.cal, self.started = cal, 0
        self.ends = (cal.old_sha, cal.new_sha)
        self.judged = set(judged)
        self.fair = {sha: [] if sha in self.judged else list(cal.groups[sha])
                     for sha in self.ends}
        for sha, (groups, m) in verified.items():
            if sha in cal.last and sha in self.fair and groups:
                cal.groups[sha] += groups
                cal.earlier[sha].append(m)
                self.fair[sha] += groups
        for sha in self.ends:
            if not cal.groups[sha]:   # not measured by the search (an end it never judged)
                self.run(sha, 2)

    def run(self, sha: str, requests: int) -> None:
        self.cal.run([sha], requests)
        self.fair[sha].append(self.cal.groups[sha][-1])
        self.started += 1

    def more(self, requests: int) -> None:
        self.run(min(self.ends, key=lambda sha: (len(self.fair[sha]), sha not in self.judged,
                                                 sha != self.ends[0])), requests)


def _fair(c: _Servers) -> str:
    return " + ".join(str(len(c.fair[sha])) for sha in c.ends)


def search_noise(policy: VerdictPolicy) -> TwoLevel | None:
    """The model a two-level search ended with (its noise is a rest check's prior)."""
    return policy.test_.model if isinstance(policy, TwoLevelPolicy) and policy.test_ else None


def _prior(noise: TwoLevel | None, groups: list[list[float]]) -> Arr | None:
    """The search's posterior over the noise grid without the compared commits' servers
    (their own evidence must not count twice); None: no search model, or nothing left."""
    if noise is None:
        return None
    try:
        return noise.without([to_logs(g) for g in groups]).noise()
    except ValueError:   # a side left without servers
        return None


def _answer(every: CalStep, fair: CalStep | None, started: int, cap: int) -> RestAnswer | None:
    if every.separated:
        return RestAnswer.WORSE
    if fair is not None and fair.p_matters < FUTILITY:
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
