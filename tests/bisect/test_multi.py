"""One culprit per symptom and every step of one symptom (bisect.multi, issue 28), on
virtual time (the real Driver, policies and loop; each evaluation drawn from a scenario)."""

from __future__ import annotations

import random
from pathlib import Path

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.multi import MultiResult, run_symptoms
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.recheck import FLAKY_META
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.sim.virtual import VirtualCluster, commit_range
from vllm_bisect.sim.virtual_steps import StepsScenario, steps_scenario
from vllm_bisect.spec import BisectSpec, Symptom, parse_spec


def spec(symptoms: list[str], **verdict: object) -> BisectSpec:
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "probe": {"max_tokens": 256},
                       "verdict": {"symptoms": symptoms, "itl_factor": 1.15,
                                   "verify_samples": 0, "plateau": True, **verdict}})


def run(sp: BisectSpec, s: StepsScenario, tmp: Path, seed: int = 0
        ) -> tuple[MultiResult, VirtualCluster]:
    rng = commit_range(s.n)
    cluster = VirtualCluster(s, rng, 1, random.Random(seed), first_batch=sp.probe.requests)
    journal = SessionJournal(tmp)
    try:
        def driver(spec_: BisectSpec, r: CommitRange, plan: Plan) -> Driver:
            return Driver(spec_, r, cluster, journal, None, plan=plan)
        return run_symptoms(sp, rng, driver, NullEvents()), cluster
    finally:
        journal.close()


def named(m: MultiResult, s: StepsScenario, symptom: str) -> set[int]:
    rng = commit_range(s.n)
    return {rng.index(c.commit) for c in m.culprits
            if c.symptom == symptom and c.commit is not None and c.confirmed}


PLATEAU = steps_scenario(32, ((10, 1.4), (22, 1.4)), cv=0.10, server_cv=0.05)


def test_a_plateau_between_two_steps_is_judged_bad_not_left_undecided(tmp_path: Path) -> None:
    """Issue 28's failure: two 1.4x ITL steps in 32 commits, the plateau between them neither
    the good end's level nor the bad end's. Before: no culprit after 164 server starts (every
    plateau commit undecided at 12 servers); now the first search names the first step."""
    rng = commit_range(PLATEAU.n)
    cluster = VirtualCluster(PLATEAU, rng, 1, random.Random(0), first_batch=1)
    journal = SessionJournal(tmp_path)
    try:
        result = Driver(spec(["itl"]), rng, cluster, journal, None).run()
    finally:
        journal.close()
    assert result.first_bad == rng.sha(10)
    assert cluster.starts < 60, cluster.starts


def test_the_rest_check_names_both_steps(tmp_path: Path) -> None:
    m, _ = run(spec(["itl"]), PLATEAU, tmp_path)
    assert named(m, PLATEAU, "itl") == {10, 22}
    first, second = [c for c in m.culprits if c.confirmed]
    assert (first.step, second.step) == (1, 2)
    assert first.effect is not None and 1.15 < first.effect < 1.8
    assert "and another" in m.summary()


def test_one_step_is_explained_by_its_culprit(tmp_path: Path) -> None:
    s = steps_scenario(32, ((13, 1.3),), cv=0.10, server_cv=0.05)
    m, _ = run(spec(["itl"]), s, tmp_path)
    assert named(m, s, "itl") == {13}
    (c,) = m.culprits
    assert "rest check" in c.note and ": no, the culprit explains the effect (" in c.note


def test_the_rest_check_can_be_turned_off(tmp_path: Path) -> None:
    m, _ = run(spec(["itl"], rest_check=False), PLATEAU, tmp_path)
    assert len(m.culprits) == 1 and not m.culprits[0].note


def test_a_rest_checks_verdict_is_not_replayed_as_another_symptoms_run(tmp_path: Path) -> None:
    """A cap at 8 and a 1.3x ITL step at 20 (seeds where the ITL step's rest check measures
    the bad end, journaled "good": the culprit's level). Before: the cap's intermittence
    check replayed that verdict as the bad end missing the cap in its first run, switched the
    cap to bayes ("it shows in some runs only", shown by no run) and paid 25-26 starts; each
    search now replays only its own verdicts (the journal keeps who judged)."""
    s = steps_scenario(32, ((20, 1.3),), cap_at=8, cv=0.10, server_cv=0.05)
    for seed in (3, 4, 6):
        m, cluster = run(spec(["length", "itl"]), s, tmp_path / str(seed), seed)
        assert named(m, s, "length") == {8} and named(m, s, "itl") == {20}
        journal = SessionJournal(tmp_path / str(seed))
        try:
            assert journal.get_meta(FLAKY_META) is None, journal.get_meta(FLAKY_META)
        finally:
            journal.close()
        assert cluster.starts <= 20, (seed, cluster.starts)


def test_two_symptoms_in_one_run_reuse_the_measurements(tmp_path: Path) -> None:
    """A cap at 8 and a 1.3x ITL step at 20: both named in one run, with fewer server starts
    than the two single-symptom bisects (the measurement key leaves the verdict out, so the
    second search judges the first one's measurements; the cap's intermittence check counts
    the servers that already showed it)."""
    s = steps_scenario(32, ((20, 1.3),), cap_at=8, cv=0.10, server_cv=0.05)
    both, cb = run(spec(["length", "itl"]), s, tmp_path / "both")
    assert named(both, s, "length") == {8} and named(both, s, "itl") == {20}
    assert [c.symptom for c in both.culprits] == ["itl", "length"]  # noise-aware first
    _, cl = run(spec(["length"]), s, tmp_path / "length")
    _, ci = run(spec(["itl"]), s, tmp_path / "itl")
    assert cb.starts < cl.starts + ci.starts, (cb.starts, cl.starts, ci.starts)
    assert both.result.server_starts == cb.starts


def test_symptoms_share_one_measurement_key() -> None:
    sp = spec(["length", "itl"])
    assert sp.verdict.symptom is Symptom.LENGTH
    assert sp.symptom_list() == [Symptom.LENGTH, Symptom.ITL]
    assert sp.probe.requests == 3   # the model of the range's least, for both symptoms
    itl = sp.for_symptom(Symptom.ITL)
    assert itl.verdict.symptom is Symptom.ITL and not itl.verdict.symptoms
    assert itl.measurement_key("a" * 40) == sp.measurement_key("a" * 40)
