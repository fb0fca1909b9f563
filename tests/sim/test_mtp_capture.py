"""Real MTP (vLLM 0.25.1, tiny Qwen3-Next, K=3, H200) captured in tests/fixtures/vllm-0.25.1-mtp/:
the probe on the replayed bytes, the stream's shape, and the simulator's MTP mode against it
(chunk-size distribution, usage placement, metric names and labels, greedy repeatability)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerFactory, start_on_free_port
from vllm_bisect.probes import metrics
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.probes.vllm_bench import parse_serve
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, ProbeSpec

MTP = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-mtp"
PROMPT = "Write a long story about a lighthouse keeper who finds a map."
MODEL = "/tmp/gpuwork/mtp"
STREAMS = ("completions_stream_continuous_usage", "completions_stream_include_usage_only",
           "chat_stream_continuous_usage")


def _capture() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((MTP / "sse_mtp_k3_qwen3next.json").read_text())
    return doc


def _events(rec: dict[str, Any]) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    for line in rec["sse_lines"]:
        assert line["line"].startswith("data: ")
        body = line["line"][6:]
        out.append(None if body == "[DONE]" else json.loads(body))
    return out


def _real_metrics() -> tuple[metrics.Samples, metrics.Samples]:
    text = (MTP / "metrics_mtp_before_after.txt").read_text()
    before, after = text.split("########## A_mtp_qwen3next: after requests\n")
    return metrics.parse(before.split("\n", 1)[1]), metrics.parse(after)


def test_probe_on_replayed_real_mtp(replay_server: ServerFactory) -> None:
    url = replay_server("../vllm-0.25.1-mtp/sse_mtp_k3_qwen3next.json", "--metrics",
                        str(MTP / "metrics_mtp_before_after.txt"), "--metrics-server",
                        "A_mtp_qwen3next", "--record", "completions_stream_continuous_usage",
                        "--speed", "4")
    spec = ProbeSpec(prompt=PROMPT, max_tokens=200, requests=1, warmup=0)
    m = DecodeProbe(spec).measure(ServerHandle(url=url, model=MODEL))
    (r,) = m.requests
    want = _capture()["completions_stream_continuous_usage"]["analysis"]["chunk_tokens"]
    assert m.output_tokens == [200] and r.chunk_tokens == want and r.n_chunks == 84
    assert r.prompt_tokens == 13
    # chunks of 1..4 tokens, so the naive chunk ITL overstates the per-token ITL ~2.4x
    assert m.chunk_itl_ms is not None and m.itl_ms is not None
    assert 2.0 < m.chunk_itl_ms / m.itl_ms < 2.8
    # /metrics over the whole capture: 260 drafts, 370 accepted, per position 177/119/74
    assert m.acceptance_length == pytest.approx(1 + 370 / 260)
    assert m.acceptance_per_position == pytest.approx([177 / 260, 119 / 260, 74 / 260])


def test_real_mtp_stream_shape() -> None:
    cap = _capture()
    for name in STREAMS:
        rec = cap[name]
        ev = _events(rec)
        assert ev[-1] is None and ev[-2] is not None and ev[-2]["choices"] == []
        assert ev[-2]["usage"] == {"prompt_tokens": 13, "total_tokens": 213,
                                   "completion_tokens": 200}
        content = [e for e in ev[:-2] if e is not None]
        continuous = "continuous" in name
        for e in content:
            assert ("usage" in e) is continuous
        last = content[-1]["choices"][0]
        assert last["finish_reason"] == "length"
        if name.startswith("chat"):
            role = content[0]["choices"][0]["delta"]
            assert role == {"role": "assistant", "content": ""}
            assert content[0]["usage"]["completion_tokens"] == 0
    chunks = cap["completions_stream_continuous_usage"]["analysis"]["chunk_tokens"]
    assert sum(chunks) == 200 and chunks[0] == 1 and set(chunks) == {1, 2, 3, 4}
    assert Counter(chunks) == {1: 28, 2: 19, 3: 14, 4: 23}
    # greedy MTP repeats itself: the chat stream of the same prompt has the same pattern
    chat = [c for c in cap["chat_stream_continuous_usage"]["analysis"]["chunk_tokens"] if c]
    assert chat == chunks
    tok = json.loads(cap["endpoints"]["/tokenize"]["body"])
    assert set(tok) == {"count", "max_model_len", "tokens", "token_strs"} and tok["count"] == 13


def test_real_mtp_metric_counts_follow_the_streams() -> None:
    before, after = _real_metrics()
    d = metrics.diff(before, after)
    assert d.acceptance_per_position is not None
    a0, a1, a2 = d.acceptance_per_position
    assert a0 > a1 > a2 > 0          # per-position acceptance varies (0.68, 0.46, 0.28)
    # one draft per verify step: 3 streams x 83 steps + 11 for the 32-token non-streamed one
    assert metrics._delta(before, after, "vllm:spec_decode_num_drafts_total") == 260
    assert metrics._delta(before, after, "vllm:spec_decode_num_draft_tokens_total") == 780
    # and the ITL histogram is observed once per verify step, not per token
    assert metrics._delta(before, after, "vllm:inter_token_latency_seconds_count") == 260


def test_bench_serve_result_on_real_mtp_parses() -> None:
    doc = json.loads((MTP / "bench_serve_mtp_c1.json").read_text())
    r = parse_serve(doc)
    assert r.completed == 16 and r.tpot_ms is not None and 5 < r.tpot_ms < 20
    assert doc["spec_decode_acceptance_length"] == pytest.approx(2.658, abs=1e-3)


def _sim(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    return start_on_free_port(
        lambda port: [sys.executable, "-m", "vllm_bisect.sim", "serve", "--port", str(port),
                      "--model", MODEL, *args], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


def test_simulator_mtp_mode_matches_the_real_capture() -> None:
    before, after = _real_metrics()
    real = metrics.diff(before, after).acceptance_per_position
    assert real is not None
    # the simulator accepts each next draft with one probability: fit it from the real
    # conditional per-position rates (0.68, 0.67, 0.62)
    cond = [real[0]] + [real[i] / real[i - 1] for i in range(1, 3)]
    q = sum(cond) / 3
    real_chunks = _capture()["completions_stream_continuous_usage"]["analysis"]["chunk_tokens"]
    real_share = {k: v / len(real_chunks) for k, v in Counter(real_chunks).items()}
    p, url = _sim("--spec-k", "3", "--acceptance", f"{q:.3f}", "--step-ms", "0.2",
                  "--prefill-ms", "0", "--prompt-seeded-acceptance", "--seed", "5")
    try:
        spec = ProbeSpec(prompt=PROMPT, max_tokens=200, requests=1, warmup=0)
        got: list[int] = []
        for i in range(12):
            s = spec.model_copy(update={"prompt": f"{PROMPT} {i}"})
            m = DecodeProbe(s).measure(ServerHandle(url=url, model=MODEL))
            got += m.requests[0].chunk_tokens or []
        share = {k: v / len(got) for k, v in Counter(got).items()}
        assert set(share) == {1, 2, 3, 4}
        for k in (1, 2, 3, 4):
            assert abs(share[k] - real_share[k]) < 0.08, (share, real_share)
        # greedy repeatability, as real MTP: same prompt, same pattern; another prompt differs
        again = [DecodeProbe(spec.model_copy(update={"endpoint": ep})).measure(
            ServerHandle(url=url, model=MODEL)).requests[0].chunk_tokens
            for ep in (Endpoint.COMPLETIONS, Endpoint.CHAT, Endpoint.COMPLETIONS)]
        assert again[0] == again[1] == again[2]
        assert again[0] != DecodeProbe(spec.model_copy(update={"prompt": "other words"})).measure(
            ServerHandle(url=url, model=MODEL)).requests[0].chunk_tokens
        sim_samples = metrics.parse(httpx.get(f"{url}/metrics").text)
    finally:
        p.terminate()
        p.wait(10)

    def spec_families(samples: metrics.Samples) -> set[tuple[str, tuple[str, ...]]]:
        return {(n, tuple(k for k, _ in labels)) for (n, labels) in samples
                if n.startswith("vllm:spec_decode")}

    assert spec_families(sim_samples) == spec_families(after)
