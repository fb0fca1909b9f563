"""The plateau rule of the two-level decision (issue 28): a commit clearly off the good end
by the smallest change that matters is BAD where the plateau evidence decides, undecided
where it does not (the final pair's bound before a fall-back), never on fewer than three of
its servers; the GOOD gate; a fall-back's calibration precise enough for it."""

from __future__ import annotations

import math
import random

from tests.verdict.test_twolevel import THRESHOLD, server
from vllm_bisect.verdict.twolevel import (
    STEP_SERVERS,
    CalStatus,
    CommitTest,
    Decision,
    TwoLevel,
    calibration_step,
)

STEP = math.log(1.15)
D = 2 * math.log(1.3)   # two 1.3x steps between the ends: the plateau sits midway


def sides(rnd: random.Random) -> TwoLevel:
    return TwoLevel(tuple(server(rnd, 0.0, 0.02, 0.1, 6) for _ in range(6)),
                    tuple(server(rnd, D, 0.02, 0.1, 6) for _ in range(6)))


def at(level: float, servers: int, n: int = 8) -> list[tuple[float, ...]]:
    """Servers whose samples sit at ``level`` (+-0.1, the mean exactly at it)."""
    return [tuple(level + (0.1 if i % 2 else -0.1) for i in range(n)) for _ in range(servers)]


def test_a_plateau_is_bad_where_the_plateau_evidence_decides_and_undecided_elsewhere() -> None:
    model = sides(random.Random(1))
    mg, mb = model.means()
    plateau = at((mg + mb) / 2, 6)
    test = CommitTest(model, expected_steps=12, step_change=STEP, good_gate=True)
    assert abs(model.log_bf(plateau)) < test.threshold   # good-vs-bad alone: undecided
    assert test.decide(plateau) is Decision.BAD
    # at the final pair's bound before a fall-back: undecided at once (the fall-back runs)
    assert CommitTest(model, expected_steps=12, step_change=STEP,
                      step_decides=False).decide(plateau) is Decision.UNKNOWN
    # without the rule it samples on (and at the caps it is undecided: the failure)
    assert CommitTest(model, expected_steps=12).decide(plateau) in (
        Decision.NEW_SERVER, Decision.MORE_REQUESTS)
    # two servers never decide by the plateau evidence, however many requests (a loose
    # search step's threshold, which their plateau evidence passes)
    loose = CommitTest(model, alpha_total=0.05, expected_steps=1, step_change=STEP)
    few = at((mg + mb) / 2, STEP_SERVERS - 1, 40)
    assert model.log_bf_step(few, STEP) >= loose.threshold > abs(model.log_bf(few))
    assert loose.decide(few) is not Decision.BAD


def test_the_good_gate_lets_a_good_commit_a_little_high_through() -> None:
    model = sides(random.Random(2))
    mg, _ = model.means()
    test = CommitTest(model, expected_steps=12, step_change=STEP, good_gate=True)
    high = at(mg + 0.65 * STEP, 6)   # off the good end a little, not by the change
    assert 0.0 < model.log_bf_step(high, STEP) < test.threshold
    assert test.decide(high) is Decision.GOOD   # (before: undecided, "leans off good")
    assert test.decide(at(mg, 6)) is Decision.GOOD


def test_a_fall_backs_calibration_makes_the_good_end_precise_for_the_plateau() -> None:
    rnd = random.Random(3)
    good = [server(rnd, 0.0, 0.05, 0.05, 2) for _ in range(2)]
    bad = [server(rnd, D, 0.05, 0.05, 2) for _ in range(2)]
    plain = calibration_step(good, bad, min_change=STEP, threshold=THRESHOLD)
    assert plain.status is CalStatus.READY   # the ends alone: separated, and precise enough
    assert plain.model is not None and plain.model.ceiling(step=STEP) < THRESHOLD
    more = calibration_step(good, bad, min_change=STEP, threshold=THRESHOLD, step_change=STEP)
    assert more.status is CalStatus.MORE
