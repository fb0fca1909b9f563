"""`vllm-bisect compare`: A/B at one commit, interleaved, paired gain and output identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.compare import paired_gain


def test_paired_gain_interval() -> None:
    gain, lo, hi = paired_gain([100, 102, 98, 101], [129, 131, 127, 130])
    assert 0.28 < gain < 0.30 and lo < gain < hi and lo > 0.25


def test_speculation_on_vs_off(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2, step_ms=3.0)
    spec = write_spec(tmp_path / "s.toml", make_spec(h, probe={"max_tokens": 120, "requests": 1}))
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "compare", "--spec", str(spec),
                        "--b-no-speculative", "--pairs", "6", "--seed", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("a_mean", "b_mean", "gain", "ci_low", "ci_high", "pairs", "identical_outputs"):
        assert key in doc
    assert doc["pairs"] == 6 and doc["identical_outputs"] is True
    # a line a step on stderr, stdout clean for --json (issue 50: 34 s with nothing said)
    for line in ("preparing artifact", "starting server a", "starting server b",
                 "pair 1 of 6", "pair 6 of 6"):
        assert line in r.stderr, r.stderr
    # without K=3 drafts at 80% acceptance each step yields 1 token instead of ~2.95
    assert -0.75 < doc["gain"] < -0.55 and doc["ci_high"] < 0
