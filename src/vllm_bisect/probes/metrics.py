"""Scraping vLLM's /metrics (prometheus_client's text parser) and differencing two scrapes."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from vllm_bisect import net
from vllm_bisect.probes.limits import MAX_METRICS_BYTES

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# the families :func:`diff` reads (their ``_total``, ``_sum`` and ``_count`` samples): a scrape
# parses these lines only (vLLM's /metrics has ~500 lines, mostly histogram buckets nothing
# here reads; all of them took ~25 ms of CPU a scrape, two scrapes a server)
READ = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens",
        "vllm:inter_token_latency_seconds", "vllm:generation_tokens")


def _name(line: str) -> str:
    """The metric a line is about: a sample's name, or the one ``# HELP`` / ``# TYPE`` names."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else ""
    return line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""


def read_lines(text: str, read: tuple[str, ...] = READ) -> str:
    """The lines of ``text`` about the families ``read`` names (no histogram buckets)."""
    return "".join(ln for ln in text.splitlines(keepends=True)
                   if (n := _name(ln)).startswith(read) and not n.endswith("_bucket"))


def parse(text: str, read: tuple[str, ...] | None = None) -> Samples:
    """Every sample of a /metrics text, or (``read``) those of the families it names."""
    out: Samples = {}
    if read is not None:
        text = read_lines(text, read)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def scrape(client: httpx.Client, base_url: str, max_bytes: int = MAX_METRICS_BYTES,
           deadline_s: float = 30.0) -> Samples | None:
    """The samples of ``/metrics``; None when it is missing, too large, too slow or garbled
    (the spec-decode counters are an extra, never a reason to skip a commit)."""
    try:
        status, body = net.get(client, f"{base_url}/metrics", deadline_s=deadline_s,
                               max_bytes=max_bytes, timeout=10.0)
    except net.TooLarge:
        logger.warning("/metrics of %s is larger than %d bytes: ignored", base_url, max_bytes)
        return None
    except (httpx.HTTPError, net.NetLimitError) as err:
        logger.debug("metrics scrape failed: %s", err)
        return None
    if status != 200:
        return None
    try:
        return parse(body.decode("utf-8", errors="replace"), READ)
    except (ValueError, TypeError, IndexError, RecursionError) as err:
        logger.warning("unparseable /metrics from %s: %s", base_url, err)
        return None


def _total(samples: Samples, name: str, **match: str) -> float | None:
    found = [v for (n, labels), v in samples.items() if n == name
             and all(dict(labels).get(k) == want for k, want in match.items())]
    return sum(found) if found else None


# accepted tokens per draft without per-position counters to bound it: no speculative method
# proposes more (vLLM's num_speculative_tokens is a few, suffix decoding's up to 32)
MAX_DRAFT_TOKENS = 64


class Unavailable(Exception):
    """A counter delta that cannot be believed: the value is "not available", with this
    reason (never a number, never NaN)."""


def _delta(before: Samples, after: Samples, name: str, **match: str) -> float | None:
    """How much counter ``name`` grew between the scrapes (None: the server has no such
    counter); :class:`Unavailable` when it is not finite or went down (a restart)."""
    a = _total(after, name, **match)
    if a is None:
        return None
    b = _total(before, name, **match) or 0.0
    label = name + "".join(f"{{{k}={v}}}" for k, v in match.items())
    if not (math.isfinite(a) and math.isfinite(b)):
        raise Unavailable(f"{label} is not a finite count ({b} -> {a})")
    if a < b:
        raise Unavailable(f"{label} went down ({b:g} -> {a:g}): the server's counters were "
                          "reset (a restart?)")
    return a - b


@dataclass(frozen=True)
class MetricsDelta:
    acceptance_length: float | None
    acceptance_per_position: list[float] | None
    server_itl_ms: float | None
    generation_tokens: float | None
    # why a value above is None although /metrics had its counters ("not available: ...")
    unavailable: tuple[str, ...] = ()


def positions(samples: Samples) -> list[str]:
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    found = {dict(labels).get("position", "") for (n, labels) in samples if n == name}
    return sorted((p for p in found if p.isdigit()), key=int)


def _acceptance(before: Samples, after: Samples) -> tuple[float | None, list[float] | None]:
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    accepted = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    if not drafts or accepted is None:
        if accepted and drafts == 0:
            raise Unavailable(f"{accepted:g} tokens accepted but no drafts proposed")
        return None, None
    pos = positions(after)
    most = len(pos) or MAX_DRAFT_TOKENS
    if accepted > drafts * most:
        raise Unavailable(f"{accepted:g} tokens accepted over {drafts:g} drafts: more than "
                          f"{most} a draft" + (f" ({most} positions)" if pos else ""))
    per_pos = []
    for p in pos:
        d = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                   position=p) or 0.0
        if d > drafts:
            raise Unavailable(f"{d:g} tokens accepted at position {p} over {drafts:g} drafts")
        per_pos.append(d / drafts)
    return 1.0 + accepted / drafts, per_pos


def diff(before: Samples, after: Samples) -> MetricsDelta:
    """What the server counted between two scrapes. A delta that is not finite, a counter
    that went down, or more accepted tokens than the drafts could hold is "not available"
    (None, its reason in ``unavailable``), never a number."""
    why: list[str] = []

    def guarded(f: Callable[[], _T], none: _T) -> _T:
        try:
            return f()
        except Unavailable as e:
            why.append(str(e))
            return none

    nothing: tuple[float | None, list[float] | None] = (None, None)
    acc_len, per_pos = guarded(lambda: _acceptance(before, after), nothing)

    def itl() -> float | None:
        total = _delta(before, after, "vllm:inter_token_latency_seconds_sum")
        count = _delta(before, after, "vllm:inter_token_latency_seconds_count")
        return total / count * 1000.0 if total is not None and count else None

    server_itl = guarded(itl, None)
    gen = guarded(lambda: _delta(before, after, "vllm:generation_tokens_total"), None)

    def finite(name: str, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):  # (e.g. 1e308 - -1e308)
            why.append(f"{name} is {value}")
            return None
        return value

    acc_len = finite("acceptance length", acc_len)
    if per_pos is not None and not all(math.isfinite(x) for x in per_pos):
        why.append("acceptance per position is not finite")
        per_pos = None
    return MetricsDelta(acc_len, per_pos, finite("server ITL", server_itl),
                        finite("generation tokens", gen),
                        tuple(f"/metrics: not available: {w}" for w in why))
