"""One culprit per symptom and two ITL steps in one range, through the real CLI on generated
histories served by the simulator (issue 28)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.sim.history import History


def run_cli(tmp: Path, h: History, verdict: dict[str, Any], *flags: str
            ) -> subprocess.CompletedProcess[str]:
    spec = write_spec(tmp / "s.toml", make_spec(h, verdict=verdict))
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(tmp / "cache")}
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                           "--session", str(tmp / "s"), *flags], capture_output=True, text=True,
                          timeout=600, env=env)


def culprits(doc: dict[str, Any], symptom: str) -> list[str]:
    return [c["commit"] for c in doc["culprits"]
            if c["symptom"] == symptom and c["commit"] and c["confirmed"]]


def test_two_symptoms_at_two_commits_in_one_run(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12, cap_at=4, slow_at=9, slow_factor=2.0, step_ms=5.0,
                noise_cv=0.02)
    r = run_cli(tmp_path, h, {"symptoms": ["length", "itl"], "itl_factor": 1.3,
                              "verify_samples": 0})
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "s" / "result.json").read_text())
    assert culprits(doc, "length") == [h.planted["length"]]
    assert culprits(doc, "itl") == [h.planted["itl"]]
    # the terminal and report.md name both
    assert h.planted["length"][:12] in r.stdout and h.planted["itl"][:12] in r.stdout
    md = (tmp_path / "s" / "report.md").read_text()
    assert "Culprits, per symptom and step" in md
    assert f"at {h.planted['itl'][:12]}" in md and f"at {h.planted['length'][:12]}" in md
    # the cap's search judged the ITL search's measurements without a server: cached
    assert any(p["from_cache"] for p in doc["probed"])


def test_two_itl_steps_of_1_3x_both_named(tmp_path: Path) -> None:
    # 20 ms steps: a 1.3x step is 6 ms a token, so a loaded CI machine's scheduling delays
    # (tens of ms on a request's last tokens, seen at 5 ms steps: a commit left undecided,
    # two candidates) stay small beside it
    h = history(tmp_path, n_commits=10, slow_at=3, slow_factor=1.3, slow2_at=7,
                slow2_factor=1.3, step_ms=20.0, noise_cv=0.03)
    r = run_cli(tmp_path, h, {"symptom": "itl", "itl_factor": 1.15, "verify_samples": 0,
                              "plateau": True},
                "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(culprits(doc, "itl")) == sorted([h.planted["itl"], h.planted["itl2"]])
    assert doc["first_bad"] in (h.planted["itl"], h.planted["itl2"])
    steps = [c for c in doc["culprits"] if c["confirmed"]]
    assert [c["step"] for c in steps] == [1, 2]
    assert all(c["effect"] and 1.1 < c["effect"] < 1.6 for c in steps), steps
    md = (tmp_path / "s" / "report.md").read_text()
    assert f"at {h.planted['itl'][:12]}" in md and f"at {h.planted['itl2'][:12]}" in md
