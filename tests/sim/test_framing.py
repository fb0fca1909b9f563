"""The simulator's streams have the framing and fields of real vLLM 0.25.1 (captured)."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlparse

import httpx

from tests.conftest import FIXTURES, ServerFactory

PROMPT = " ".join(["hello"] * 20)


def shape(o: Any) -> Any:
    if isinstance(o, dict):
        return tuple((k, shape(v)) for k, v in o.items())
    if isinstance(o, list):
        return ("list", shape(o[0])) if o else ("list",)
    return type(o).__name__


def raw_exchange(url: str, path: str, body: dict[str, Any]) -> tuple[str, list[tuple[str, str]],
                                                                       bytes]:
    """POST with a raw socket (Connection: close), return status, headers, raw body."""
    u = urlparse(url)
    data = json.dumps(body).encode()
    req = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nAccept: */*\r\n"
           f"Connection: close\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    with socket.create_connection((u.hostname, u.port)) as s:
        s.sendall(req)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    raw = b"".join(chunks)
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [tuple(h.split(": ", 1)) for h in lines[1:]]
    return lines[0], headers, rest  # type: ignore[return-value]


def dechunk(raw: bytes) -> tuple[list[int], bytes]:
    sizes, body = [], b""
    while raw:
        size_line, _, raw = raw.partition(b"\r\n")
        n = int(size_line, 16)
        sizes.append(n)
        if n == 0:
            break
        body += raw[:n]
        raw = raw[n + 2:]
    return sizes, body


def captured(name: str, record: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())[record]
    return data


def events(body: bytes) -> list[str]:
    assert body.endswith(b"\n\n")
    return [e.decode() for e in body.split(b"\n\n") if e]


def chunk_shapes(evs: list[str]) -> list[Any]:
    out = []
    for e in evs:
        assert e.startswith("data: ")
        if e == "data: [DONE]":
            out.append("DONE")
        else:
            out.append(shape(json.loads(e[6:])))
    return out


def dedupe(seq: list[Any]) -> list[Any]:
    return [s for i, s in enumerate(seq) if i == 0 or s != seq[i - 1]]


def compare(url: str, fixture: str, record: str) -> None:
    cap = captured(fixture, record)
    body = dict(cap["request"]["body"])
    body["model"] = "sim-model"
    status, headers, raw = raw_exchange(url, cap["request"]["path"], body)
    assert status == cap["status_line"]
    assert [h[0] for h in headers] == [h[0] for h in cap["headers"]]
    assert dict(headers)["content-type"] == dict(cap["headers"])["content-type"]
    sizes, dechunked = dechunk(raw)
    evs = events(dechunked)
    assert len(sizes) - 1 == len(evs), "one SSE event per HTTP chunk, as uvicorn sends"
    cap_lines = [ln["line"] for ln in cap["sse_lines"] if ln["line"]]
    assert dedupe(chunk_shapes(evs)) == dedupe(chunk_shapes(cap_lines))
    last = json.loads(evs[-2][6:])
    cap_last = json.loads(cap_lines[-2][6:])
    assert last["choices"] == [] and last["system_fingerprint"] == cap_last["system_fingerprint"]
    assert last["usage"]["completion_tokens"] == cap_last["usage"]["completion_tokens"]


def test_completions_continuous_usage_matches_capture(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--acceptance", "1.0", "--step-ms", "1")
    compare(url, "sse_ngram_k3_tiny.json", "completions_stream_continuous_usage")


def test_completions_include_usage_only_matches_capture(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--acceptance", "1.0", "--step-ms", "1")
    compare(url, "sse_ngram_k3_tiny.json", "completions_stream_include_usage_only")


def test_chat_continuous_usage_matches_capture(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--acceptance", "1.0", "--step-ms", "1")
    compare(url, "sse_ngram_k3_tiny.json", "chat_stream_continuous_usage")


def test_full_acceptance_k3_gives_captured_chunk_sizes(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--acceptance", "1.0", "--step-ms", "1")
    cap = captured("sse_ngram_k3_tiny.json", "completions_stream_continuous_usage")
    body = {**cap["request"]["body"], "model": "sim-model"}
    _, _, raw = raw_exchange(url, "/v1/completions", body)
    deltas = []
    prev = 0
    for e in events(dechunk(raw)[1])[:-2]:
        n = json.loads(e[6:])["usage"]["completion_tokens"]
        deltas.append(n - prev)
        prev = n
    assert deltas == [1] + [4] * 15 + [3]  # as captured: 1, 4x15, 3


def test_cap_records_match_generation_config_rules(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--acceptance", "1.0", "--step-ms", "0.2",
                     "--gen-max-new-tokens", "128")
    for record, expect in (("completions_stream_no_max_tokens", 16),
                           ("chat_stream_no_max_tokens", 128),
                           ("completions_stream_max512_min512", 512)):
        cap = captured("sse_ngram_k3_tiny128_gencfg_cap.json", record)
        assert cap["analysis"]["total_words"] == expect
        body = {**cap["request"]["body"], "model": "sim-model"}
        _, _, raw = raw_exchange(url, cap["request"]["path"], body)
        final = json.loads(events(dechunk(raw)[1])[-2][6:])
        assert final["usage"]["completion_tokens"] == expect, record


def test_nonstream_completion_matches_capture(sim_server: ServerFactory) -> None:
    url = sim_server()
    cap = captured("sse_ngram_k3_tiny.json", "completions_nonstream")
    body = {**cap["request"]["body"], "model": "sim-model"}
    r = httpx.post(url + "/v1/completions", json=body)
    got, want = r.json(), json.loads(cap["body"])
    assert shape(got) == shape(want)
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"] == 16


def test_endpoints_match_capture(sim_server: ServerFactory) -> None:
    url = sim_server("--model", "/tmp/tiny", "--max-model-len", "2048")
    cap = json.loads((FIXTURES / "endpoints_models_version_health.json").read_text())
    first = next(iter(cap.values())) if "/v1/models" not in cap else cap
    for path in ("/v1/models", "/version", "/health"):
        want = first[path]
        r = httpx.get(url + path)
        assert r.status_code == int(want["status_line"].split()[1])
        assert [k for k in r.headers] == [k.lower() for k, _ in want["headers"]
                                          if k.lower() != "connection"]
        if want["body"]:
            assert shape(r.json()) == shape(json.loads(want["body"]))
    assert httpx.get(url + "/version").json() == {"version": "0.25.1"}


def test_metrics_names_and_labels_match_capture(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--model", "/tmp/tiny")
    text = httpx.get(url + "/metrics").text
    cap = (FIXTURES / "metrics_vllm_before_after.txt").read_text()
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 "vllm:inter_token_latency_seconds_count", "vllm:generation_tokens_total"):
        want = next(ln for ln in cap.splitlines() if ln.startswith(name + "{"))
        got = next(ln for ln in text.splitlines() if ln.startswith(name + "{"))
        assert got.split("}")[0] == want.split("}")[0]
    for pos in "012":
        assert (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",'
                f'model_name="/tmp/tiny",position="{pos}"}}') in text
    for line in (ln for ln in cap.splitlines() if ln.startswith("# TYPE vllm:spec_decode")):
        assert line in text
