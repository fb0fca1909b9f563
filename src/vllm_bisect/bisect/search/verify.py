"""Culprit verification: re-measure the first bad commit and its last good parent.

Once the search is over, both are measured again on fresh servers (at once when there are
workers) with ``verdict.verify_samples`` requests each and judged again; the report's effect
and its 95% bootstrap CI come from these samples. A culprit that no longer judges bad, or a
parent that no longer judges good, is reported (a flaky symptom), not hidden. The result is
kept in the journal, so a resumed session does not measure them again.
"""

from __future__ import annotations

import logging

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Measurement, Verdict, Verification

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


def verify_culprit(t: Tester, culprit: str) -> Verification:
    journal, need = t.store.journal, t.store.spec.verdict.verify_samples
    stored = journal.get_meta(META_KEY)
    if stored:
        v = Verification.model_validate_json(stored)
        if v.culprit == culprit and v.samples == need:
            return v
    parent = parent_of(t, culprit)
    info = t.rng.commits[t.rng.index(culprit)]
    for c, role in ((info, Role.VERIFY_CULPRIT), (parent, Role.VERIFY_PARENT)):
        t.events.on_testing(c, role, 0)

    def more(m: Measurement) -> int:
        return max(0, need - len(m.requests))

    ends = ((culprit, Role.VERIFY_CULPRIT), (parent.sha, Role.VERIFY_PARENT))
    evs = t.measurer.measure_all(
        {sha: (t.open(sha, role).more if t.policy.multi_server else more)
         for sha, role in ends}, account=False)
    # the two-level test: fresh servers until it decides again (one server's requests
    # cannot outweigh the server level)
    evs = {sha: t.servers(sha, ev, account=False) for sha, ev in evs.items()}
    co = t.judge_only(info, Role.VERIFY_CULPRIT, evs[culprit])
    po = t.judge_only(parent, Role.VERIFY_PARENT, evs[parent.sha])
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
