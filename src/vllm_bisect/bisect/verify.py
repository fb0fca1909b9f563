"""Culprit verification: re-measure the first bad commit and its last good parent.

Once the search is over, both are measured again on fresh servers (at once when there are
workers) with ``verdict.verify_samples`` requests each and judged again; the report's effect
and its 95% bootstrap CI come from these samples. A culprit that no longer judges bad, or a
parent that no longer judges good, is reported (a flaky symptom), not hidden. The result is
kept in the journal, so a resumed session does not measure them again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.models import Measurement, Verdict, Verification

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import Driver

logger = logging.getLogger(__name__)
META_KEY = "verification"


def parent_of(d: Driver, culprit: str) -> CommitInfo:
    """The highest commit below the culprit judged good (the good endpoint at worst)."""
    at = d.rng.index(culprit)
    best = -1
    for o in d.probed:
        if o.verdict is Verdict.GOOD:
            i = d.rng.index(o.commit)
            if best < i < at:
                best = i
    return d.rng.good if best == -1 else d.rng.commits[best]


def verify_culprit(d: Driver, culprit: str) -> Verification:
    stored = d.journal.get_meta(META_KEY)
    if stored:
        v = Verification.model_validate_json(stored)
        if v.culprit == culprit and v.samples == d.spec.verdict.verify_samples:
            return v
    parent = parent_of(d, culprit)
    info = d.rng.commits[d.rng.index(culprit)]
    need = d.spec.verdict.verify_samples
    for c, role in ((info, "verify culprit"), (parent, "verify parent")):
        d.events.on_testing(c, role, 0)
    def more(m: Measurement) -> int:
        return max(0, need - len(m.requests))

    if d.policy is not None and d.policy.test_ is not None:
        # the two-level test: fresh servers until it decides again (one server's requests
        # cannot outweigh the server level)
        evs = {sha: d.policy.measure(sha) for sha in (culprit, parent.sha)}
    else:
        evs = d.evaluate_all([culprit, parent.sha], more)
    outcomes = {}
    for c in (info, parent):
        o = d.judged(c, "verify", evs[c.sha])
        outcomes[c.sha] = o
        d.events.on_outcome(c, o)
    co, po = outcomes[culprit], outcomes[parent.sha]
    v = Verification(culprit=culprit, parent=parent.sha, samples=need,
                     culprit_verdict=co.verdict, parent_verdict=po.verdict,
                     culprit_reason=co.reason, parent_reason=po.reason,
                     culprit_measurement=co.measurement, parent_measurement=po.measurement)
    if not v.confirmed:
        logger.warning("the culprit %s did not verify: culprit %s, parent %s", culprit[:12],
                       co.verdict.value, po.verdict.value)
    d.journal.set_meta(META_KEY, v.model_dump_json())
    return v
