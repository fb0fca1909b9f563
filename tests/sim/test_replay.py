"""The probe against replayed real vLLM 0.25.1 traffic reports exactly the captured facts."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES, ServerFactory
from vllm_bisect.models import TokensSource
from vllm_bisect.probes.decode import DecodeProbe, log_notes
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, ProbeSpec, VerdictSpec
from vllm_bisect.verdict import Judge

PROMPT = " ".join(["hello"] * 20)
# the no-spec capture replays 10x slower than captured: its 64 tokens spanned 160 ms, so a
# server or client that waited ~110 ms for a core (8 pytest-xdist workers on 2 cores) moved its
# per-token ITL past the 1.3x bound (4.33 against 2.58 ms); over 1.6 s such a wait is within
# it. The bounds and the ratio are the captured ones, on the scaled times
SLOW = 10.0


def capture_facts(fixture: str, record: str) -> tuple[int, list[int], float]:
    rec = json.loads((FIXTURES / fixture).read_text())[record]
    chunks = [c for c in rec["analysis"]["chunks"] if c.get("n_words")]
    tokens = sum(c["n_words"] for c in chunks)
    itl = (chunks[-1]["t"] - chunks[0]["t"]) / (tokens - 1) * 1000.0
    return tokens, [c["n_words"] for c in chunks], itl


def probe(url: str, model: str = "/tmp/tiny", **kw: object) -> DecodeProbe:
    fields: dict[str, object] = {"prompt": PROMPT, "max_tokens": 64, "requests": 1, "warmup": 0}
    fields.update(kw)
    return DecodeProbe(ProbeSpec.model_validate(fields))


@pytest.mark.parametrize("record,endpoint", [
    ("completions_stream_continuous_usage", Endpoint.COMPLETIONS),
    ("chat_stream_continuous_usage", Endpoint.CHAT),
])
def test_ngram_k3_capture(replay_server: ServerFactory, record: str, endpoint: Endpoint) -> None:
    # 10x slower than captured, as the no-spec capture (SLOW): its 64 tokens spanned ~50 ms,
    # and one wait for a core under a loaded suite moved the ITL past the bound (1.21 against
    # 0.77 ms, CI-like run of 4 workers on 2 cores)
    url = replay_server("sse_ngram_k3_tiny.json", "--record", record, "--speed", str(1 / SLOW),
                        "--metrics", str(FIXTURES / "metrics_vllm_before_after.txt"),
                        "--metrics-server", "A_ngram_tiny")
    tokens, sizes, itl = capture_facts("sse_ngram_k3_tiny.json", record)
    itl *= SLOW
    assert tokens == 64 and sizes == [1] + [4] * 15 + [3]
    m = probe(url, endpoint=endpoint).measure(ServerHandle(url=url, model="/tmp/tiny"))
    assert m.output_tokens == [64]
    assert m.requests[0].chunk_tokens == sizes
    assert m.tokens_per_chunk == pytest.approx(64 / 17)
    assert m.chunk_itl_ms is not None and m.itl_ms is not None
    # the replay sleeps the captured gaps; a loaded machine can only add to them
    assert itl * 0.95 - 0.15 <= m.itl_ms <= itl * 1.3 + 0.15, (m.itl_ms, itl)
    assert m.chunk_itl_ms / m.itl_ms == pytest.approx(63 / 16, rel=0.05)  # ~4x
    assert m.acceptance_length == pytest.approx(4.0)
    assert m.acceptance_per_position == pytest.approx([1.0, 1.0, 1.0])
    assert m.tokens_source is TokensSource.USAGE
    assert m.finish_reasons == ["length"]


def test_include_usage_only_capture(replay_server: ServerFactory) -> None:
    record = "completions_stream_include_usage_only"
    url = replay_server("sse_ngram_k3_tiny.json", "--record", record)
    m = probe(url).measure(ServerHandle(url=url, model="/tmp/tiny"))
    assert m.output_tokens == [64]            # from the final usage chunk
    assert m.requests[0].chunk_tokens is None  # no per-chunk usage in this stream
    assert m.requests[0].n_chunks == 17


@pytest.mark.parametrize("record", ["completions_stream_continuous_usage",
                                    "chat_stream_continuous_usage"])
def test_nospec_capture(replay_server: ServerFactory, record: str) -> None:
    url = replay_server("sse_nospec_tiny.json", "--record", record, "--speed", str(1 / SLOW),
                        "--metrics", str(FIXTURES / "metrics_vllm_before_after.txt"),
                        "--metrics-server", "C_nospec_tiny")
    tokens, _, itl = capture_facts("sse_nospec_tiny.json", record)
    itl *= SLOW
    endpoint = Endpoint.CHAT if record.startswith("chat") else Endpoint.COMPLETIONS
    m = probe(url, endpoint=endpoint).measure(ServerHandle(url=url, model="/tmp/tiny"))
    assert m.output_tokens == [tokens] == [64]
    assert m.chunk_itl_ms is not None and m.itl_ms is not None
    # the replay sleeps the captured gaps; a loaded machine can only add to them
    assert itl * 0.95 - 0.15 <= m.itl_ms <= itl * 1.3 + 0.15, (m.itl_ms, itl)
    assert m.chunk_itl_ms / m.itl_ms == pytest.approx(63 / 62, rel=0.05)  # ~1x
    assert m.acceptance_length is None  # server C exposes no spec-decode counters


@pytest.mark.parametrize("record,send_max,max_tokens,short", [
    ("completions_stream_no_max_tokens", False, None, True),   # 16 tokens came back
    ("chat_stream_no_max_tokens", False, None, True),          # 128 tokens came back
    ("completions_stream_max512_min512", True, 512, False),    # 512 tokens came back
])
def test_cap_transcripts_judged_length_bad_exactly_when_short(
        replay_server: ServerFactory, record: str, send_max: bool, max_tokens: int | None,
        short: bool) -> None:
    url = replay_server("sse_ngram_k3_tiny128_gencfg_cap.json", "--record", record)
    endpoint = Endpoint.CHAT if record.startswith("chat") else Endpoint.COMPLETIONS
    p = DecodeProbe(ProbeSpec(prompt=PROMPT, endpoint=endpoint, send_max_tokens=send_max,
                              max_tokens=max_tokens, requests=1, warmup=0),
                    min_output_tokens=512)
    m = p.measure(ServerHandle(url=url, model="/tmp/tiny128"))
    tokens, _, _ = capture_facts("sse_ngram_k3_tiny128_gencfg_cap.json", record)
    assert m.output_tokens == [tokens]
    j = Judge(VerdictSpec(symptom="length"), min_output_tokens=512).judge(m)
    assert j.length_bad is short
    assert (j.verdict.value == "bad") is short


def test_generation_config_notice_found_in_captured_log() -> None:
    log = (FIXTURES / "server_logs_last200.txt").read_text()
    notes = log_notes(log)
    assert len(notes) == 1
    assert "generation_config.json" in notes[0] and "{'max_tokens': 128}" in notes[0]
