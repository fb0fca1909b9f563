"""The decode probe against the real simulator over real sockets."""

from __future__ import annotations

import statistics

import pytest

from tests.conftest import ServerFactory
from vllm_bisect.errors import ProbeError, StreamFormatError, WrongModel
from vllm_bisect.models import TokensSource
from vllm_bisect.probes.decode import DecodeProbe, log_notes
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, ProbeSpec


def handle(url: str) -> ServerHandle:
    return ServerHandle(url=url, model="sim-model")


def test_itl_uses_server_counted_tokens_under_k3_chunking(sim_server: ServerFactory) -> None:
    step_ms = 10.0
    url = sim_server("--spec-k", "3", "--acceptance", "0.8", "--step-ms", str(step_ms),
                     "--seed", "7")
    m = DecodeProbe(ProbeSpec(max_tokens=512, requests=3, warmup=1)).measure(handle(url))
    assert m.output_tokens == [512, 512, 512]
    assert m.tokens_source is TokensSource.USAGE
    for r in m.requests:
        # the true per-token pace of this stream: (steps after the first) x step / tokens
        true_pace = step_ms * (r.n_chunks - 1) / (r.output_tokens - 1)
        assert r.itl_ms is not None
        assert abs(r.itl_ms - true_pace) / true_pace < 0.03
    # expected tokens per step with prefix acceptance 0.8 and K=3: 1+.8+.64+.512 = 2.952
    assert m.itl_ms is not None and m.chunk_itl_ms is not None
    assert abs(m.itl_ms - step_ms / 2.952) / (step_ms / 2.952) < 0.12
    assert 2.5 < m.chunk_itl_ms / m.itl_ms < 3.5          # the naive client's ~3x error
    assert abs(m.chunk_itl_ms - step_ms) / step_ms < 0.05
    assert m.acceptance_length is not None and 2.6 < m.acceptance_length < 3.3
    assert m.acceptance_per_position is not None and len(m.acceptance_per_position) == 3
    assert m.acceptance_per_position[0] > m.acceptance_per_position[2]
    assert m.server_itl_ms is not None and abs(m.server_itl_ms - step_ms) < 1.0
    assert m.generation_tokens_delta == 3 * 512
    assert m.length_ok


def test_without_speculation_chunk_itl_equals_itl(sim_server: ServerFactory) -> None:
    url = sim_server("--step-ms", "5")
    m = DecodeProbe(ProbeSpec(max_tokens=64, requests=2)).measure(handle(url))
    assert m.output_tokens == [64, 64]
    assert m.tokens_per_chunk == 1.0
    assert m.itl_ms is not None and m.chunk_itl_ms is not None
    assert abs(m.chunk_itl_ms - m.itl_ms) < 1e-6
    assert m.acceptance_length is None  # no spec-decode counters exist


def test_detects_spec_cap_at_128(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--spec-output-cap", "128", "--step-ms", "2")
    m = DecodeProbe(ProbeSpec(max_tokens=512, requests=2)).measure(handle(url))
    assert m.output_tokens == [128, 128]
    assert not m.length_ok
    assert m.finish_reasons == ["length", "length"]


def test_generation_config_default_caps_chat_without_max_tokens(sim_server: ServerFactory) -> None:
    url = sim_server("--gen-max-new-tokens", "128", "--step-ms", "1")
    spec = ProbeSpec(endpoint=Endpoint.CHAT, send_max_tokens=False, min_tokens=None,
                     max_tokens=None, requests=1, warmup=0)
    m = DecodeProbe(spec, min_output_tokens=512).measure(handle(url))
    assert m.output_tokens == [128]
    assert not m.length_ok
    assert m.requested_tokens is None


def test_old_generation_config_caps_explicit_max_tokens(sim_server: ServerFactory) -> None:
    new = sim_server("--gen-max-new-tokens", "128", "--step-ms", "1")
    old = sim_server("--gen-max-new-tokens", "128", "--gen-caps-explicit", "--step-ms", "1")
    spec = ProbeSpec(max_tokens=300, requests=1, warmup=0)
    assert DecodeProbe(spec).measure(handle(new)).output_tokens == [300]
    assert DecodeProbe(spec).measure(handle(old)).output_tokens == [128]


def test_concurrency_runs_all_requests(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "2", "--step-ms", "3")
    seen: list[int] = []
    probe = DecodeProbe(ProbeSpec(max_tokens=40, requests=6, concurrency=3, warmup=0),
                        on_request=lambda done, total: seen.append(total))
    m = probe.measure(handle(url))
    assert m.output_tokens == [40] * 6
    assert len(seen) == 6


def test_noise_makes_itl_vary_between_requests(sim_server: ServerFactory) -> None:
    url = sim_server("--step-ms", "4", "--noise-cv", "0.2", "--seed", "3")
    m = DecodeProbe(ProbeSpec(max_tokens=40, requests=5, warmup=0)).measure(handle(url))
    itls = [r.itl_ms for r in m.requests if r.itl_ms is not None]
    assert statistics.pstdev(itls) > 0.05


def test_crash_mid_stream_is_a_probe_error(sim_server: ServerFactory) -> None:
    url = sim_server("--crash-after-tokens", "30", "--step-ms", "1")
    with pytest.raises(ProbeError) as e:
        DecodeProbe(ProbeSpec(max_tokens=100, requests=1, warmup=0)).measure(handle(url))
    assert "broke" in e.value.message or "DONE" in e.value.message


def test_unknown_model_is_a_clear_probe_error(sim_server: ServerFactory) -> None:
    url = sim_server()  # /v1/models names what it serves: a skip naming both (issue 49)
    with pytest.raises(WrongModel, match="serves 'sim-model', not 'no-such-model'"):
        DecodeProbe(ProbeSpec(max_tokens=8, warmup=0)).measure(
            ServerHandle(url=url, model="no-such-model"))


def test_no_server_is_a_probe_error() -> None:
    with pytest.raises(ProbeError):
        DecodeProbe(ProbeSpec(max_tokens=8, warmup=0)).measure(
            ServerHandle(url="http://127.0.0.1:9", model="m"))


def test_log_notes_find_generation_config_lines() -> None:
    log = ("(APIServer pid=1) WARNING 12-02 12:09:57 [model.py:1528] Default vLLM sampling "
           "parameters have been overridden by the model's `generation_config.json`: "
           "`{'max_tokens': 128}`.\nother\nUsing default chat sampling params from model: "
           "{'max_tokens': 128}\n")
    notes = log_notes(log)
    assert len(notes) == 2
    assert "{'max_tokens': 128}" in notes[0]


def test_malformed_stream_raises_format_error() -> None:
    from vllm_bisect.probes.sse import iter_events

    with pytest.raises(StreamFormatError, match="malformed SSE"):
        list(iter_events(["event: x"]))
    with pytest.raises(StreamFormatError, match="not JSON"):
        list(iter_events(["data: {broken"]))
    with pytest.raises(StreamFormatError, match="error inside the stream"):
        list(iter_events(['data: {"error": {"message": "boom"}}']))
