"""The probe against a hostile server (real sockets on 127.0.0.1): every misbehaviour ends
in a ProbeError within bounded time and memory, never a hang or an unexpected exception."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.probes.hostile_sse import HostileServer
from vllm_bisect.errors import ProbeError, StreamFormatError
from vllm_bisect.probes import metrics
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.probes.limits import split_lines
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import OpsSpec, ProbeSpec


def probe(url: str, **ops: object) -> None:
    spec = ProbeSpec(max_tokens=8, requests=1, warmup=0)
    DecodeProbe(spec, ops=OpsSpec(**ops)).measure(  # type: ignore[arg-type]
        ServerHandle(url=url, model="m"))


def test_a_valid_stream_still_measures() -> None:
    with HostileServer("valid") as url:
        m = DecodeProbe(ProbeSpec(max_tokens=8, requests=1, warmup=0, min_tokens=1)).measure(
            ServerHandle(url=url, model="m"))
    assert m.output_tokens == [4] and m.server_version == "0.0.0+hostile"


@pytest.mark.parametrize("mode", ["keepalive", "slowloris"])
def test_total_deadline_stops_endless_and_slow_streams(mode: str) -> None:
    """httpx's read timeout is per read: a byte every 0.2 s or a comment every 5 ms never
    trips it; the total deadline does."""
    started = time.monotonic()
    with HostileServer(mode) as url, pytest.raises(ProbeError, match="deadline") as e:
        probe(url, request_deadline_s=1.0)
    assert time.monotonic() - started < 30  # without the deadline: forever
    assert "request_deadline_s" in e.value.hint


def test_deadline_is_derived_from_max_tokens_and_pace() -> None:
    s = OpsSpec(request_timeout_s=10, min_tokens_per_s=4.0)
    assert s.deadline_s(100) == 10 + 25
    assert s.deadline_s(None) == 10 + 16384 / 4
    assert s.model_copy(update={"request_deadline_s": 3.0}).deadline_s(100) == 3.0


def test_endless_output_stops_after_max_tokens_chunks() -> None:
    with HostileServer("endless") as url, pytest.raises(StreamFormatError,
                                                        match="more than 8 output chunks"):
        probe(url)


@pytest.mark.parametrize("mode,needle", [
    ("hugeline", "longer than"),
    ("deep", "too deeply"),
    ("text-int", "'text' is a int"),
    ("finish-dict", "'finish_reason' is a dict"),
    ("usage-neg", "-5 is not a count"),
    ("usage-huge", "is not a count in 0..8"),
    ("usage-bool", "True is not a count"),
])
def test_malformed_chunks_are_probe_errors(mode: str, needle: str) -> None:
    with HostileServer(mode) as url, pytest.raises(StreamFormatError, match=needle):
        probe(url)


def test_line_cap_holds_without_newlines() -> None:
    with pytest.raises(StreamFormatError, match="longer than 10 bytes"):
        list(split_lines([b"data: 1\n", b"x" * 6, b"y" * 6], max_line_bytes=10))
    assert list(split_lines([b"a\r\nb", b"c\n", b"d"])) == ["a", "bc", "d"]


def test_huge_metrics_are_ignored_not_read_whole() -> None:
    with HostileServer("metrics-huge") as url, httpx.Client() as c:
        assert metrics.scrape(c, url, max_bytes=1 << 20) is None
        assert metrics.scrape(c, url) is not None  # under the default 32 MB cap
    with HostileServer("valid") as url, httpx.Client() as c:
        assert metrics.scrape(c, url, max_bytes=1 << 20) is not None


def test_closed_port_says_nothing_listens() -> None:
    from tests.conftest import closed_port

    with closed_port() as port, \
            pytest.raises(ProbeError, match="nothing accepts connections") as e:
        probe(f"http://127.0.0.1:{port}")
    assert "log" not in e.value.hint
