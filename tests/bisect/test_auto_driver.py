"""verdict.strategy = "auto" through the real driver: a cap that shows in some runs only
goes to bayes, one that shows in every run stays with the threshold strategy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.errors import NotReproduced
from vllm_bisect.sim.history import sim_path

# the k-th server start of a commit uses the k-th seed; with cap_probability 0.5 the
# simulator caps a server's first request when Random(seed).random() < 0.5: seeds 2, 5, 6,
# 10, 15 do not cap, 1, 3, 4, 7, 8 do. Every commit's first start does not.
SEEDS = "2 1 5 3 6 4 10 7 15 8"


def seeded_serve(tmp: Path) -> str:
    marks = tmp / "starts"
    marks.mkdir()
    return (f"n=$(cat {marks}/{{commit}} 2>/dev/null || echo 0); "
            f"echo $((n + 1)) > {marks}/{{commit}}; set -- {SEEDS}; shift $((n % 10)); "
            f"PYTHONPATH=. VLLM_BISECT_SIM_PATH={sim_path()} exec {sys.executable} "
            "-m vllm.entrypoints.cli.main serve {model} --port {port} --seed $1 "
            """--speculative-config '{{"method": "mtp", "num_speculative_tokens": 3}}'""")


def test_auto_goes_bayes_when_the_bad_endpoint_shows_the_cap_in_some_runs_only(
        tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=3, cap_probability=0.5)
    spec = make_spec(h, build={"kind": "command", "serve": seeded_serve(tmp_path)},
                     verdict={"symptom": "length", "verify_samples": 0, "confidence": 0.9,
                              "intermittent_runs": 4})
    assert spec.verdict.strategy == "auto"
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "bayes" and "some runs only" in r.strategy_reason
    assert r.first_bad == h.planted["length"]
    bad_runs = [o for o in r.probed if o.commit == h.bad]
    assert len(bad_runs) >= 4 and bad_runs[0].verdict.value == "good"  # the first run missed
    # the forecast of the Bayesian search (there was none before a threshold step)
    assert r.forecast is not None and r.forecast.server_starts >= 1


def test_a_bad_endpoint_whose_first_run_shows_the_cap_is_not_run_again(tmp_path: Path) -> None:
    # every commit's first start caps (seed 1), its second does not (seed 5): the bad endpoint
    # runs once, the threshold search is right, the parent's re-check (seed 5) misses as a
    # good commit does: kept deterministic, at plain bisect's cost plus the endpoints and
    # the re-checks (the flaky symptom the search could not see is the price)
    h = history(tmp_path, n_commits=4, cap_at=3, cap_probability=0.5)
    serve = seeded_serve(tmp_path).replace(SEEDS, "1 5 3 6 4 10 7 15 8 2")
    spec = make_spec(h, build={"kind": "command", "serve": serve},
                     verdict={"symptom": "length", "verify_samples": 0, "confidence": 0.9,
                              "intermittent_runs": 4})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "threshold" and "deterministic" in r.strategy_reason
    assert r.first_bad == h.planted["length"]
    assert len([o for o in r.probed if o.commit == h.bad and not o.from_cache]) == 1


def test_auto_keeps_the_threshold_search_when_the_culprits_parent_never_shows_the_cap(
        tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=3)
    spec = make_spec(h, verdict={"symptom": "length", "verify_samples": 0,
                                 "intermittent_runs": 3, "recheck_runs": 2})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "threshold" and r.first_bad == h.planted["length"]
    assert "missed it in 2 more runs: deterministic" in r.strategy_reason
    fresh_bad = [o for o in r.probed if o.commit == h.bad and not o.from_cache]
    assert len(fresh_bad) == 1 and fresh_bad[0].verdict.value == "bad"
    parent = h.shas[h.shas.index(h.planted["length"]) - 1]
    parent_runs = [o for o in r.probed if o.commit == parent and not o.from_cache]
    assert len(parent_runs) == 1 + 2 and all(o.verdict.value == "good" for o in parent_runs)


def test_the_lazy_good_endpoint_runs_only_when_no_commit_was_judged_good(
        tmp_path: Path) -> None:
    # the cap from the first commit of the range on: every search step judges bad, so the
    # answer stands on the good endpoint, run (and checked) after the search; no re-check (a
    # good endpoint cannot hide a flaky symptom)
    h = history(tmp_path, n_commits=8, cap_at=1)
    spec = make_spec(h, verdict={"symptom": "length", "verify_samples": 0,
                                 "intermittent_runs": 3})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "threshold" and r.first_bad == h.planted["length"] == h.shas[1]
    assert r.probed[0].commit == h.bad and r.probed[-1].commit == h.good
    assert [o.commit for o in r.probed].count(h.good) == 1
    assert r.probed[-1].verdict.value == "good"


def test_a_cap_at_the_good_endpoint_too_is_refused_after_the_search(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8, cap_at=0)
    spec = make_spec(h, verdict={"symptom": "length", "verify_samples": 0,
                                 "intermittent_runs": 3})
    with pytest.raises(NotReproduced, match=r"good endpoint \S+ judged bad"):
        run_driver(spec, tmp_path)
