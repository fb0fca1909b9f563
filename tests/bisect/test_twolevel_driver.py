"""The default spec on a noisy ITL regression through the real driver, servers and probe: a
history whose every server start has its own speed level (the simulator's server_cv)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Verdict
from vllm_bisect.sim.history import sim_path


def test_default_spec_finds_a_slowdown_under_server_level_noise(tmp_path: Path) -> None:
    # per-request noise 5%, server level 5% per start; the culprit makes steps 2x slower.
    # The two-level test written (auto: the model of the range under run, on one worker or k,
    # and under the hook; twolevel in the studies). 8 ms steps and 96 tokens (~0.25 s a
    # request): at 4 ms and 48 tokens (~60 ms) a loaded machine's scheduling delays were a
    # large part of a request, and in a full run the culprit went undecided (session 29)
    h = history(tmp_path, n_commits=6, slow_at=4, slow_factor=2.0, step_ms=8.0, noise_cv=0.05,
                server_cv=0.05)
    spec = make_spec(h, verdict={"symptom": "itl", "itl_factor": 1.3, "strategy": "twolevel"},
                     probe={"max_tokens": 96, "warmup": 0})
    assert spec.verdict.strategy == "twolevel"
    r = run_driver(spec, tmp_path)
    judged = [(o.commit[:8], o.verdict.value, o.reason) for o in r.probed]
    assert r.first_bad == h.planted["itl"], (h.planted["itl"][:8], judged)
    # verified on fresh servers by the same test: culprit bad, parent good
    assert r.verification is not None and r.verification.confirmed
    assert r.strategy_chosen == "twolevel" and "was written" in r.strategy_reason
    good = next(o for o in r.probed if o.commit == h.good)
    bad = next(o for o in r.probed if o.commit == h.bad)
    assert good.verdict is Verdict.GOOD and bad.verdict is Verdict.BAD
    for sha in (h.good, h.bad):  # every endpoint server's samples are kept
        servers = r.evaluations[sha].samples
        assert isinstance(servers, list) and len(servers) >= 1
    steps = [o for o in r.probed if o.commit not in (h.good, h.bad)]
    assert steps and all(o.verdict is not Verdict.SKIP for o in steps)
    assert all(o.reason.startswith("two-level") for o in steps)


def test_default_spec_refuses_below_the_smallest_change_that_matters(tmp_path: Path) -> None:
    # a 1.05x change where 1.5x is the smallest that matters: refused, both distributions shown
    h = history(tmp_path, n_commits=3, slow_at=2, slow_factor=1.05, step_ms=4.0, noise_cv=0.02)
    spec = make_spec(h, verdict={"symptom": "itl", "itl_factor": 1.5, "verify_samples": 0,
                                                "strategy": "twolevel"},
                     probe={"max_tokens": 48, "warmup": 0})
    with pytest.raises(NotReproduced, match="smallest change that matters") as e:
        run_driver(spec, tmp_path)
    assert "good itl" in e.value.message and "bad n=" in e.value.message


def seeded_serve(tmp: Path, seeds: str) -> str:
    """A serve command whose k-th start of a commit passes the k-th seed: each server
    start's level (the simulator's server_cv) is drawn from it, the same in every run (the
    MTP speed-up's server without speculation is a start too)."""
    marks = tmp / "starts"
    marks.mkdir()
    return (f"n=$(cat {marks}/{{commit}} 2>/dev/null || echo 0); "
            f"echo $((n + 1)) > {marks}/{{commit}}; set -- {seeds}; "
            f"shift $((n % {len(seeds.split())})); "
            f"PYTHONPATH=. VLLM_BISECT_SIM_PATH={sim_path()} exec {sys.executable} "
            "-m vllm.entrypoints.cli.main serve {model} --port {port} --seed $1 {speculative}")


@pytest.mark.parametrize("symptom", ["throughput", "mtp-speedup"])
def test_default_spec_bisects_throughput_and_mtp_speedup_under_server_level_noise(
        tmp_path: Path, symptom: str) -> None:
    # every server start has its own speed level (5% CV, seeded per start); throughput: the
    # culprit makes steps 3x slower; mtp-speedup: the culprit drops draft acceptance to 0.1.
    # The two-level test written (one sample per server; auto runs the model, tests below).
    plan: dict[str, Any] = ({"slow_at": 3, "slow_factor": 3.0} if symptom == "throughput"
                            else {"low_acceptance_at": 3})
    h = history(tmp_path, n_commits=5, step_ms=4.0, server_cv=0.05, **plan)
    probe: dict[str, Any] = {"max_tokens": 32, "warmup": 0}
    verdict: dict[str, Any] = {"symptom": symptom, "verify_samples": 0, "strategy": "twolevel"}
    if symptom == "throughput":
        probe["load"] = {"concurrency": 2, "requests": 4, "max_tokens": 32}
        verdict["throughput_factor"] = 1.5
    else:
        probe["mtp_speedup"] = {"concurrency": 1, "requests": 2, "max_tokens": 48}
        verdict["min_mtp_speedup"] = 1.5
    spec = make_spec(h, build={"kind": "command", "serve": seeded_serve(
        tmp_path, "11 3 7 19 5 2 13 17")}, probe=probe, verdict=verdict)
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "twolevel" and "was written" in r.strategy_reason
    assert r.first_bad == h.planted["itl" if symptom == "throughput" else "mtp-speedup"]
    for sha in (h.good, h.bad):  # calibrated on several servers per endpoint (one sample each)
        servers = r.evaluations[sha].samples
        assert isinstance(servers, list) and all(len(g) == 1 for g in servers)
    steps = [o for o in r.probed if o.commit not in (h.good, h.bad)]
    assert steps and all(o.reason.startswith("two-level") for o in steps)


def test_the_model_of_the_range_bisects_throughput(tmp_path: Path) -> None:
    """``strategy = "changepoint"``: one sample (output tok/s) a server, every server start at
    its own speed level (5% CV)."""
    h = history(tmp_path, n_commits=5, step_ms=4.0, server_cv=0.05, slow_at=3, slow_factor=3.0)
    spec = make_spec(h, build={"kind": "command", "serve": seeded_serve(
        tmp_path, "11 3 7 19 5 2 13 17")},
        probe={"max_tokens": 32, "warmup": 0,
               "load": {"concurrency": 2, "requests": 4, "max_tokens": 32}},
        verdict={"symptom": "throughput", "throughput_factor": 1.5, "strategy": "changepoint"})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "changepoint"
    assert r.first_bad == h.planted["itl"]
    assert r.model is not None and r.model.p >= 0.99 and r.model.effect < 1 / 1.5
    assert r.verification is None    # its P is the evidence: no verification phase


def test_the_default_spec_bisects_mtp_speedup_with_the_model_of_the_range(tmp_path: Path) -> None:
    """No strategy written (auto): a lost MTP speed-up (the culprit drops draft acceptance to
    0.1) is one sample a server for the model of the range, every start at its own level."""
    h = history(tmp_path, n_commits=5, step_ms=4.0, server_cv=0.05, low_acceptance_at=3)
    spec = make_spec(h, build={"kind": "command", "serve": seeded_serve(
        tmp_path, "11 3 7 19 5 2 13 17")},
        probe={"max_tokens": 32, "warmup": 0,
               "mtp_speedup": {"concurrency": 1, "requests": 2, "max_tokens": 48}},
        verdict={"symptom": "mtp-speedup", "min_mtp_speedup": 1.5, "verify_samples": 0})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "changepoint" and r.strategy_reason.startswith("auto:")
    assert r.first_bad == h.planted["mtp-speedup"]
    assert r.model is not None and r.model.p >= 0.99 and r.model.effect < 1
