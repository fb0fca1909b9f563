"""The bisect core on virtual time (vllm_bisect.sim.virtual): the real Driver, policies,
store, measurer and searches; only each commit's evaluation is drawn from a scenario."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import pytest

from vllm_bisect.bisect.driver import BisectResult, Driver
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.policies import (
    BayesPolicy,
    ChangePointPolicy,
    SequentialPolicy,
    ThresholdPolicy,
    make_policy,
    resolve_strategy,
)
from vllm_bisect.bisect.policies.base import Role, Traits
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.search.multisection import ideal_rounds
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import SpecError
from vllm_bisect.models import EvalStatus, Evaluation, Verdict
from vllm_bisect.sim.virtual import CRASH, Scenario, VirtualCluster, commit_range, measurement
from vllm_bisect.spec import BisectSpec, parse_spec

LENGTH = {"build": {"kind": "url", "url": "http://127.0.0.1:1"},
          "probe": {"max_tokens": 256, "requests": 1}, "verdict": {"symptom": "length"}}
SEQ = {**LENGTH, "probe": {"max_tokens": 256, "requests": 3},
       "verdict": {"symptom": "itl", "strategy": "sequential", "verify_samples": 0}}


class Steps(NullEvents):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        self.seen.append((role, steps_left))


def bisect(spec: BisectSpec, s: Scenario, tmp: Path, workers: int = 1, seed: int = 1,
           events: NullEvents | None = None) -> BisectResult:
    rng = commit_range(s.n)
    cluster = VirtualCluster(s, rng, workers, random.Random(seed), first_batch=spec.probe.requests)
    journal = SessionJournal(tmp)
    try:
        return Driver(spec, rng, cluster, journal, None, events,
                      executor=cluster if workers > 1 else None).run()
    finally:
        journal.close()


def test_serial_progress_counts_the_remaining_interval(tmp_path: Path) -> None:
    s = Scenario(n=256, culprit=77, unbuildable=frozenset())
    events = Steps()
    r = bisect(parse_spec(LENGTH), s, tmp_path, events=events)
    assert r.first_bad == commit_range(s.n).sha(77)
    left = [k for role, k in events.seen if role == Role.BISECT]
    # 256 candidates: 8 steps; each verdict halves the interval, so one step fewer each time;
    # then auto's re-checks of the culprit's parent on fresh servers (bisect/recheck.py;
    # verdict.recheck_runs = 2 since issue 30's second pass)
    assert left == [*range(8, 0, -1), 0, 0]


def test_sequential_policy_finds_a_small_slowdown_under_noise(tmp_path: Path) -> None:
    s = Scenario(n=120, culprit=61, unbuildable=frozenset({10, 90}), symptom="itl",
                 effect=1.3, cv=0.1)
    r = bisect(parse_spec(SEQ), s, tmp_path)
    assert r.first_bad == commit_range(s.n).sha(61)
    steps = [o for o in r.probed if o.commit not in (r.range.good.sha, r.range.bad.sha)
             and o.measurement is not None]
    assert steps and all("SPRT" in o.reason for o in steps)


def noisy_evaluations(rnd: random.Random) -> Callable[[str, float, int], Evaluation]:
    """A measured evaluation of ``k`` requests around ``mean`` (10% noise, drawn from ``rnd``)."""
    def ev(sha: str, mean: float, k: int) -> Evaluation:
        return Evaluation(commit=sha, status=EvalStatus.MEASURED, measurement=measurement(
            [mean * rnd.gauss(1.0, 0.1) for _ in range(k)], 256))
    return ev


def test_a_replayed_policy_judges_as_the_one_that_learned(tmp_path: Path) -> None:
    """What the hook relies on: replaying the verdicts in order puts a learning policy in the
    state `run` left it in (the same verdicts, then the same verdict on the next commit)."""
    spec = parse_spec(SEQ)
    ev = noisy_evaluations(random.Random(3))
    good, bad = ev("g", 10.0, 12), ev("b", 13.0, 12)
    steps = [ev(f"c{i}", 13.0 if i % 2 else 10.0, 8) for i in range(6)]
    verdicts = []
    policies = []
    for _ in range(2):
        p = make_policy(spec)
        assert isinstance(p, SequentialPolicy)
        p.calibrate(lambda more: (good, bad), tests=8)
        mine = []
        for e in steps:   # judged and learned from in order, as the hook's replay does
            o = p.judge(e, Role.BISECT)
            p.learn(e, Role.BISECT, o)
            mine.append(o.verdict)
        verdicts.append(mine)
        policies.append(p)
    assert verdicts[0] == verdicts[1] and Verdict.BAD in verdicts[0] and Verdict.GOOD in verdicts[0]
    nxt = ev("next", 13.0, 8)
    assert policies[0].judge(nxt, Role.BISECT) == policies[1].judge(nxt, Role.BISECT)


def test_the_crash_rule_is_in_every_policy() -> None:
    died = Evaluation(commit="c", status=EvalStatus.FAILED, reason=CRASH)
    unbuilt = Evaluation(commit="c", status=EvalStatus.UNAVAILABLE, reason="no artifact")
    for verdict in ({"symptom": "crash"}, {"symptom": "crash", "strategy": "bayes"}):
        p = make_policy(parse_spec({**LENGTH, "verdict": verdict}))
        assert p.judge(died, Role.BISECT).verdict is Verdict.BAD
        assert p.judge(unbuilt, Role.BISECT).verdict is Verdict.SKIP
    for spec in (LENGTH, SEQ):
        p = make_policy(parse_spec(spec))
        assert p.judge(died, Role.BISECT).verdict is Verdict.SKIP  # not the crash symptom


def test_policy_by_strategy_str_or_enum() -> None:
    class Strategy(StrEnum):
        THRESHOLD = "threshold"
        SEQUENTIAL = "sequential"
        BAYES = "bayes"
        AUTO = "auto"

    spec = parse_spec(SEQ)
    as_enum = spec.model_copy(update={"verdict": spec.verdict.model_copy(
        update={"strategy": Strategy.SEQUENTIAL})})
    assert type(make_policy(as_enum)) is type(make_policy(spec)) is SequentialPolicy
    assert type(make_policy(parse_spec(LENGTH))) is ThresholdPolicy
    assert not make_policy(parse_spec({**LENGTH, "verdict": {"strategy": "bayes"}})).supports_hook
    auto = spec.model_copy(update={"verdict": spec.verdict.model_copy(
        update={"strategy": Strategy.AUTO})})
    assert type(make_policy(auto)) is ChangePointPolicy  # auto resolves: itl -> the model
    # (k workers: the same model, k measurements a round)
    assert type(make_policy(auto, resolve_strategy(auto, workers=2).strategy)) is ChangePointPolicy
    model = spec.model_copy(update={"verdict": spec.verdict.model_copy(
        update={"strategy": "changepoint"})})
    assert type(make_policy(model)) is ChangePointPolicy
    assert resolve_strategy(auto).reason.startswith("auto: itl")
    crash = parse_spec({**LENGTH, "verdict": {"symptom": "crash"}})
    assert type(make_policy(crash)) is BayesPolicy  # auto: crash -> bayes (no hook)
    assert type(make_policy(parse_spec({**LENGTH, "verdict": {}}))) is ThresholdPolicy
    with pytest.raises(SpecError, match="nope"):
        make_policy(spec, "nope")  # type: ignore[arg-type]


def test_retries_and_server_starts_on_one_worker_and_on_four(tmp_path: Path) -> None:
    # every server start dies with probability 0.3; retries (serve.retries = 2) absorb it
    s = Scenario(n=200, culprit=120, unbuildable=frozenset(), crash_rate=0.3)
    for k in (1, 4):
        r = bisect(parse_spec(LENGTH), s, tmp_path / str(k), workers=k, seed=5)
        assert r.first_bad == commit_range(s.n).sha(120) and r.workers == k
        assert r.server_starts >= len({o.commit for o in r.probed})
        assert r.rounds <= (math.ceil(math.log2(s.n)) if k == 1 else ideal_rounds(s.n, k) + 1)


def test_judging_is_pure_and_learning_is_the_recorders_step() -> None:
    """A policy changes only when told what a recorded verdict was (``learn``): judging a
    commit, even the reference endpoint or a bisect step, leaves it as it was."""
    spec = parse_spec(SEQ)
    ev = noisy_evaluations(random.Random(4))
    good, bad = ev("g", 10.0, 12), ev("b", 13.0, 12)
    p = make_policy(spec)
    assert isinstance(p, SequentialPolicy)
    p.calibrate(lambda more: (good, bad), tests=8)
    fit, thresholds = p.sequential, p.thresholds_policy.thresholds
    step = ev("c", 13.0, 12)
    out = p.judge(step, Role.BISECT)
    p.judge(good, Role.GOOD_ENDPOINT)
    assert out.verdict is Verdict.BAD and p.sequential is fit and p.thresholds_policy.thresholds is thresholds
    p.learn(step, Role.BISECT, out)
    assert p.sequential is not fit


def test_a_policys_flags_are_one_frozen_traits_value() -> None:
    """What the searches and the hook read of a policy is one value (``traits``), per
    strategy; the two-level fall-back replaces it rather than setting flags."""
    spec = parse_spec(SEQ)
    got = {name: make_policy(spec, name).traits for name in ("threshold", "sequential", "bayes",
                                                               "twolevel")}
    assert got == {"threshold": Traits(),
                   "sequential": Traits(needs_calibration=True, needs_reference=True),
                   "bayes": Traits(supports_hook=False),
                   "twolevel": Traits(needs_calibration=True, multi_server=True,
                                      needs_reference=True)}
    assert make_policy(spec, "twolevel", pair_bound=True).traits.pair_bound
    with pytest.raises(AttributeError):
        got["twolevel"].pair_bound = True  # type: ignore[misc]
