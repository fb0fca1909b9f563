"""The rest check (bisect/rest.py, issue 28): from the servers the search ran, futility
("the culprit explains the effect"), and a cap on its own server starts with the command that
checks further; on virtual time (the real Driver, policies and loop)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bisect.test_multi import named, run, spec
from vllm_bisect.sim.virtual_steps import steps_scenario
from vllm_bisect.verdict.twolevel import calibration_step

ONE_STEP = steps_scenario(32, ((13, 1.3),), cv=0.10, server_cv=0.05)
# the H200 source bisect's noise (docs/validation.md (j)): a 2x step, request CV 6%, server
# level 10%, the smallest change that matters 5%: the rest cannot be settled in a few servers
H200_LIKE = steps_scenario(32, ((13, 2.0),), cv=0.06, server_cv=0.10)


def test_one_step_costs_few_starts_beyond_the_search(tmp_path: Path) -> None:
    """The same draws with and without the rest check: the first search is the same, so the
    difference is what the rest checks started (before: ~8 a run, docs/benchmarks.md)."""
    m, with_ = run(spec(["itl"]), ONE_STEP, tmp_path / "a")
    _, without = run(spec(["itl"], rest_check=False), ONE_STEP, tmp_path / "b")
    assert named(m, ONE_STEP, "itl") == {13}
    assert with_.starts - without.starts <= 2, (with_.starts, without.starts)
    (c,) = m.culprits
    assert c.note.count("no, the culprit explains the effect") == 2, c.note


def test_no_fresh_server_decides_from_the_searchs_servers_alone(tmp_path: Path) -> None:
    m, with_ = run(spec(["itl"], rest_servers=0), ONE_STEP, tmp_path / "a")
    _, without = run(spec(["itl"], rest_check=False), ONE_STEP, tmp_path / "b")
    assert with_.starts == without.starts
    assert "rest check" in m.culprits[0].note


def test_a_rest_the_cap_cannot_settle_says_so_in_one_line(tmp_path: Path) -> None:
    """At the H200's spread (server-level CV ~10%) "explained" needs ~20 servers an end at
    the default smallest change (5%): the check stops as soon as its numbers show that, and
    its note is one short line with the servers it would take and the command (issue 42:
    ~900 characters with a placeholder path; issue 40: the session's own spec path)."""
    m, with_ = run(spec(["itl"], itl_factor=1.05), H200_LIKE, tmp_path / "a")
    _, without = run(spec(["itl"], itl_factor=1.05, rest_check=False), H200_LIKE,
                     tmp_path / "b")
    assert named(m, H200_LIKE, "itl") == {13}
    (c,) = m.culprits
    notes = c.note.split("; rest check")
    assert len(notes) == 2, c.note
    for n in notes:
        assert len(n) < 330, n
        assert "`vllm-bisect run --spec SPEC --good " in n, n
        assert "SESSION/spec.toml" not in n
    assert any("servers an end would settle it" in n for n in notes), c.note
    assert with_.starts - without.starts < 2 * 8, (with_.starts, without.starts)


def test_the_calibration_step_tells_the_rest_check_its_numbers() -> None:
    same = [(0.0, 0.01), (0.02, -0.01), (0.01, 0.0)]
    step = calibration_step(same, [(0.005, 0.0), (0.01, 0.02), (-0.01, 0.0)],
                            min_change=0.14)
    assert not step.separated and step.p_matters < 0.01
    apart = calibration_step(same, [(0.3, 0.31), (0.29, 0.3), (0.32, 0.3)], min_change=0.14)
    assert apart.separated and apart.p_matters > 0.99


def test_the_culprits_verification_servers_count_in_the_check(tmp_path: Path) -> None:
    """verify_samples re-measures the culprit on fresh servers after the search (the rest
    checks follow: those are the pair's only servers no verdict chose): the bad end's check
    starts from them beside the search's."""
    m, _ = run(spec(["itl"], verify_samples=10, rest_servers=0), ONE_STEP, tmp_path)
    (c,) = m.culprits
    v = m.result.verification
    assert c.commit is not None and v is not None and v.culprit == c.commit
    assert v.source == "fresh" and v.culprit_servers
    # the two-level test chose the requests per server: none was "asked for" (issue 42:
    # "samples: 10" beside arrays of 2)
    assert v.samples == 0
    searched = m.result.evaluations[c.commit].samples
    assert searched
    bad_end = c.note.split("; rest check")[0]
    servers = re.search(r"(\d+) \+ (\d+) servers", bad_end)
    assert servers is not None, bad_end
    assert int(servers[1]) == len(searched) + len(v.culprit_servers), bad_end


def test_without_rest_checks_the_confirmation_is_the_verification(tmp_path: Path) -> None:
    """issue 40: no rest check follows, and the search judged the pair at the whole-bisect
    bound: no fresh server re-measures it (before: 2 starts, the same verdicts)."""
    m, _ = run(spec(["itl"], verify_samples=10, rest_check=False), ONE_STEP, tmp_path)
    (c,) = m.culprits
    v = m.result.verification
    assert v is not None and v.culprit == c.commit and v.confirmed
    assert v.source == "confirmation" and v.samples == 0
    assert v.culprit_servers == m.result.evaluations[v.culprit].samples
    assert m.result.starts_by_phase.get("verify", 0) == 0
