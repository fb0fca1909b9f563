"""Multi-symptom tables, flips, and the follow-up bisect they suggest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.symptoms import Screen
from vllm_bisect.verdict import symptoms

SCREEN = Screen(min_tokens=512, itl_factor=2.0)


def p(i: int, out: int, itl: float, verdict: str = "good", sha: str | None = None) -> dict[str, Any]:
    return {"commit": sha or f"{i:040x}", "index": i, "verdict": verdict, "reason": "",
            "measurement": {"output_tokens": [out], "itl_ms": itl, "acceptance_length": 3.0}}


def test_flips_same_and_different_commits() -> None:
    probed = [p(0, 512, 1.0, sha="g" * 40), p(4, 512, 1.0), p(6, 128, 3.0, "bad"),
              p(5, 128, 3.1, "bad"), p(9, 128, 3.0, "bad")]
    rows = symptoms.table(probed, "g" * 40, SCREEN)
    fl = {f.symptom: f for f in symptoms.flips(rows)}
    assert fl["length"].exact and fl["length"].first_with == 5
    assert fl["itl"].exact and symptoms.same_root(list(fl.values()))
    probed[3] = p(5, 128, 1.0, "bad")  # ITL rises only at 6
    fl2 = symptoms.flips(symptoms.table(probed, "g" * 40, SCREEN))
    assert not symptoms.same_root(fl2)
    crash = {"commit": "c" * 40, "index": 7, "verdict": "skip", "measurement": None,
             "reason": "ServeError: server exited with code 1"}
    assert symptoms.table([*probed, crash], "g" * 40, SCREEN)[7]["crash"] is True


def test_two_symptoms_at_different_commits_and_the_follow_up(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=16, cap_at=6, slow_at=11, slow_factor=4.0, step_ms=5.0)
    # follows length; three requests a server, the least the model of the range (auto's
    # follow-up on itl) takes from a cached measurement
    spec = write_spec(tmp_path / "s.toml", make_spec(h, probe={"requests": 3}))
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(tmp_path / "cache")}
    run = [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--json"]
    r = subprocess.run([*run, "--session", str(tmp_path / "s1")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["first_bad"] == h.planted["length"]
    md = (tmp_path / "s1" / "report.md").read_text()
    assert "`length` flips at commit #6" in md
    # the itl column is a screen (one measurement a commit): its flip names no cause
    assert "`itl` flips between #8 and #16 (a screen, one measurement a commit: not a verdict)" \
        in md, md
    assert "cause" not in md.split("Symptoms at each judged commit", 1)[1].split("###")[0]
    assert "--symptom itl --itl-factor 1.5" in md
    r2 = subprocess.run([*run, "--session", str(tmp_path / "s2"), "--symptom", "itl",
                         "--itl-factor", "1.5"], capture_output=True, text=True, timeout=300,
                        env=env)
    assert r2.returncode == 0, r2.stderr
    doc = json.loads(r2.stdout)
    assert doc["first_bad"] == h.planted["itl"]
    assert doc["strategy_chosen"] == "changepoint"  # (auto: the itl follow-up)
    assert any(pr["from_cache"] for pr in doc["probed"])   # the length run's servers


def test_correctness_compares_outputs_of_the_same_length() -> None:
    from vllm_bisect.models import Measurement, RequestResult, TokensSource
    from vllm_bisect.spec import Symptom, VerdictSpec
    from vllm_bisect.verdict.judge import Judge

    def m(*reqs: tuple[int, str]) -> Measurement:
        rs = [RequestResult(output_tokens=n, finish_reason="length", ttft_ms=1, latency_ms=1,
                            itl_ms=1, chunk_itl_ms=1, tpot_ms=1, n_chunks=n, tokens_per_chunk=1,
                            tokens_source=TokensSource.USAGE, text_sha256=t) for n, t in reqs]
        return Measurement(endpoint="completions", model="m", requested_tokens=80,
                           min_output_tokens=80, output_tokens=[n for n, _ in reqs], length_ok=True,
                           itl_ms=1, chunk_itl_ms=1, tokens_per_chunk=1, ttft_ms=1, tpot_ms=1,
                           finish_reasons=["length"], tokens_source=TokensSource.USAGE,
                           requests=rs)

    j = Judge(VerdictSpec(symptom=Symptom.CORRECTNESS), 80).with_reference(m((80, "x"), (80, "x")))
    assert j.judge(m((80, "x"), (80, "x"))).verdict.value == "good"
    assert j.judge(m((80, "x"), (80, "y"))).verdict.value == "bad"
    assert j.judge(m((64, "z"))).verdict.value == "skip"  # another length: not comparable
