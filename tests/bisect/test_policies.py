"""The verdict plan is settled once (issue 52 item 3): every way in (``vllm-bisect run``, the
``git bisect run`` hook) resolves each symptom's :class:`~vllm_bisect.bisect.policies.Plan`
once, reads the traits without building a policy, and builds one policy per core from it;
the rest-check rule is the plan's (``Plan.checks_rest``). Counted from the debug log lines of
a real run (``verdict plan for``: :func:`resolve`; ``verdict policy``: a policy built; ``core
over``: a core opened), on a real history and simulator servers, or on virtual time."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import sim_serve, spec_for
from tests.bisect.test_multi import run, spec
from tests.helpers import history
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.hook import run_hook
from vllm_bisect.bisect.policies import resolve
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.sim.virtual_steps import steps_scenario
from vllm_bisect.spec import parse_spec


def counted(caplog: pytest.LogCaptureFixture) -> Counter[str]:
    """Plans resolved (per symptom), policies built and cores opened, from the log."""
    out: Counter[str] = Counter()
    for r in caplog.records:
        text = r.getMessage()
        if text.startswith("verdict plan for "):
            out["plan " + text.split()[3].rstrip(":")] += 1
        elif text.startswith("verdict policy "):
            out["policy"] += 1
        elif text.startswith("core over "):
            out["core"] += 1
    return out


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in ("vllm_bisect.bisect.policies", "vllm_bisect.bisect.core"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def test_a_run_settles_its_plan_once_and_builds_one_policy_per_core(
        tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """Before: 3 plans resolved and 4 policies built (3 to read their traits) for this
    one-symptom run's one core."""
    h = history(tmp_path, n_commits=8, cap_at=5)
    sp = spec_for(h, sim_serve())
    assert run_bisect(sp, tmp_path / "session", tmp_path / "cache",
                      NullEvents()).first_bad == h.planted["length"]
    assert counted(logged) == {"plan length": 1, "policy": 1, "core": 1}


def test_the_hook_settles_its_plan_once(tmp_path: Path,
                                        logged: pytest.LogCaptureFixture) -> None:
    """Before: the plan's resolve built a policy of its own besides the core's."""
    h = history(tmp_path, n_commits=4, cap_at=2)
    result = run_hook(spec_for(h, sim_serve()), h.path, tmp_path / "cache")
    assert result.outcome.commit == h.bad
    assert counted(logged) == {"plan length": 1, "policy": 1, "core": 1}


def test_each_symptom_is_settled_once_however_many_searches_it_runs(
        tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """Two symptoms on virtual time: a 1.3x ITL step (its search, then its rest checks: a
    core each) and a cap. Before: the cap's plan resolved 4 times, the ITL step's 5 times
    (each building a policy to read its traits)."""
    s = steps_scenario(32, ((20, 1.3),), cap_at=8, cv=0.10, server_cv=0.05)
    m, _ = run(spec(["length", "itl"]), s, tmp_path)
    assert {c.symptom for c in m.culprits} == {"length", "itl"}
    n = counted(logged)
    assert n["plan length"] == n["plan itl"] == 1
    assert n["core"] >= 3   # the ITL search, its rest checks, the cap's search
    # one policy per core, and the cap's own policy that judges the ITL search's
    # measurements before its search (bisect.multi: the range ends at the first that
    # shows the cap)
    assert n["policy"] == n["core"] + 1


def test_the_rest_checks_follow_a_noise_aware_test_only() -> None:
    def plan(**verdict: object) -> bool:
        return resolve(parse_spec({"verdict": verdict})).checks_rest

    assert plan(symptom="itl", strategy="twolevel")
    assert plan(symptom="itl", strategy="sequential")
    assert plan(symptom="itl", strategy="changepoint")
    assert plan(symptom="itl")   # auto: a noise-aware test
    assert not plan(symptom="itl", strategy="twolevel", rest_check=False)
    assert not plan(symptom="itl", strategy="threshold", itl_factor=1.2)
    assert not plan(symptom="length")
