"""The first bad commit of a run with several steps (bisect.multi._headline): never a step
its pair check did not confirm (CI saw a run name one as first_bad beside two confirmed
steps, on the simulator's noise)."""

from __future__ import annotations

from vllm_bisect.bisect.driver import BisectResult
from vllm_bisect.bisect.multi import Culprit, MultiResult, _headline
from vllm_bisect.sim.virtual import commit_range

RNG = commit_range(10)


def culprit(i: int, confirmed: bool = True, symptom: str = "itl") -> Culprit:
    return Culprit(symptom=symptom, step=1, commit=RNG.sha(i), subject="", good=RNG.good.sha,
                   bad=RNG.bad.sha, effect=1.3, server_starts=2, confirmed=confirmed)


def result(first: int) -> BisectResult:
    return BisectResult(range=RNG, first_bad=RNG.sha(first), candidates=[RNG.sha(first)],
                        confidence=0.9)


def test_an_unconfirmed_first_search_gives_way_to_the_earliest_confirmed_step() -> None:
    m = MultiResult(result(5), [culprit(5, confirmed=False), culprit(7), culprit(3)])
    r = _headline(m)
    assert r.first_bad == RNG.sha(3) and r.candidates == [RNG.sha(3)]
    assert r.verification is None and r.confidence is None


def test_a_confirmed_first_search_stays() -> None:
    m = MultiResult(result(7), [culprit(7), culprit(3)])
    assert _headline(m).first_bad == RNG.sha(7)
    assert _headline(m).confidence == 0.9


def test_nothing_confirmed_of_its_symptom_leaves_it_as_it_was() -> None:
    m = MultiResult(result(5), [culprit(5, confirmed=False), culprit(2, symptom="length")])
    assert _headline(m).first_bad == RNG.sha(5)


def test_the_range_splits_around_a_culprit() -> None:
    after, before = RNG.after(RNG.sha(4)), RNG.before(RNG.sha(4))
    assert after is not None and before is not None
    assert after.good.sha == RNG.sha(4) and after.commits == RNG.commits[5:]
    assert before.bad.sha == RNG.sha(3) and before.commits == RNG.commits[:4]
    assert RNG.after(RNG.bad.sha) is None and RNG.before(RNG.sha(0)) is None
