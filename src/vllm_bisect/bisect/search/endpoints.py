"""The endpoints: verified (threshold policies) or calibrated on (learning policies) before
the search; the bisect is refused (``NotReproduced``) unless good judges good and bad bad.
:func:`settle` is the one place that decides whether the endpoints are calibrated on,
verified, or only the reference end measured (every search, the hook and the studies call
it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from vllm_bisect.bisect.policies.base import MoreSamples, Role, VerdictPolicy
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.reruns import Runs
from vllm_bisect.bisect.search.multisection import ideal_rounds
from vllm_bisect.bisect.search.steps import next_step
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.errors import NotReproduced, untestable_hint
from vllm_bisect.models import Evaluation, Outcome, Phase, Verdict
from vllm_bisect.spec import BisectSpec, SearchKind, VerdictSpec
from vllm_bisect.verdict.auto import Choice, Strategy


def steps(n: int) -> int:
    """Binary-search steps over n commits."""
    return math.ceil(math.log2(max(2, n)))


def prefetch_first(t: Tester) -> None:
    """While the good endpoint is measured: the bad one and the first commit to test."""
    rng, n = t.rng, len(t.rng.commits)
    first = next_step(n, {n - 1: Verdict.BAD}).test
    t.measurer.prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))


def verify_endpoints(t: Tester) -> None:
    """One at a time, the reference (healthy) endpoint first: no need to build the other if
    the good one cannot be tested."""
    rng, k = t.rng, steps(len(t.rng.commits))
    prefetch_first(t)
    (ref_end, role), (other, role2) = t.terms.endpoints(rng)
    one = t.test(ref_end, role, k + 1)
    if one.verdict is Verdict.SKIP and ref_end is rng.good:
        check_endpoints(t, one, None)
    two = t.test(other, role2, k)
    check_endpoints(t, *((one, two) if ref_end is rng.good else (two, one)))


def check_measured_endpoints(t: Tester, results: dict[str, tuple[Evaluation, bool]]) -> None:
    """Verify both endpoints measured elsewhere (``results``: commit -> (evaluation, from
    the cache); the multisection measures them beside its first interior commits): judged
    and recorded, the reference end first, then checked as :func:`verify_endpoints` does."""
    rng = t.rng
    out = {info.sha: t.record(info, role, *results[info.sha])
           for info, role in t.terms.endpoints(rng)}
    check_endpoints(t, out[rng.good.sha], out[rng.bad.sha])


def untestable_end(name: str, sha: str, reason: str, *, log: Path | None = None,
                   network: bool = False, transient: bool = False, advice: str = ""
                   ) -> NotReproduced:
    """The error for an endpoint that could not be tested, in the same words wherever it is
    found (its measurement, or the builder's plan before anything is built)."""
    return NotReproduced(f"the {name} endpoint {sha[:12]} could not be tested: {reason}",
                         hint=untestable_hint(log, network=network, transient=transient,
                                              advice=advice, role=name))


def check_endpoints(t: Tester, good: Outcome | None, bad: Outcome | None) -> None:
    """Raise NotReproduced unless the old end judged old (good) and the new end new (bad)."""
    rng, terms = t.rng, t.terms
    # the bad end too: with the lazy good endpoint (bisect/recheck.py) it runs first
    for end, name, sha in ((good, "good", rng.good.sha), (bad, "bad", rng.bad.sha)):
        if end is not None and end.verdict is Verdict.SKIP:
            ev = t.evaluations.get(end.commit)
            raise untestable_end(name, sha, end.reason, log=ev.log if ev else None,
                                 network=bool(ev and ev.network),
                                 transient=bool(ev and ev.transient),
                                 advice=ev.hint if ev else "")
    problems = []
    if good is not None and good.verdict is not Verdict.GOOD:
        problems.append(f"{terms.old} endpoint {rng.good.sha[:12]} judged {good.verdict} "
                        f"(expected {terms.old}): {good.reason}")
    if bad is not None and bad.verdict is not Verdict.BAD:
        problems.append(f"{terms.new} endpoint {rng.bad.sha[:12]} judged {bad.verdict} "
                        f"(expected {terms.new}): {bad.reason}")
    if problems:
        raise NotReproduced("did not reproduce: " + "; ".join(problems),
                            hint="check the verdict thresholds against both measurements "
                                 "(shown above), or the range")


def search_tests(n: int, workers: int) -> int:
    """How many commits the search may judge (a learning policy splits its error budget
    over them): k per round of a k-worker multisection."""
    return max(steps(n), workers * ideal_rounds(n, workers))


def calibrate_endpoints(t: Tester, tests: int | None = None) -> None:
    """Let the policy calibrate on both endpoints (measured at once when there are workers,
    again with more samples when it asks). ``tests``: how many commits will be judged after
    it (default: the search's count over the range)."""
    rng, n = t.rng, len(t.rng.commits)
    prefetch_first(t)
    k = steps(n)

    def endpoints(more: MoreSamples | None) -> tuple[Evaluation, Evaluation]:
        t.test_batch([(info, role, k + 1 - i)
                      for i, (info, role) in enumerate(t.terms.endpoints(rng))], more)
        return t.evaluations[rng.good.sha], t.evaluations[rng.bad.sha]

    with t.measurer.during(Phase.ENDPOINTS):
        t.policy.calibrate(endpoints, tests or search_tests(n, t.measurer.workers), t.runs)


class Settle(StrEnum):
    """Who settles the endpoints, and so how (:func:`settling`)."""

    SEARCH = "search"  # run, a study: calibrate on both ends, else verify both
    HOOK = "hook"      # git bisect run: calibrate, else measure the reference end and check it
    LOOSE = "loose"    # knobs: calibrate, else measure the reference end if thresholds need it


class Settling(StrEnum):
    CALIBRATE = "calibrate"
    VERIFY = "verify"
    REFERENCE_CHECKED = "reference-checked"
    REFERENCE = "reference"
    NOTHING = "nothing"


def settling(policy: VerdictPolicy, mode: Settle) -> Settling:
    """The one rule: what settling the endpoints means for this policy and caller."""
    if policy.traits.needs_calibration:
        return Settling.CALIBRATE
    if mode is Settle.SEARCH:
        return Settling.VERIFY
    if mode is Settle.HOOK:
        return Settling.REFERENCE_CHECKED
    return Settling.REFERENCE if policy.traits.needs_reference else Settling.NOTHING


def settle(tester: Tester, mode: Settle, tests: int | None = None, *,
           verify: Callable[[], None] | None = None) -> Settling:
    """Settle the endpoints of ``tester``'s range as :func:`settling` says (``tests``: how
    many commits will be judged after it, for a calibrating policy's budget); what it did.
    ``verify``: how a verification measures both ends instead of :func:`verify_endpoints`
    (one at a time): the multisection measures them beside its first interior commits, and
    says itself which of its servers are the endpoints' (``Phase.ENDPOINTS``)."""
    t = tester
    how = settling(t.policy, mode)
    if how is Settling.VERIFY and verify is not None:
        verify()
        return how
    with t.measurer.during(Phase.ENDPOINTS):
        _settle(t, how, tests)
    return how


def _settle(t: Tester, how: Settling, tests: int | None) -> None:
    if how is Settling.CALIBRATE:
        calibrate_endpoints(t, tests)
    elif how is Settling.VERIFY:
        verify_endpoints(t)
    elif how is Settling.REFERENCE_CHECKED:
        ref = t.test(t.terms.reference(t.rng), t.terms.reference_role, 0)
        check_endpoints(t, *((None, ref) if t.terms.fix else (ref, None)))
    elif how is Settling.REFERENCE:
        end, role = t.terms.endpoints(t.rng)[0]
        t.test(end, role, tests or 0)


def intermittence_applies(spec: BisectSpec, choice: Choice) -> bool:
    """auto resolved to threshold on a cap or a correctness change, regression search, and
    ``verdict.intermittent_runs`` >= 2: :func:`intermittence` has something to check."""
    v = spec.verdict
    return (v.strategy == "auto" and choice.strategy is Strategy.THRESHOLD
            and v.symptom.info.may_be_flaky
            and spec.range.search != SearchKind.FIX and v.intermittent_runs >= 2)


def intermittence(t: Tester, spec: BisectSpec, choice: Choice) -> Choice | None:
    """auto resolved to threshold on a cap or a correctness change (deterministic at both
    endpoints, if it is what it seems): the good endpoint runs once and the bad endpoint up to
    ``verdict.intermittent_runs`` times (8; 1: no check), each on a fresh server, until it has
    both shown and missed the symptom. Shown in every run: deterministic, threshold with that
    reason. Shown in some runs only: bayes (which counts these runs as its first). Shown in
    none, or not applicable: None (the endpoint check refuses as before, or nothing changes).
    The same check for ``run`` and the ``git bisect run`` hook."""
    v, rng = spec.verdict, t.rng
    if not intermittence_applies(spec, choice):
        return None
    with t.measurer.during(Phase.ENDPOINTS):
        return _intermittence(t, v, rng)


def _intermittence(t: Tester, v: VerdictSpec, rng: CommitRange) -> Choice | None:
    k = steps(len(rng.commits))
    prefetch_first(t)
    if Runs(t, rng.good, Role.GOOD_ENDPOINT, k + 1).next() is not Verdict.GOOD:
        return None  # the search's endpoint check says why
    runs = v.intermittent_runs
    shown = missed = tries = 0
    first = ""
    bad = Runs(t, rng.bad, Role.BAD_ENDPOINT, k)  # journaled runs first: a resume replays them
    while shown + missed < runs and tries < 2 * runs and not (shown and missed):
        verdict = bad.next()
        tries += 1
        shown += verdict is Verdict.BAD
        missed += verdict is Verdict.GOOD
        if verdict is not Verdict.SKIP and not first:
            first = "showed" if verdict is Verdict.BAD else "did not show"
    if not (shown and missed):
        if not shown:
            return None
        return Choice(Strategy.THRESHOLD, f"auto: the bad endpoint showed the "
                      f"{v.symptom.value} symptom in "
                      f"{'its one run' if shown == 1 else f'all {shown} runs'}: deterministic (one "
                      "run per commit tells)")
    return Choice(Strategy.BAYES, f"auto: the bad endpoint showed the {v.symptom.value} "
                  f"symptom in {shown} of {shown + missed} runs (the first {first} it): it "
                  "shows in some runs only: runs are repeated where they tell most (bayes)")
