"""The simulator's /start_profile and /stop_profile, as vLLM serves them."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import ServerFactory
from vllm_bisect.explain.trace import summarize, trace_files


def test_routes_exist_only_with_a_profiler(sim_server: ServerFactory) -> None:
    url = sim_server("--step-ms", "1")
    assert httpx.post(url + "/start_profile").status_code == 404


def test_a_profiled_request_writes_a_torch_shaped_trace(sim_server: ServerFactory,
                                                        tmp_path: Path) -> None:
    url = sim_server("--step-ms", "2", "--profiler-dir", str(tmp_path), "--spec-k", "3")
    r = httpx.post(url + "/start_profile")
    assert r.status_code == 200 and r.content == b""
    body = {"model": "sim-model", "prompt": "a b c", "max_tokens": 40, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body) as resp:
        chunks = sum(1 for line in resp.iter_lines() if line.startswith("data: {"))
    assert httpx.post(url + "/stop_profile", timeout=60).status_code == 200
    files = trace_files(tmp_path)
    assert len(files) == 1 and files[0].name.startswith("vllm_dp0_pp0_tp0_dcp0_ep0_rank0.")
    assert files[0].name.endswith(".pt.trace.json.gz")
    s = summarize(files[0])
    assert s.steps == chunks - 1  # every decode step (the first chunk is the prefill's)
    assert "fused_moe_kernel" in s.kernel_us and s.launches == 19.0
    # stopped: a further request records nothing, a second stop writes nothing
    httpx.post(url + "/v1/completions", json={**body, "stream": False})
    assert httpx.post(url + "/stop_profile").status_code == 200
    assert len(trace_files(tmp_path)) == 1


def test_cuda_graphs_launch_a_steps_kernels_with_one_call(sim_server: ServerFactory,
                                                          tmp_path: Path) -> None:
    # real vLLM without --enforce-eager (docs/validation.md (m)): one cudaGraphLaunch runs
    # the captured kernels; here the sampler's kernel stays an eager launch
    url = sim_server("--step-ms", "2", "--profiler-dir", str(tmp_path), "--spec-k", "3",
                     "--cuda-graphs")
    httpx.post(url + "/start_profile")
    body = {"model": "sim-model", "prompt": "a b c", "max_tokens": 40}
    httpx.post(url + "/v1/completions", json=body, timeout=60)
    httpx.post(url + "/stop_profile", timeout=60)
    s = summarize(trace_files(tmp_path)[0])
    assert s.launches == 19.0 and s.launch_calls == 2.0  # the same kernels, two calls
