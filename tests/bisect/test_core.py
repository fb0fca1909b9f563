"""The composition root: one core for every way in, one rule for settling the endpoints,
and a core that is replaced, never assigned into."""

from __future__ import annotations

import random
from pathlib import Path

from vllm_bisect.bisect.core import open_core
from vllm_bisect.bisect.driver import inline
from vllm_bisect.bisect.measurement.executor import InlineExecutor
from vllm_bisect.bisect.policies import make_policy, resolve
from vllm_bisect.bisect.search.endpoints import Settle, Settling, settle, settling
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.models import Verdict
from vllm_bisect.sim.virtual import Scenario, VirtualCluster, commit_range
from vllm_bisect.spec import Strategy, parse_spec

LENGTH = parse_spec({"probe": {"max_tokens": 256, "requests": 1},
                     "verdict": {"symptom": "length"}})
RELATIVE = parse_spec({"verdict": {"symptom": "itl", "strategy": "threshold",
                                   "itl_factor": 1.5}})
TWOLEVEL = parse_spec({"verdict": {"symptom": "itl", "strategy": "twolevel"}})


def test_one_rule_settles_the_endpoints() -> None:
    threshold, relative = make_policy(LENGTH), make_policy(RELATIVE)
    learning = make_policy(TWOLEVEL)
    assert {m: settling(learning, m) for m in Settle} == dict.fromkeys(Settle, Settling.CALIBRATE)
    assert settling(threshold, Settle.SEARCH) is Settling.VERIFY
    assert settling(threshold, Settle.HOOK) is Settling.REFERENCE_CHECKED
    assert settling(threshold, Settle.LOOSE) is Settling.NOTHING
    assert settling(relative, Settle.LOOSE) is Settling.REFERENCE


def test_resolve_decides_once_what_the_spec_comes_to() -> None:
    plan = resolve(TWOLEVEL)
    assert plan.strategy is Strategy.TWOLEVEL and plan.needs_reference and plan.hook_ok
    assert plan.choice.strategy is plan.strategy and "was written" in plan.reason
    model = resolve(parse_spec({"verdict": {"symptom": "itl", "strategy": "changepoint"}}))
    # (the model of the range answers the hook: bisect/search/changepoint_hook.py)
    assert model.strategy is Strategy.CHANGEPOINT and model.models_range and model.hook_ok
    length = resolve(LENGTH)
    assert length.strategy is Strategy.THRESHOLD and not length.needs_reference
    crash = resolve(parse_spec({"verdict": {"symptom": "crash"}}))
    assert crash.strategy is Strategy.BAYES and not crash.hook_ok


def test_with_policy_returns_a_new_core_that_keeps_the_judged_commits(tmp_path: Path) -> None:
    s = Scenario(n=16, culprit=9, unbuildable=frozenset())
    rng = commit_range(s.n)
    cluster = VirtualCluster(s, rng, 1, random.Random(1), first_batch=LENGTH.probe.requests)
    journal = SessionJournal(tmp_path)
    try:
        core = open_core(LENGTH, rng, journal, None, InlineExecutor(inline(cluster)))
        assert settle(core.tester, Settle.SEARCH) is Settling.VERIFY
        assert [o.verdict for o in core.tester.probed] == [Verdict.GOOD, Verdict.BAD]
        bayes = make_policy(LENGTH, Strategy.BAYES)
        other = core.with_policy(bayes)
        assert other is not core and other.policy is bayes and core.policy is not bayes
        assert other.tester.probed is core.tester.probed and other.store is core.store
        retrying = core.with_retries(5)
        assert retrying.measurer.retries == 5 and core.measurer.retries != 5
        assert retrying.measurer.executor is core.measurer.executor
    finally:
        journal.close()
