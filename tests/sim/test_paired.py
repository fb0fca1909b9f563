"""VLLM_SIM_PAIRED: a server's draws from (seed, commit, how many of its servers ended), for
benchmarks that compare two bisects on the same noise (benchmarks/bench_resume.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import restore_sigint, start_on_free_port

ARGS = ["--model", "sim-model", "--step-ms", "1", "--prefill-ms", "1", "--spec-k", "3",
        "--acceptance", "0.5", "--noise-cv", "0.1", "--server-cv", "0.2"]


def draws(env: dict[str, str], how: signal.Signals = signal.SIGTERM) -> list[int]:
    """Start a server, read the tokens of every streamed step of three requests (drawn from
    the server's generator: its acceptances), then stop it with ``how``."""
    proc, url = start_on_free_port(
        lambda port: [sys.executable, "-m", "vllm_bisect.sim", "serve", "--port", str(port),
                      *ARGS],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=restore_sigint,
        env={**os.environ, **env})
    try:
        steps: list[int] = []
        for _ in range(3):
            body = {"model": "sim-model", "prompt": "a b c", "max_tokens": 40, "stream": True,
                    "ignore_eos": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            done = 0
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    usage = json.loads(line[6:]).get("usage") or {}
                    n = int(usage.get("completion_tokens") or 0)
                    if n > done:
                        steps.append(n - done)
                        done = n
        return steps
    finally:
        os.kill(proc.pid, how)
        proc.wait(timeout=20)


def test_paired_servers_draw_by_commit_and_ended_count(tmp_path: Path) -> None:
    a = {"VLLM_SIM_PAIRED": f"7:{tmp_path / 'a'}"}
    b = {"VLLM_SIM_PAIRED": f"7:{tmp_path / 'b'}"}
    first = draws(a)                      # commit's server 0 in bisect a, stopped gracefully
    assert len(set(first)) > 1            # acceptances vary: the steps are a fingerprint
    second = draws(a)                     # server 1 of the same commit: a new draw
    assert second != first
    assert draws(b, signal.SIGKILL) == first  # bisect b's server 0: bisect a's; killed ...
    assert draws(b) == first              # ... so the one started again in its place draws it too
    assert draws(b) == second             # then b's server 1 is a's server 1
    assert draws({"VLLM_SIM_PAIRED": f"8:{tmp_path / 'c'}"}) != first  # another seed


def test_unset_keeps_the_os_seeded_draws(tmp_path: Path) -> None:
    env = {"VLLM_SIM_PAIRED": ""}
    assert draws(env) != draws(env)
    assert not list(tmp_path.iterdir())
