"""The verdict protocol's trials (issue 27): ``policy.open(commit, role)`` gives one
``CommitTrial`` per commit, which holds that commit's state (the test it samples under, its
servers so far); the policy keeps only its model, and a dropped trial leaves nothing behind."""

from __future__ import annotations

from vllm_bisect.bisect.policies import make_policy
from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.policies.twolevel import TwoLevelPolicy, TwoLevelTrial
from vllm_bisect.models import EvalStatus, Evaluation, Verdict
from vllm_bisect.sim.virtual import measurement
from vllm_bisect.spec import parse_spec
from vllm_bisect.verdict.twolevel import CommitTest, TwoLevel

SPEC = {"build": {"kind": "url", "url": "http://127.0.0.1:1"}, "probe": {"max_tokens": 256},
        "verdict": {"symptom": "itl", "itl_factor": 1.15, "verify_samples": 0,
                    "strategy": "twolevel"}}
# good ~10 ms, bad ~13 ms per token, on three servers each
MODEL = TwoLevel(((2.30, 2.31, 2.29), (2.31, 2.30, 2.32), (2.29, 2.30, 2.31)),
                 ((2.56, 2.57, 2.55), (2.57, 2.56, 2.58), (2.55, 2.56, 2.57)))


def policy() -> TwoLevelPolicy:
    p = make_policy(parse_spec(SPEC))
    assert isinstance(p, TwoLevelPolicy)
    p.test_ = CommitTest(MODEL, alpha_total=0.01, expected_steps=4)
    return p


def server(sha: str, itl_ms: list[float]) -> Evaluation:
    return Evaluation(commit=sha, status=EvalStatus.MEASURED,
                      measurement=measurement(itl_ms, 256))


def test_two_commits_under_test_keep_their_servers_apart() -> None:
    p = policy()
    a, b = p.open("a", Role.BISECT), p.open("b", Role.BISECT)
    assert isinstance(a, TwoLevelTrial) and isinstance(b, TwoLevelTrial)
    assert a.more is not None and a.groups == [] and b.groups == []
    a.next_probe(server("a", [10.0, 10.1, 9.9]))
    b.next_probe(server("b", [13.0, 13.1, 12.9]))
    assert a.groups is not None and b.groups is not None
    assert len(a.groups) == 1 and len(b.groups) == 1 and a.groups != b.groups
    # the policy holds no commit's servers: only its model and what it learned
    assert not {"groups", "last", "kept", "sampled_by"} & set(vars(p))
    ea, eb = a.evaluation(server("a", [10.0, 10.1, 9.9])), b.evaluation(server("b", [13.0, 13.1, 12.9]))
    va, vb = a.verdict(ea), b.verdict(eb)
    assert not p.learned   # judging is pure: the Tester's record teaches the model
    p.learn(ea, Role.BISECT, va)
    p.learn(eb, Role.BISECT, vb)
    assert va.verdict is Verdict.GOOD and vb.verdict is Verdict.BAD
    assert set(p.learned) == {"a", "b"}   # both bisect steps taught the model


def test_an_endpoint_or_an_uncalibrated_policy_opens_a_trial_that_is_not_started() -> None:
    p = policy()
    end = p.open("g", Role.GOOD_ENDPOINT)
    assert isinstance(end, TwoLevelTrial) and end.groups is None and end.more is None
    assert end.next_probe(server("g", [10.0])) is None   # one server, judged as it is
    fresh = make_policy(parse_spec(SPEC)).open("c", Role.BISECT)
    assert isinstance(fresh, TwoLevelTrial) and fresh.test is None and fresh.groups is None


def test_a_dropped_trial_leaves_the_next_one_fresh() -> None:
    p = policy()
    first = p.open("c", Role.BISECT)
    first.next_probe(server("c", [11.5, 11.6]))
    assert first.groups is not None and len(first.groups) == 1
    # the run was cancelled: the caller drops the object; opening again starts from nothing
    again = p.open("c", Role.BISECT)
    assert isinstance(again, TwoLevelTrial) and again.groups == []
    assert again.evaluation(server("c", [11.0])).samples is None   # no servers to merge
