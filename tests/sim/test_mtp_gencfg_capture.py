"""Real MTP on vLLM 0.25.1 with a generation-config cap (``max_new_tokens: 128`` in the model's
generation_config.json, the founding report's "every answer stops at 128 tokens"), captured in
tests/fixtures/vllm-0.25.1-mtp/ (README: how): the stream's shape, the probe on the replayed
bytes (the length symptom as a bisect sees it), and the simulator against the same requests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ServerFactory
from tests.sim.test_mtp_capture import _events, _sim
from vllm_bisect.probes import metrics
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, ProbeSpec

MTP = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-mtp"
CAPTURE = "sse_mtp_k3_qwen3next_gencfg_cap128.json"
METRICS = "metrics_gencfg_cap128_before_after.txt"
PROMPT = "Write a long story about a lighthouse keeper who finds a map."
MODEL = "/tmp/gpuwork/mtp128"


def _capture() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((MTP / CAPTURE).read_text())
    return doc


def _usage(rec: dict[str, Any]) -> dict[str, Any]:
    ev = _events(rec)
    assert ev[-1] is None and ev[-2] is not None and ev[-2]["choices"] == []
    usage: dict[str, Any] = ev[-2]["usage"]
    return usage


def test_real_generation_config_cap() -> None:
    cap = _capture()
    for rec in cap.values():
        assert rec["status_line"] == "HTTP/1.1 200 OK" and not rec["truncated_by_deadline"]
        assert "max_tokens" not in rec["request"]["body"] or rec["request"]["body"]["max_tokens"]
    # chat without max_tokens: the generation config's max_new_tokens is the default
    assert _usage(cap["chat_stream_no_max_tokens"])["completion_tokens"] == 128
    # completions without max_tokens: the completions API's own default (16) wins
    assert _usage(cap["completions_stream_no_max_tokens"])["completion_tokens"] == 16
    # an explicit max_tokens above the cap is honoured (vLLM >= #34063, generation-config auto)
    assert _usage(cap["completions_stream_max512"])["completion_tokens"] == 512
    for rec in cap.values():
        content = [e for e in _events(rec)[:-2] if e is not None and e["choices"]]
        assert content[-1]["choices"][0]["finish_reason"] == "length"
    # K=3, but the last chunk of the 512-token stream carries 5 tokens: two verify steps
    # reached the client as one SSE chunk (vLLM merges a request's pending outputs)
    chunks = cap["completions_stream_max512"]["analysis"]["chunk_tokens"]
    assert sum(chunks) == 512 and chunks[-1] == 5 and max(chunks[:-1]) == 4
    assert Counter(chunks[:-1]) == {1: 57, 2: 45, 3: 36, 4: 63}


def test_real_cap_metrics_count_every_captured_request() -> None:
    text = (MTP / METRICS).read_text()
    before, after = text.split("########## B_mtp_qwen3next_cap128: after requests\n")
    b, a = metrics.parse(before.split("\n", 1)[1]), metrics.parse(after)
    # five requests ran between the scrapes (three kept here): 128 + 16 + 3 x 512 tokens
    assert metrics._delta(b, a, "vllm:generation_tokens_total") == 128 + 16 + 3 * 512
    d = metrics.diff(b, a)
    assert d.acceptance_per_position is not None
    a0, a1, a2 = d.acceptance_per_position
    assert a0 > a1 > a2 > 0


def test_probe_sees_the_cap_on_replayed_real_mtp(replay_server: ServerFactory) -> None:
    url = replay_server(f"../vllm-0.25.1-mtp/{CAPTURE}", "--record",
                        "chat_stream_no_max_tokens", "--speed", "4")
    spec = ProbeSpec(prompt=PROMPT, max_tokens=256, send_max_tokens=False, requests=1,
                     warmup=0, endpoint=Endpoint.CHAT)
    m = DecodeProbe(spec, 256).measure(ServerHandle(url=url, model=MODEL))
    (r,) = m.requests
    assert m.output_tokens == [128] and m.finish_reasons == ["length"] and not m.length_ok
    want = [c for c in _capture()["chat_stream_no_max_tokens"]["analysis"]["chunk_tokens"] if c]
    assert r.chunk_tokens is not None and [c for c in r.chunk_tokens if c] == want
    assert r.prompt_tokens == 13


def test_simulator_cap_matches_the_real_server() -> None:
    p, url = _sim("--spec-k", "3", "--acceptance", "0.66", "--step-ms", "0.2",
                  "--prefill-ms", "0", "--gen-max-new-tokens", "128", "--seed", "3",
                  "--model", MODEL)
    try:
        real = _capture()
        with httpx.Client(timeout=30) as c:
            for name, rec in real.items():
                body = {**rec["request"]["body"], "model": MODEL}
                got: int | None = None
                with c.stream("POST", url + rec["request"]["path"], json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            ev = json.loads(line[6:])
                            if not ev["choices"]:
                                got = ev["usage"]["completion_tokens"]
                assert got == _usage(rec)["completion_tokens"], name
    finally:
        p.terminate()
        p.wait(10)


def _chunks(url: str, max_tokens: int) -> list[int]:
    spec = ProbeSpec(prompt=PROMPT, max_tokens=max_tokens, requests=1, warmup=0)
    m = DecodeProbe(spec).measure(ServerHandle(url=url, model=MODEL))
    assert m.output_tokens == [max_tokens]
    return m.requests[0].chunk_tokens or []


def test_simulator_merges_lagging_outputs_like_vllm() -> None:
    # step time 0: every next step is already due when a chunk would go out, i.e. the API side
    # lags throughout; with the merge on, vLLM's behaviour, the whole output is one chunk
    for merge, want_max in ((True, 64), (False, 4)):
        flags = ["--merge-lagging-outputs"] if merge else []
        p, url = _sim("--spec-k", "3", "--acceptance", "0.66", "--step-ms", "0",
                      "--prefill-ms", "0", "--seed", "3", "--model", MODEL, *flags)
        try:
            chunks = _chunks(url, 64)
        finally:
            p.terminate()
            p.wait(10)
        assert sum(chunks) == 64 and max(chunks) == want_max, (merge, chunks)
