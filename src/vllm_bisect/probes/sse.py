"""Reading vLLM's server-sent events with receive times (one parsed event per data line).

Why not httpx-sse (evaluated, 0.4.3): its ``EventSource.iter_sse`` yields an event when the
blank line that ends it is decoded, so a receive time taken per yielded event is the blank
line's, not the data line's; when the two arrive in different reads (a proxy, a split TCP
segment) every stamp is late by the gap. ``benchmarks/sse_timing.py`` measures it: with the
blank line 0.1 s after each data line, httpx-sse's stamps were 110-156 ms late, these 0.2-0.6
ms. It also exposes no per-line hook and refuses a response whose Content-Type is not
text/event-stream. The probe times every data line as it arrives, which the ITL needs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from vllm_bisect.errors import StreamFormatError


@dataclass(frozen=True)
class Event:
    t: float                     # time.perf_counter() when the line arrived
    data: dict[str, Any] | None  # None for the [DONE] sentinel


def iter_events(lines: Iterable[str]) -> Iterator[Event]:
    """Parse ``data: {json}`` lines; blank lines separate events; ``:`` lines are comments."""
    for line in lines:
        t = time.perf_counter()
        if not line or line.startswith(":"):
            continue
        if not line.startswith("data:"):
            raise StreamFormatError(
                f"malformed SSE line (expected 'data: ...'): {line[:120]!r}",
                hint="the server is not speaking vLLM's streaming format; is the URL a vLLM server?",
            )
        payload = line[5:].strip()
        if payload == "[DONE]":
            yield Event(t, None)
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            raise StreamFormatError(
                f"SSE data line is not JSON: {payload[:120]!r}",
                hint="the stream was corrupted or the server is not vLLM-compatible",
            ) from None
        if not isinstance(obj, dict):
            raise StreamFormatError(f"SSE data is not a JSON object: {payload[:120]!r}")
        if "error" in obj and "choices" not in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamFormatError(f"server sent an error inside the stream: {msg}")
        yield Event(t, obj)


def chunk_text(obj: dict[str, Any]) -> str | None:
    """The output text a chunk carries (None when it carries no output)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise StreamFormatError(f"malformed choice in chunk: {choice!r:.120}")
    if "text" in choice:
        text = choice["text"]
    else:
        delta = choice.get("delta") or {}
        text = delta.get("content") if isinstance(delta, dict) else None
        if text is None and isinstance(delta, dict):
            text = delta.get("reasoning_content") or delta.get("reasoning")
    return text if text else None
