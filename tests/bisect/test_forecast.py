"""The forecast made before the search: the model (pure), and through the real driver and CLI
(a phase line, predicted against actual in result.json)."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import BisectResult, Driver
from vllm_bisect.bisect.forecast import (
    Forecast,
    bayes_runs,
    predict,
    predict_bayes,
    run_capacity,
    twolevel_step,
)
from vllm_bisect.bisect.forecast_spread import CapPlan, bayes_costs, cap_costs, spread
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.sim.virtual import Scenario, VirtualCluster, commit_range, scenario
from vllm_bisect.spec import BisectSpec, parse_spec


def test_a_threshold_search_is_one_server_per_step_plus_the_rechecks() -> None:
    f = predict(64, "threshold", requests=3, rechecks=1)
    assert f is not None
    assert (f.steps, f.builds, f.server_starts, f.requests) == (6, 6.0, 7.0, 21.0)
    assert predict(64, "bayes") is None  # no model: no forecast


def forecast_itl(tmp: Path, seed: int, effect: float, cv: float, server_cv: float
                 ) -> tuple[Scenario, BisectSpec, BisectResult, Forecast | None]:
    """A virtual-time bisect of an ITL step under auto (the model of the range): the
    scenario, the spec, the result and the first forecast the driver printed."""
    logging.disable(logging.WARNING)
    s = scenario(random.Random(seed), symptom="itl", effect=effect, cv=cv,
                 server_cv=server_cv, max_skip=0.0)
    rng = commit_range(s.n)
    sp = parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                     "verdict": {"symptom": "itl"}})
    cluster = VirtualCluster(s, rng, 1, random.Random(seed + 1), first_batch=sp.probe.requests)
    journal = SessionJournal(tmp)
    try:
        driver = Driver(sp, rng, cluster, journal, None)
        result = driver.run()
    finally:
        journal.close()
        logging.disable(logging.NOTSET)
    return s, sp, result, driver.forecaster.first


def test_the_model_of_the_range_is_forecast_as_one_server_a_step(tmp_path: Path) -> None:
    f = predict(64, "changepoint", requests=5.0)
    assert f is not None
    assert (f.steps, f.builds, f.server_starts, f.requests) == (6, 6.0, 6.0, 30.0)
    # through the driver, auto on itl (the model): a clean 2x step
    s, sp, result, f = forecast_itl(tmp_path, 3, 2.0, 0.03, 0.02)
    assert result.strategy_chosen == "changepoint" and f is not None
    assert f.steps == (s.n - 1).bit_length() and f.server_starts == f.steps
    assert f.requests >= f.steps * sp.probe.requests
    searched = result.starts_by_phase.get("search", 0)
    assert f.server_starts - 2 <= searched <= f.server_starts + 2, (searched, f)


def test_the_model_of_the_range_is_forecast_with_the_requests_its_search_servers_run(
        tmp_path: Path) -> None:
    # no server-level spread: the model sizes a search server at ~10 requests (the two-stage
    # optimum over the spreads the ends show) where the ends' own servers ran 3-4; the
    # forecast took the ends' count and forecast 0.64x the wall (bench_accuracy, session 24)
    _, sp, result, f = forecast_itl(tmp_path, 5, 1.3, 0.10, 0.0)
    assert result.strategy_chosen == "changepoint" and f is not None
    ends = {result.range.good.sha, result.range.bad.sha}
    ran = [len(o.measurement.requests) for o in result.probed
           if o.commit not in ends and o.measurement is not None]
    per_server = sum(ran) / len(ran)
    assert per_server > 2 * sp.probe.requests     # (the case: search servers run more)
    assert 0.67 <= (f.requests / f.server_starts) / per_server <= 1.5, (f, per_server)

def test_a_bayesian_search_takes_the_bits_left_over_what_a_run_tells() -> None:
    assert run_capacity(1.0, 0.0) == pytest.approx(1.0)  # a deterministic run: one bit
    assert run_capacity(0.5, 0.0) == pytest.approx(0.32, abs=0.01)  # the Z channel's
    # 9 bits and the odds of 0.99 (6.6 bits) at q = 0.5: about 49 runs; fewer at q = 0.7
    assert 45 < bayes_runs(9.0, 0.5, 0.0, 0.99) < 52
    assert bayes_runs(9.0, 0.7, 0.0, 0.99) < bayes_runs(9.0, 0.5, 0.0, 0.99)
    f = predict_bayes(512, 9.0, 0.5, 0.0, requests=3, max_runs=30)
    assert f.server_starts == 30 and f.requests == 90 and f.builds <= 30


def test_a_wider_gap_takes_fewer_requests_and_a_server_level_more_servers() -> None:
    wide = twolevel_step([[10.0, 10.5, 9.5]] * 2, [[20.0, 20.5, 19.5]] * 2, 3.0)
    narrow = twolevel_step([[10.0, 10.5, 9.5]] * 2, [[11.0, 11.5, 10.5]] * 2, 3.0)
    assert wide == (1.0, 1.0) and narrow[1] > wide[1]
    levels = twolevel_step([[9.0, 9.1], [11.0, 11.1]], [[12.0, 12.1], [14.0, 14.1]], 3.0)
    assert levels[0] > 1.0  # the servers differ more than the requests: more servers


def test_hours_and_what_more_gpus_save() -> None:
    f = Forecast(10, 10.0, 12.0, 30.0, elapsed_s=600.0, build_s=300.0, start_s=180.0,
                 request_s=60.0)
    assert f.hours() == (600 + 3000 + 2160 + 1800) / 3600
    two, four = f.hours_with(2, 1024), f.hours_with(4, 1024)
    assert two is not None and four is not None
    assert four < two < (f.hours() or 0)
    assert "4 GPUs" in f.line(1024) and "h in all" in f.line(1024)
    assert Forecast(1, 1.0, 1.0, 1.0).hours() is None  # no times measured: counts only


def test_a_build_the_clock_cannot_tell_from_zero_reads_under_a_millisecond() -> None:
    """The build's time is the endpoints' wall less their start and requests: a cached build
    leaves a residue at or below zero (clipped to 0.0), which read "0 s a build" (issue 50
    item 8; it failed tests/report/test_wording.py under load)."""
    f = Forecast(5, 5.0, 5.0, 15.0, elapsed_s=2.0, build_s=0.0, start_s=0.4, request_s=0.0003)
    line = f.line(32)
    assert "under 1 ms a build, 0.4 s a server start, under 1 ms a request" in line, line
    assert "0 s a" not in line


def test_a_cap_that_may_be_flaky_is_forecast_as_a_threshold_search_with_a_bayes_tail() -> None:
    # 512 commits: 9 search steps + 2 re-checks when deterministic (2 of 3 after the bad
    # endpoint's first run showed the cap); a flaky one found out at the re-checks costs a
    # Bayesian search on top: the median stays the deterministic cost, the range holds both
    costs = cap_costs(512, CapPlan(requests=3, rechecks=2))
    s = spread(costs)
    assert s.median.starts == 11 and s.median.builds == 9 and s.median.requests == 33
    assert s.low.starts <= 11 and s.high.starts >= 3 * 11
    assert 0.6 <= sum(c.starts <= 12 for c in costs) / len(costs) < 0.9
    # no re-checks: nothing can switch to bayes, so no tail (the lazy good endpoint at most)
    flat = spread(cap_costs(512, CapPlan(requests=3, rechecks=0)))
    assert flat.high.starts <= 10
    assert cap_costs(512, CapPlan(3, 2)) == costs  # seeded: the same forecast every time


def test_a_bayesian_forecasts_range_narrows_as_the_runs_pin_q_down() -> None:
    def width(shown: int, missed: int) -> float:
        s = spread(bayes_costs(512, 9.0, shown, missed, 0.0, CapPlan(3, 2)))
        return s.high.starts / s.low.starts
    assert width(2, 1) > width(20, 10) > 1.0


@pytest.mark.parametrize("seed", [1, 7])
def test_a_flaky_cap_found_out_at_the_rechecks_lands_in_the_first_forecasts_range(
        seed: int, tmp_path: Path) -> None:
    # the simulator's flaky cap (q = 0.7): the bad endpoint showed it first, the threshold
    # search ran, a re-check of the culprit's parent showed it and auto switched to bayes
    logging.disable(logging.WARNING)
    s = scenario(random.Random(seed), symptom="length", effect=1.0, max_skip=0.0, cap_q=0.7)
    rng = commit_range(s.n)
    sp = parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                     "probe": {"max_tokens": 256},
                     "verdict": {"symptom": "length", "verify_samples": 0}})
    cluster = VirtualCluster(s, rng, 1, random.Random(seed + 1))
    journal = SessionJournal(tmp_path)
    try:
        driver = Driver(sp, rng, cluster, journal, None)
        result = driver.run()
    finally:
        journal.close()
        logging.disable(logging.NOTSET)
    first = driver.forecaster.first
    assert result.strategy_chosen == "bayes" and first is not None and first.high is not None
    assert result.first_forecast is first and result.forecast is not first  # made again
    searched = cluster.starts - first.starts_done
    assert searched > 1.5 * first.server_starts  # the point: the deterministic branch
    assert first.server_starts <= searched <= first.high[1]  # the range holds the switch


def test_the_range_is_printed_and_kept_beside_the_forecast() -> None:
    f = Forecast(10, 10.0, 12.0, 36.0, elapsed_s=600.0, build_s=300.0, start_s=180.0,
                 request_s=60.0, low=(10.0, 12.0, 36.0), high=(30.0, 60.0, 180.0))
    span = f.hours_range()
    assert span is not None and span[0] == f.hours() and span[1] > 2 * span[0]
    assert "likely; 90% range 12..60 server starts" in f.line(1024)
    d = f.as_dict()
    assert (d["server_starts_low"], d["server_starts"], d["server_starts_high"]) == (12, 12, 60)
    assert d["hours_low"] == d["hours"] and d["hours_high"] == round(span[1], 4)
    assert "server_starts_low" not in Forecast(1, 1.0, 1.0, 1.0).as_dict()


def test_the_cli_prints_the_forecast_and_result_json_holds_it_against_the_actual(
        tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=16, cap_at=9)
    spec = make_spec(h, verdict={"symptom": "length", "intermittent_runs": 8,
                                 "verify_samples": 0})
    session = tmp_path / "sess"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec",
                        str(write_spec(tmp_path / "s.toml", spec)), "--session", str(session),
                        "--cache-dir", str(tmp_path / "cache"), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "forecast: 4 search steps" in r.stderr and "90% range" in r.stderr
    doc = json.loads((session / "result.json").read_text())
    f = doc["forecast"]
    # a deterministic cap without skips: the bad endpoint + 4 steps + 2 re-checks, as foreseen
    assert f["predicted"]["server_starts"] == f["actual"]["server_starts"] == 7
    assert f["predicted"]["hours"] is not None and f["actual"]["hours"] > 0
    # the range holds what a flaky cap would cost (auto would switch to bayes)
    assert f["predicted"]["server_starts_low"] <= 7 < f["predicted"]["server_starts_high"]
    assert f["first"] == f["predicted"]  # no switch: the first forecast is the latest
