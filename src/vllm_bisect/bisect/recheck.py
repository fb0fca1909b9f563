"""auto on a cap or a correctness change under ``vllm-bisect run``: deterministic until a run
says otherwise, repeats only where a flaky symptom can mislead.

The symptom shown at a commit is strong evidence (a good commit does not cap); the symptom
missing is weak (a flaky bad commit looks good). So the server starts beyond plain bisect's go
where a flaky symptom shows itself:

1. the bad endpoint runs until it shows the symptom, at most ``verdict.intermittent_runs``
   times: missed first and shown later is a flaky symptom, the Bayesian search from the start
   (these runs count as its first); never shown: refused. The good endpoint runs first only
   when the verdict needs its reference (a correctness change) or workers search at once;
   else it is **lazy**: a commit the search judges good already shows the symptom is not
   everywhere, and the good endpoint runs (and is checked) only when none is, so the start
   it would take goes to a re-check, which can catch a flaky symptom (it never can);
2. shown in the first run: the threshold search, one run per commit, as plain bisect;
3. the culprit's parent (the commit a wrong search stands on: every wrong answer of a
   single change point has a truly bad commit judged good there) runs
   ``verdict.recheck_runs`` more times on fresh servers: shown in any, the symptom is flaky
   and the Bayesian search takes over from every run so far (the journal).

Every run is journaled and replayed on resume (a cut run does not measure them again), and
the switch to bayes is kept in the journal's meta table, so a resumed session goes on under
the strategy it switched to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.reruns import Runs
from vllm_bisect.bisect.search.binary import Found, Search
from vllm_bisect.bisect.search.endpoints import (
    check_endpoints,
    intermittence_applies,
    prefetch_first,
    steps,
)
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Phase, Verdict
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Choice, Strategy

logger = logging.getLogger(__name__)

FLAKY_META = "auto_flaky"  # journal meta: the reason auto switched to bayes
# the re-checks of the culprit's parent that find a cap shown in half the runs exactly in
# >= 95% of simulated bisects (2, the default: 88%; docs/benchmarks.md, issue 40's table)
RECHECKS_FOR_95 = 4


def lazy_good(t: Tester) -> bool:
    """Does the good endpoint wait until the search judges no commit good (step 1)?"""
    return t.measurer.workers == 1 and not t.policy.traits.needs_reference


def precheck(t: Tester, spec: BisectSpec) -> Choice | None:
    """Step 1: None when the first bad-endpoint run showed the symptom (or the good endpoint,
    run first, is not good: the search's endpoint check says why); bayes when a later run
    showed it after a miss; never shown: refused."""
    v, rng = spec.verdict, t.rng
    k = steps(len(rng.commits))
    prefetch_first(t)
    lazy = lazy_good(t)
    if not lazy and Runs(t, rng.good, Role.GOOD_ENDPOINT, k + 1).next() is not Verdict.GOOD:
        return None
    bad = Runs(t, rng.bad, Role.BAD_ENDPOINT, k)
    verdict = None
    for run in range(1, v.intermittent_runs + 1):
        if run == 2 and verdict is not None:  # say why before the repeats, not after
            t.events.on_phase("", f"intermittence check: the bad endpoint was judged "
                              f"{verdict.value} in its first run; it runs again on fresh "
                              f"servers, up to {v.intermittent_runs - 1} more times, until it "
                              f"shows the {v.symptom.value} symptom (a symptom that shows in "
                              "some runs only looks good in one)")
        verdict = bad.next()
        if verdict is Verdict.BAD:
            if run == 1:
                return None
            return Choice(Strategy.BAYES, f"auto: the bad endpoint missed the "
                          f"{v.symptom.value} symptom in its first run and showed it in run "
                          f"{run}: it shows in some runs only: runs are repeated where they "
                          "tell most (bayes)")
    if lazy:  # never shown: refused (its last run, known: no server starts)
        check_endpoints(t, None, t.test(rng.bad, Role.BAD_ENDPOINT, k))
    return None


def good_check(t: Tester, found: Found) -> None:
    """The lazy good endpoint: run and checked when no commit below the culprit was judged
    good (the answer stands on it)."""
    if found.step.culprit is None and not found.step.candidates:
        return
    if last_good(t, found) is None:
        one = t.test(t.rng.good, Role.GOOD_ENDPOINT, 0)
        check_endpoints(t, one, None)


def last_good(t: Tester, found: Found) -> int | None:
    """The commit the answer stands on: the last one judged good below the culprit (or the
    candidates, when skipped commits separate it from the first bad); None: the good
    endpoint (checked first) or nothing found."""
    ends = found.step.candidates or ((found.step.culprit,) if found.step.culprit is not None
                                     else ())
    if not ends:
        return None
    latest = {o.commit: o.verdict for o in t.probed}
    i = min(ends) - 1
    while i >= 0 and latest.get(t.rng.commits[i].sha) is not Verdict.GOOD:
        i -= 1
    return i if i >= 0 else None


def recheck(t: Tester, spec: BisectSpec, found: Found) -> Choice | None:
    """Step 3: the culprit's parent (the last commit judged good) ``verdict.recheck_runs``
    more times; bayes when any run shows the symptom."""
    v = spec.verdict
    i = last_good(t, found)
    if i is None or v.recheck_runs == 0:
        return None
    parent = t.rng.commits[i]
    runs = Runs(t, parent, Role.BISECT, 0, skip=1)  # its first run was the search's
    for run in range(1, v.recheck_runs + 1):
        t.events.on_phase("", f"re-check {run} of {v.recheck_runs}: the culprit's parent "
                              f"{parent.sha[:12]} again, on a fresh server (a flaky symptom "
                              "looks good in one run)")
        with t.measurer.during(Phase.RECHECK):
            verdict = runs.next()
        if verdict is Verdict.BAD:
            return Choice(Strategy.BAYES, f"auto: the culprit's parent {parent.sha[:12]}, "
                          f"judged good, showed the {v.symptom.value} symptom in re-check "
                          f"{run}: it shows in some runs only: runs are repeated where they "
                          "tell most (bayes)")
    return None


def deterministic(spec: BisectSpec) -> Choice:
    v = spec.verdict
    runs = f"{v.recheck_runs} more run{'s' * (v.recheck_runs != 1)}"
    return Choice(Strategy.THRESHOLD, f"auto: the {v.symptom.value} symptom showed in the bad "
                  f"endpoint's first run and the culprit's parent missed it in {runs}: "
                  "deterministic (one run per commit tells)")


def run_auto_cap(t: Tester, spec: BisectSpec, choice: Choice,
                 search: Callable[[bool], Search], bayes: Callable[[], Search]
                 ) -> tuple[Found, Choice]:
    """The search under auto for a cap or a correctness change, and the strategy it ran
    with. ``search(settled)``: the threshold search (binary, or multisection with workers;
    ``settled``: the endpoints are settled here, the lazy good endpoint included);
    ``bayes``: the Bayesian search over the same core, judged by the bayes policy from then
    on (the caller's core switches: nothing here assigns into it)."""
    journal = t.store.journal
    flaky = journal.get_meta(FLAKY_META)
    new = Choice(Strategy.BAYES, flaky) if flaky else precheck(t, spec)
    if new is None:
        lazy = lazy_good(t)
        if lazy:
            t.events.on_phase("", "the good endpoint runs only if the search judges no commit "
                              "good (one commit judged good shows the symptom is not "
                              "everywhere)")
        else:
            t.events.on_phase("", "the threshold search starts from the endpoints judged "
                              "above: their results are reused (cached), not measured again")
        found = search(lazy).run()
        if lazy:
            good_check(t, found)
        new = recheck(t, spec, found)
        if new is None:
            return found, deterministic(spec)
    if not flaky:
        journal.set_meta(FLAKY_META, new.reason)
        logger.warning("%s", new.reason)
        t.events.on_phase("", f"verdict strategy {new.strategy.value}: {new.reason}")
    return bayes().run(), new


def applies(spec: BisectSpec, choice: Choice) -> bool:
    return intermittence_applies(spec, choice)
