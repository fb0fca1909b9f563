"""Culprit verification: the first bad commit and its last good parent, judged again.

Paid only for doubt (issue 40). When the search already judged both at the whole-bisect
bound (the final pair's confirmation, ``Role.CONFIRM``; the good endpoint is good by its
calibration) and no rest check follows, that is the verification: the same evidence, pooled
over the servers it ran, is not collected again to say the same thing
(``Verification.source = "confirmation"``, with the servers it rests on). Likewise a
deterministic cap under auto (bisect/recheck.py): the culprit showed the symptom and its parent
missed it in every run, the search's and its re-checks (``"rechecks"``), so a default run of a
deterministic cap costs plain bisect + 3 starts, every phase counted. Otherwise both are
measured again on fresh servers (at once when there are workers) with
``verdict.verify_samples`` requests each and judged again: a policy without that bound
(threshold, sequential, bayes), or the two-level test with its rest checks, which start
from these servers, the only ones of the pair no verdict chose (docs/benchmarks.md, issue
40, for what the checks cost without them). A culprit that no longer judges
bad, or a parent that no longer judges good, is reported (a flaky symptom), not hidden. The
result is kept in the journal, so a resumed session does not measure them again.
"""

from __future__ import annotations

import logging

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Measurement, Outcome, Phase, Verdict, Verification

logger = logging.getLogger(__name__)
META_KEY = "verification"


def parent_of(t: Tester, culprit: str) -> CommitInfo:
    """The highest commit below the culprit judged good (the good endpoint at worst)."""
    at = t.rng.index(culprit)
    best = -1
    for o in t.probed:
        if o.verdict is Verdict.GOOD:
            i = t.rng.index(o.commit)
            if best < i < at:
                best = i
    return t.rng.good if best == -1 else t.rng.commits[best]


def at_the_bound(t: Tester, culprit: str, parent: CommitInfo) -> Verification | None:
    """The verification the search's confirmation already is: the culprit judged bad and its
    parent good at the whole-bisect bound (the good endpoint: good by calibration); None
    when either was not (then fresh servers decide)."""
    ends = ({t.rng.good.sha: Verdict.GOOD, t.rng.bad.sha: Verdict.BAD}
            if t.policy.traits.needs_calibration else {})
    verdicts = {**ends, **t.at_bound}
    if verdicts.get(culprit) is not Verdict.BAD or verdicts.get(parent.sha) is not Verdict.GOOD:
        return None
    found = {o.commit: o for o in t.probed}   # the latest outcome of each
    c_ev, p_ev = t.evaluations.get(culprit), t.evaluations.get(parent.sha)
    if c_ev is None or p_ev is None or c_ev.measurement is None or p_ev.measurement is None:
        return None
    return Verification(
        culprit=culprit, parent=parent.sha, samples=0, source="confirmation",
        culprit_verdict=Verdict.BAD, parent_verdict=Verdict.GOOD,
        culprit_reason=_reason(found.get(culprit)), parent_reason=_reason(found.get(parent.sha)),
        culprit_measurement=c_ev.measurement, parent_measurement=p_ev.measurement,
        culprit_servers=c_ev.samples, parent_servers=p_ev.samples)


def from_rechecks(t: Tester, culprit: str, parent: CommitInfo, runs: int) -> Verification | None:
    """The verification a deterministic cap's search already is (auto's threshold search,
    bisect/recheck.py): the culprit showed the symptom in every run of it (a symptom shown is
    strong evidence: a good commit does not cap) and its parent missed it in at least
    ``runs`` runs (the search's and its re-checks); None otherwise."""
    mine = [o for o in t.probed if o.commit == culprit]
    theirs = [o for o in t.probed if o.commit == parent.sha]
    if (not mine or any(o.verdict is not Verdict.BAD for o in mine) or len(theirs) < runs
            or any(o.verdict is not Verdict.GOOD for o in theirs)):
        return None
    return Verification(
        culprit=culprit, parent=parent.sha, samples=0, source="rechecks",
        culprit_verdict=Verdict.BAD, parent_verdict=Verdict.GOOD,
        culprit_reason=mine[-1].reason, parent_reason=theirs[-1].reason,
        culprit_measurement=pooled_runs(t, culprit), parent_measurement=pooled_runs(t, parent.sha),
        culprit_runs=len(mine), parent_runs=len(theirs))


def pooled_runs(t: Tester, commit: str) -> Measurement | None:
    """The commit's latest measurement with the requests of every run the session journaled
    of it (a parent re-checked on 3 servers: its effect rests on all their requests, not
    the last server's)."""
    runs = [ev.measurement for ev in t.store.journal.evaluations_of(t.store.key(commit))
            if ev.measurement is not None]
    ev = t.evaluations.get(commit)
    last = ev.measurement if ev is not None else None
    if last is None or len(runs) < 2:
        return last
    requests = [r for m in runs for r in m.requests]
    return last.model_copy(update={"requests": requests,
                                   "output_tokens": [r.output_tokens for r in requests]})


def verify_culprit(t: Tester, culprit: str, fresh: bool = False,
                   rechecked: int = 0) -> Verification:
    """``fresh``: on fresh servers even when the search judged both at the bound (the rest
    checks start from them: the search's own servers of the pair are a biased sample).
    ``rechecked``: a deterministic cap's parent ran this many times (1 + its re-checks): the
    search's runs are the verification when they all agree (:func:`from_rechecks`)."""
    journal, need = t.store.journal, t.store.spec.verdict.verify_samples
    stored = journal.get_meta(META_KEY)
    parent = parent_of(t, culprit)
    pooled = None if fresh else (at_the_bound(t, culprit, parent)
                                 or (from_rechecks(t, culprit, parent, rechecked)
                                     if rechecked else None))
    if stored:
        v = Verification.model_validate_json(stored)
        if v.culprit == culprit and (v.samples == need if v.source == "fresh" else pooled):
            return v
    if pooled is not None:
        logger.info("the culprit %s and its parent were judged by the search (%s): that is "
                    "the verification (no fresh servers)", culprit[:12], pooled.source)
        journal.set_meta(META_KEY, pooled.model_dump_json())
        return pooled
    info = t.rng.commits[t.rng.index(culprit)]

    def more(m: Measurement) -> int:
        return max(0, need - len(m.requests))

    # on fresh servers, uncounted and not journaled (kept here), verify_samples requests on
    # each first server (the effect's interval rests on them: issue 50); the two-level test:
    # further fresh servers while it asks (one server's requests cannot outweigh the server
    # level)
    with t.measurer.during(Phase.VERIFY):
        (co, c_ev), (po, p_ev) = t.run_trials(
            [(info, Role.VERIFY_CULPRIT, 0), (parent, Role.VERIFY_PARENT, 0)], more,
            fresh=True, record=False)
    evs = {culprit: c_ev, parent.sha: p_ev}
    v = Verification(culprit=culprit, parent=parent.sha, samples=need,
                     culprit_verdict=co.verdict, parent_verdict=po.verdict,
                     culprit_reason=co.reason, parent_reason=po.reason,
                     culprit_measurement=co.measurement, parent_measurement=po.measurement,
                     culprit_servers=evs[culprit].samples, parent_servers=evs[parent.sha].samples)
    if not v.confirmed:
        logger.warning("the culprit %s did not verify: culprit %s, parent %s", culprit[:12],
                       co.verdict.value, po.verdict.value)
    journal.set_meta(META_KEY, v.model_dump_json())
    return v


def _reason(o: Outcome | None) -> str:
    return o.reason if o is not None else ""
