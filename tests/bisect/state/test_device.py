"""A session measures on one kind of GPU (bisect/state/device.py): resumed on a machine with
other GPUs it is refused before anything runs, and the result cache does not hand another
GPU's measurements to a new session. Through the CLI on a ``vllm-bisect sim history``
repository, with a stand-in ``nvidia-smi`` on PATH (a script printing the GPU query's CSV:
this machine has no GPU) that says which GPU the machine has."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from tests.bisect.test_run_session import CLI, interrupted, spawned
from vllm_bisect.bisect.state.device import check_session, describe, device_of, same_device
from vllm_bisect.errors import SessionError
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, TokensSource

SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name,compute_cap,driver_version) echo "{name}, 9.0, 570.86.15" ;;
  --query-gpu=*) exit 9 ;;
  --query-compute-apps=*) ;;
  "") echo "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |" ;;
  *) exit 9 ;;
esac
"""
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def machine(tmp_path: Path, gpu: str) -> dict[str, str]:
    """The environment of a machine whose one GPU is ``gpu``."""
    d = tmp_path / f"smi-{gpu.replace(' ', '_')}"
    d.mkdir(exist_ok=True)
    exe = d / "nvidia-smi"
    exe.write_text(SMI.format(name=gpu))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{d}{os.pathsep}{os.environ['PATH']}"}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900, env=env)


def test_a_session_resumed_on_other_gpus_is_refused_and_the_cache_keeps_them_apart(
        tmp_path: Path) -> None:
    made = run(dict(os.environ), "sim", "history", str(tmp_path / "h"), "--commits", "16",
               "--cap-at", "9")
    assert made.returncode == 0, made.stderr[-2000:]
    spec, cut, cache = tmp_path / "h-spec.toml", tmp_path / "cut", tmp_path / "cache"
    h100, h200 = machine(tmp_path, H100), machine(tmp_path, H200)
    interrupted(spec, cut, cache, tmp_path / "first.err", (CLI, h100))
    servers = spawned(cut)
    assert servers >= 2

    moved = run(h200, "run", "--session", str(cut), "--cache-dir", str(cache))
    assert moved.returncode == 2, moved.stderr[-3000:]
    text = " ".join(moved.stderr.split())
    assert f"on 1x {H100}, and this machine has 1x {H200}" in text, text
    assert f"resume it on a machine with 1x {H100}, or measure afresh here: another --session, " \
        f"or move {cut} aside" in text, text
    assert "Traceback" not in moved.stderr
    assert spawned(cut) == servers   # refused before any server

    back = run(h100, "run", "--session", str(cut), "--cache-dir", str(cache), "--json")
    assert back.returncode == 0, back.stderr[-3000:]
    first_bad = json.loads((cut / "result.json").read_text())["first_bad"]

    # a new session on the other GPU: nothing of the H100's from the cache, all measured
    fresh = run(h200, "run", "--spec", str(spec), "--session", str(tmp_path / "new"),
                "--cache-dir", str(cache))
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "(cached)" not in fresh.stderr
    doc = json.loads((tmp_path / "new" / "result.json").read_text())
    assert doc["first_bad"] == first_bad
    assert doc["server_starts"] >= 2
    # ... and the same GPU's run after it takes the ends and the search from the cache (a
    # re-check always starts fresh servers)
    again = run(h200, "run", "--spec", str(spec), "--session", str(tmp_path / "again"),
                "--cache-dir", str(cache))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(cached)" in again.stderr
    phases = json.loads((tmp_path / "again" / "result.json").read_text())["starts_by_phase"]
    assert not {"endpoints", "search"} & set(phases), phases


def ev(gpus: object) -> Evaluation:
    env = {} if gpus is None else {"gpus": gpus}
    m = Measurement(endpoint="completions", model="m", requested_tokens=10,
                    min_output_tokens=10, output_tokens=[10], length_ok=True, itl_ms=10.0,
                    chunk_itl_ms=None, tokens_per_chunk=None, ttft_ms=None, tpot_ms=None,
                    finish_reasons=[], tokens_source=TokensSource.USAGE)
    return Evaluation(commit="c" * 40, status=EvalStatus.MEASURED, environment=env,
                      measurement=m)


def test_what_counts_as_another_gpu(tmp_path: Path) -> None:
    one = [{"name": H100, "compute_capability": "9.0"}]
    assert device_of({"gpus": "none"}) == () and device_of({}) is None
    assert device_of({"gpus": one * 2}) == (H100, H100)
    assert describe((H100, H100)) == f"2x {H100}" and describe(()) == "no GPU"
    assert same_device(ev(one), (H100,)) and not same_device(ev(one), (H200,))
    assert not same_device(ev(one * 2), (H100,))          # another count is another machine
    assert same_device(ev(None), (H200,))                 # recorded none (older journals)
    assert same_device(ev(one), None)                     # not compared (a URL, Ray)
    assert not same_device(ev("none"), (H100,))
    check_session([("k", ev(one)), ("k2", ev(None))], (H100,), tmp_path)
    check_session([("k", ev(one))], None, tmp_path)
    try:
        check_session([("k", ev(one)), ("k2", ev(one))], (), tmp_path)
    except SessionError as e:
        assert f"measured 2 servers on 1x {H100}, and this machine has no GPU" in e.message
    else:
        raise AssertionError("a session measured on an H100 was resumed without a GPU")
