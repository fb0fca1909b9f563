"""The effect at the culprit with its interval, and what the interval rests on, on every path
a culprit is reported by (issue 50 item 3): through `vllm-bisect run` on generated histories
served by the simulator, read from result.json's ``effects``, report.md and the terminal's
``effect:`` line. (The two-level default's fresh verification and its confirmation path:
tests/bisect/test_cost_phases.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import history, make_spec, write_spec

LINE = "Effect at the first bad commit vs its parent: "


def run(tmp: Path, plan: dict[str, Any], verdict: dict[str, Any],
        probe: dict[str, Any] | None = None) -> tuple[dict[str, Any], str, str]:
    """One ``vllm-bisect run``: result.json, report.md and stdout."""
    h = history(tmp, **plan)
    spec = write_spec(tmp / "spec.toml", make_spec(h, verdict=verdict, probe=probe or {}))
    session = tmp / "sess"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(session), "--cache-dir", str(tmp / "cache")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] in h.planted.values(), doc["first_bad"]
    return doc, (session / "report.md").read_text(), " ".join(r.stdout.split())


def led(doc: dict[str, Any], md: str, out: str) -> dict[str, Any]:
    """The bisected symptom's effect, the same in result.json, report.md and the terminal."""
    effects = doc["effects"]
    assert effects, doc.get("verification")
    e = effects[0]
    assert LINE + e["text"] in md, md
    assert "effect: " + e["text"] in out, out
    return e


def test_a_cap_verified_by_its_rechecks_is_the_same_on_every_request(tmp_path: Path) -> None:
    """auto's default on a cap: the parent's re-checks and the culprit's run are the
    verification (no fresh server). Before: "no CI from 3 vs 1 requests"; a cap with no spread
    on either side is its own evidence, said with the requests and servers."""
    doc, md, out = run(tmp_path, {"n_commits": 12, "cap_at": 7},
                       {"symptom": "length", "intermittent_runs": 3})
    assert doc["verification"]["source"] == "rechecks"
    e = led(doc, md, out)
    assert e["metric"] == "output tokens" and e["interval"] == "exact", e
    assert e["ci_low"] == e["ci_high"] == e["change"] and e["servers_before"] == 3, e
    assert ("the same on every request: 160 on each of the parent's 3 requests on 3 servers, "
            "128 on each of the culprit's 1 request; no spread, so no interval to give); the "
            "search's runs and its re-checks (a deterministic cap: no fresh server)") in e["text"]
    assert "no CI" not in md


def test_a_fresh_verification_says_verify_samples(tmp_path: Path) -> None:
    """threshold (one run per commit, then the culprit and its parent on fresh servers with
    verify_samples requests each): a cap, every request the same."""
    doc, md, out = run(tmp_path, {"n_commits": 12, "cap_at": 7},
                       {"symptom": "length", "verify_samples": 6})
    assert doc["verification"]["source"] == "fresh" and doc["strategy_chosen"] == "threshold"
    e = led(doc, md, out)
    assert e["interval"] == "exact" and (e["requests_before"], e["requests_after"]) == (6, 6)
    assert "160 on each of the parent's 6 requests, 128 on each of the culprit's 6 requests" \
        in e["text"] and "re-measured on fresh servers (verify_samples = 6)" in e["text"], e


ITL_PLAN = {"n_commits": 8, "slow_at": 5, "slow_factor": 2.0, "step_ms": 5.0, "noise_cv": 0.05}
ITL_PROBE = {"max_tokens": 40, "requests": 1}
NO_REST = {"rest_check": False}   # (the rest checks' servers: not what these tests are about)


def test_a_sequential_verification_gives_a_bootstrap_interval(tmp_path: Path) -> None:
    doc, md, out = run(tmp_path, ITL_PLAN, {"symptom": "itl", "strategy": "sequential", **NO_REST},
                       ITL_PROBE)
    e = led(doc, md, out)
    assert e["metric"] == "ITL" and e["interval"] == "bootstrap", e
    assert e["ci_low"] is not None and 0 < e["ci_low"] < e["change"] < e["ci_high"], e
    assert "95% bootstrap CI over 10 requests a side on one server each); re-measured on fresh" \
        " servers (verify_samples = 10)" in e["text"], e


@pytest.mark.parametrize("verdict,why", [
    ({"strategy": "changepoint"}, "the model of the range judged the pair"),
    ({"strategy": "sequential", "verify_samples": 0}, "verify_samples = 0")])
def test_without_a_verification_the_search_samples_say_why(
        tmp_path: Path, verdict: dict[str, Any], why: str) -> None:
    """No verification (the model of the range; verify_samples = 0): the effect from the
    search's samples, saying there was none and why."""
    doc, md, out = run(tmp_path, ITL_PLAN, {"symptom": "itl", **verdict, **NO_REST}, ITL_PROBE)
    assert doc["verification"] is None
    e = led(doc, md, out)
    assert e["metric"] == "ITL" and e["interval"] in ("bootstrap", "none"), e
    assert f"samples taken during the search (no verification: {why})" in e["text"], e
    servers = f"on {e['servers_before']} vs {e['servers_after']} servers"
    assert "on one server each" in e["text"] or servers in e["text"] or "servers a side" \
        in e["text"], e
