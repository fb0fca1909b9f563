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
        except RecursionError:
            raise StreamFormatError("SSE data line nests JSON too deeply",
                                    hint="the server is not vLLM-compatible") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
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


def has_choice(obj: dict[str, Any]) -> bool:
    """Does a chunk carry a well-formed choice (``choices`` a list whose first item is an
    object with ``text``, ``delta`` or ``finish_reason``)? ``choices`` of another type, or a
    choice with none of these, is malformed; an empty list (the usage-only chunk) or none at
    all carries no choice."""
    choices = obj.get("choices")
    if choices is None:
        return False
    if not isinstance(choices, list):
        raise StreamFormatError(f"chunk 'choices' is a {type(choices).__name__}, not a list: "
                                f"{choices!r:.80}", hint="the server is not vLLM-compatible")
    if choices and not isinstance(choices[0], dict):
        raise StreamFormatError(f"malformed choice in chunk: {choices[0]!r:.120}")
    if choices and not any(k in choices[0] for k in ("text", "delta", "finish_reason")):
        raise StreamFormatError(f"a choice carries no text, delta or finish_reason: "
                                f"{choices[0]!r:.120}", hint="the server is not vLLM-compatible")
    return bool(choices)


def chunk_text(obj: dict[str, Any]) -> str | None:
    """The output text a chunk carries (None when it carries no output)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise StreamFormatError(f"malformed choice in chunk: {choice!r:.120}")
    if "text" in choice:
        text = _str_or_none(choice["text"], "text")
    else:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise StreamFormatError(f"chunk 'delta' is not an object: {delta!r:.120}")
        text = _str_or_none(delta.get("content"), "delta.content")
        if text is None:
            text = (_str_or_none(delta.get("reasoning_content"), "delta.reasoning_content")
                    or _str_or_none(delta.get("reasoning"), "delta.reasoning"))
    return text if text else None


def finish_reason(obj: dict[str, Any]) -> str | None:
    """The first choice's finish_reason (a string, or None while it streams)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return _str_or_none(choices[0].get("finish_reason"), "finish_reason")


def completion_tokens(obj: dict[str, Any], bound: int) -> int | None:
    """``usage.completion_tokens`` of a chunk, checked: an int (not a bool) in 0..bound."""
    usage = obj.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise StreamFormatError(f"chunk 'usage' is not an object: {usage!r:.120}")
    n = usage.get("completion_tokens")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= bound:
        raise StreamFormatError(f"usage.completion_tokens {n!r:.40} is not a count in 0..{bound}",
                                hint="the server's token counts cannot be trusted; "
                                     "is it vLLM-compatible?")
    return n


def prompt_tokens(obj: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens`` of a chunk when it is a plain count (an int, not a bool, >= 0)."""
    usage = obj.get("usage")
    n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_PROMPT_TOKENS:
        raise StreamFormatError(f"usage.prompt_tokens {n!r:.40} is not a token count",
                                hint="the server's token counts cannot be trusted; "
                                     "is it vLLM-compatible?")
    return n


MAX_PROMPT_TOKENS = 10_000_000


def _str_or_none(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise StreamFormatError(f"chunk field '{name}' is a {type(value).__name__}, not a string: "
                            f"{value!r:.80}", hint="the server is not vLLM-compatible")
