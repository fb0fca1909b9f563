"""Bounds on what a server may send the probe: a line-length cap for SSE and a size cap for
``/metrics``. The total deadline of every request (headers included) and the body caps are
:mod:`vllm_bisect.net`'s, shared with the builders and the runtime."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from vllm_bisect.errors import StreamFormatError

MAX_LINE_BYTES = 1 << 20        # one SSE line (a chunk with logprobs is a few KB)
MAX_METRICS_BYTES = 32 << 20    # vLLM's /metrics is well under 1 MB


def split_lines(chunks: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Lines of a byte stream (``\\n`` or ``\\r\\n``), refusing any longer than the cap."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        start = 0
        while (i := buf.find(b"\n", start)) >= 0:
            if i - start > max_line_bytes:
                raise _too_long(max_line_bytes)
            yield buf[start:i].rstrip(b"\r").decode("utf-8", errors="replace")
            start = i + 1
        del buf[:start]
        if len(buf) > max_line_bytes:
            raise _too_long(max_line_bytes)
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", errors="replace")


def _too_long(cap: int) -> StreamFormatError:
    return StreamFormatError(f"SSE line longer than {cap} bytes",
                             hint="the server is not speaking vLLM's streaming format")
