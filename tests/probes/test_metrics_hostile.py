"""/metrics counters that are NaN or Inf, that go down, or that accept more tokens than the
drafts could hold: the acceptance is "not available" with the reason, never a number, never
NaN in a journal, never a crash. Through ``vllm-bisect probe`` and the hook under a real
``git bisect run`` against a real local server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_guard import bisect_run
from tests.bisect.test_hook_parity import HOOK, spec_for
from tests.helpers import history, write_spec
from tests.probes.hostile_sse import HostileServer

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
SCRIPT = Path(__file__).with_name("hostile_sse.py")
WHY = {"metrics-nan": "is not a finite count", "metrics-inf": "is not a finite count",
       "metrics-down": "went down (900 -> 800)",
       "metrics-overaccept": "500 tokens accepted over 1 drafts: more than 3 a draft"}


@pytest.mark.parametrize("mode", sorted(WHY))
def test_probe_says_not_available_with_the_reason(mode: str) -> None:
    with HostileServer(mode) as url:
        r = subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                            "--warmup", "0", "--max-tokens", "8", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["acceptance_length"] is None and doc["acceptance_per_position"] is None, doc
    notes = [n for n in doc["notes"] if "/metrics: not available" in n]
    assert notes and WHY[mode] in notes[0], doc["notes"]


def test_a_plain_probe_shows_the_reason(tmp_path: Path) -> None:
    with HostileServer("metrics-down") as url:
        r = subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                            "--warmup", "0", "--max-tokens", "8"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "acceptance length n/a" in r.stdout
    said = " ".join(r.stdout.split())
    assert re.search(r"note: /metrics: not available: \S+ went down", said), r.stdout


@pytest.mark.parametrize("mode", ["metrics-nan", "metrics-inf"])
def test_git_bisect_run_over_non_finite_counters(tmp_path: Path, mode: str) -> None:
    """Every commit's counters are non-finite; from commit 3 on the stream is 2 tokens
    short: git must name commit 3; a crash on the journal a NaN poisoned (exit 1 = bad)
    named another commit. (Since issue 49 the first call measures git's two ends too, so
    later calls read their rows back.)"""
    h = history(tmp_path, n_commits=6)
    short = tmp_path / "short"
    short.write_text("\n".join(h.shas[3:]) + "\n")
    serve = (f"if grep -q {{commit}} {short}; then export HOSTILE_SSE_TOKENS=2; fi; "
             f"exec {sys.executable} {SCRIPT} {{port}} {mode}")
    spec = spec_for(h, serve, ops={"retries": 0}, probe={"max_tokens": 4, "min_tokens": 4})
    path = write_spec(tmp_path / "spec.toml", spec)
    r, _ = bisect_run(h, [*HOOK, "--spec", str(path), "--cache-dir",
                          str(tmp_path / "cache")])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{h.shas[3]} is the first bad commit" in r.stdout, r.stdout[-3000:]
    verdicts = re.findall(r"vllm-bisect: [0-9a-f]{12} (\w+):", r.stdout + r.stderr)
    assert len(verdicts) >= 2 and set(verdicts) == {"good", "bad"}, verdicts
    assert "reused" in r.stderr  # (the journal replayed)
    assert "Traceback" not in r.stderr
