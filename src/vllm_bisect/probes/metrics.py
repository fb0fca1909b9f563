"""Scraping vLLM's /metrics (prometheus_client's text parser) and differencing two scrapes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from vllm_bisect import net
from vllm_bisect.probes.limits import MAX_METRICS_BYTES

logger = logging.getLogger(__name__)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
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
        return parse(body.decode("utf-8", errors="replace"))
    except (ValueError, TypeError, IndexError, RecursionError) as err:
        logger.warning("unparseable /metrics from %s: %s", base_url, err)
        return None


def _total(samples: Samples, name: str, **match: str) -> float | None:
    found = [v for (n, labels), v in samples.items() if n == name
             and all(dict(labels).get(k) == want for k, want in match.items())]
    return sum(found) if found else None


def _delta(before: Samples, after: Samples, name: str, **match: str) -> float | None:
    a = _total(after, name, **match)
    if a is None:
        return None
    return a - (_total(before, name, **match) or 0.0)


@dataclass(frozen=True)
class MetricsDelta:
    acceptance_length: float | None
    acceptance_per_position: list[float] | None
    server_itl_ms: float | None
    generation_tokens: float | None


def positions(samples: Samples) -> list[str]:
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    found = {dict(labels).get("position", "") for (n, labels) in samples if n == name}
    return sorted((p for p in found if p.isdigit()), key=int)


def diff(before: Samples, after: Samples) -> MetricsDelta:
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    accepted = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    acc_len = per_pos = None
    if drafts and accepted is not None:
        acc_len = 1.0 + accepted / drafts
        per_pos = []
        for pos in positions(after):
            d = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                       position=pos)
            per_pos.append((d or 0.0) / drafts)
    itl_sum = _delta(before, after, "vllm:inter_token_latency_seconds_sum")
    itl_count = _delta(before, after, "vllm:inter_token_latency_seconds_count")
    server_itl = itl_sum / itl_count * 1000.0 if itl_sum is not None and itl_count else None
    gen = _delta(before, after, "vllm:generation_tokens_total")
    return MetricsDelta(acc_len, per_pos, server_itl, gen)
