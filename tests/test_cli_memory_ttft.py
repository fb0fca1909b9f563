"""The memory and TTFT symptoms bisected end to end through the real CLI, on generated
histories whose commits change the start-up memory, the start itself (out of memory) and the
prefill time (the simulator logs and paces what each commit's source says)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from tests.test_cli import cli


def _run(tmp_path: Path, h_kw: dict[str, object], **over: dict[str, object]) -> tuple[
        dict[str, object], dict[str, str]]:
    h = history(tmp_path, **h_kw)
    spec = write_spec(tmp_path / "s.toml", make_spec(h, **over))
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"),
            "--cache-dir", str(tmp_path / "cache"), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), h.planted


def test_memory_symptom_finds_the_commit_that_shrinks_the_kv_cache(tmp_path: Path) -> None:
    doc, planted = _run(tmp_path, {"n_commits": 10, "memory_at": 6},
                        serve={"speculative": None}, probe={"max_tokens": 16},
                        verdict={"symptom": "memory", "memory_factor": 1.1})
    assert doc["first_bad"] == planted["memory"]
    bad = [p for p in doc["probed"] if p["verdict"] == "bad"]
    assert bad and all("KV cache tokens" in p["reason"] for p in bad)


def test_an_out_of_memory_start_is_the_memory_symptom_s_bad(tmp_path: Path) -> None:
    doc, planted = _run(tmp_path, {"n_commits": 8, "oom_at": 5},
                        serve={"speculative": None}, probe={"max_tokens": 16},
                        ops={"retries": 0}, verdict={"symptom": "memory"})
    assert doc["first_bad"] == planted["oom"]
    reasons = [p["reason"] for p in doc["probed"] if p["verdict"] == "bad"]
    assert reasons and all("out of memory at start-up" in r for r in reasons)


def test_ttft_symptom_finds_the_slower_prefill_with_the_two_level_test(tmp_path: Path) -> None:
    doc, planted = _run(tmp_path, {"n_commits": 10, "ttft_at": 4, "ttft_factor": 4.0,
                                   "prefill_ms": 15.0, "noise_cv": 0.02},
                        serve={"speculative": None},
                        probe={"max_tokens": 8, "prompt_tokens": 1024},
                        # the search's own verdicts (not the rest check's calibrations)
                        verdict={"symptom": "ttft", "ttft_factor": 2.0, "rest_check": False,
                                 "strategy": "twolevel"})
    assert doc["first_bad"] == planted["ttft"]
    # the search's steps (the endpoints carry the calibration's reason)
    judged = [p["reason"] for p in doc["probed"] if p["verdict"] in ("good", "bad")
              and p["commit"] not in (doc["good"], doc["bad"])]
    assert judged and all(r.startswith("two-level") and "ttft median" in r for r in judged)
