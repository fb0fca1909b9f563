"""GPU pinning is the same code for one worker or k: every server and every `vllm bench`
sees its own worker's GPUs (CUDA_VISIBLE_DEVICES), under the per-GPU locks. The servers
echo their environment into their logs; `vllm bench` is a wrapper that does the same."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import sim_serve, spec_for
from tests.helpers import history
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.runtime.gpulock import lock_path
from vllm_bisect.sim.history import sim_path

# (a serve template: {port} is filled in, {{ }} is a brace)
ECHO = 'echo "serving on port {port} with CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}}"; '
SERVED = re.compile(r"^serving on port (\d+) with CUDA_VISIBLE_DEVICES=(\S+)", re.M)
BENCHED = re.compile(r"^bench with CUDA_VISIBLE_DEVICES=(\S+) .*--base-url http://127.0.0.1:(\d+)", re.M)


def served(logs: Path) -> dict[str, tuple[str, str]]:
    """commit prefix -> (port, CUDA_VISIBLE_DEVICES) its server saw. A log with the launch
    line only is a server stopped before its first line (with two workers, a commit the
    other worker's verdict made useless is cancelled): it must have served nothing."""
    out = {}
    for log in logs.glob("serve-*.log"):
        commit = log.name[len("serve-"):-len(".log")]
        text = log.read_text()
        m = SERVED.search(text)
        if m is None:
            assert text.count("\n") <= 1 and not (logs / f"bench-{commit}.log").exists(), \
                f"{log.name} has no environment line: {text[-2000:]}"
            continue
        out[commit] = (m.group(1), m.group(2))
    return out


def test_one_gpu_pins_every_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path / "locks"))
    h = history(tmp_path, n_commits=6, cap_at=4)
    spec = spec_for(h, sim_serve(ECHO), parallel={"gpus": "3"}, ops={"prefetch": True})
    with caplog.at_level(logging.INFO, logger="vllm_bisect.builders.prefetch"):
        r = run_bisect(spec, tmp_path / "session", tmp_path / "cache", NullEvents())
    assert r.first_bad == h.planted["length"] and r.workers == 1
    seen = served(tmp_path / "session" / "logs")
    assert len(seen) == r.server_starts >= 3
    assert {cvd for _, cvd in seen.values()} == {"3"}
    # GPU 3's lock was taken (it is emptied on release), and no other GPU's
    gpu_locks = [p.name for p in (tmp_path / "locks").iterdir() if "-gpu-" in p.name]
    assert gpu_locks == [lock_path(3).name]
    assert any("prefetching" in rec.getMessage() for rec in caplog.records)


def test_two_workers_bench_their_own_commit_with_their_own_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path / "locks"))
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    vllm = wrappers / "vllm"  # `vllm bench serve`: say what it saw, then the simulator's
    vllm.write_text(
        "#!/bin/sh\n"
        'echo "bench with CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} $*"\n'
        f"PYTHONPATH={sim_path()} exec {sys.executable} -c "
        "'import sys; from vllm_bisect.sim import bench; bench.main(sys.argv[3:])' \"$@\"\n")
    vllm.chmod(0o755)
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = spec_for(h, sim_serve(ECHO), parallel={"workers": 2, "gpus": "0,1"},
                    serve={"env": {"PATH": f"{wrappers}:{os.environ['PATH']}"}},
                    probe={"bench": {"kind": "serve", "args": [
                        "--num-prompts", "2", "--max-concurrency", "2",
                        "--random-output-len", "8"]}})
    r = run_bisect(spec, tmp_path / "session", tmp_path / "cache", NullEvents())
    assert r.first_bad == h.planted["length"] and r.workers == 2
    logs = tmp_path / "session" / "logs"
    seen = served(logs)
    benched = 0
    for log in logs.glob("bench-*.log"):
        m = BENCHED.search(log.read_text())
        assert m, log.read_text()[-2000:]
        commit = log.name[len("bench-"):-len(".log")]
        port, cvd = seen[commit]
        assert (m.group(2), m.group(1)) == (port, cvd), f"{commit}: benched another server"
        benched += 1
    assert benched >= 3
    assert {cvd for _, cvd in seen.values()} == {"0", "1"}
    assert all(o.measurement is None or o.measurement.bench is not None for o in r.probed)
