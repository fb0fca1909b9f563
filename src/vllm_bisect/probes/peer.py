"""The probe against ``vllm bench serve`` on the same server (a peer check).

Both count output tokens the server's way, so the probe's mean per-token ``itl_ms`` should match
bench's mean TPOT, and the probe's mean ``chunk_itl_ms`` (one gap per SSE chunk) bench's mean ITL
(also one gap per chunk). Under speculative decoding both per-token numbers also depend on
acceptance, which depends on the prompts (bench's random prompts are not the probe's), so the
check also reports tokens per chunk on both sides and the per-token difference once the probe's
ITL is scaled to bench's tokens per chunk (per-step time x tokens per step). Real numbers:
docs/validation.md (d).

A one-shot check (bench's window, then the probe's) also compares two server speeds: on a
host-bound server the speed drifts by more than 3% over tens of seconds (validation.md (e)).
``paired_peer_check`` compares INTERLEAVED blocks instead (bench, probe, probe, bench, ...: ABBA,
so a linear drift cancels): one difference per adjacent pair, their mean, median and t-interval,
and the pooled ratio over all blocks. On the H200 the drift between blocks 5-30 s apart was
±20-30%, larger than any tool difference (validation.md (f)).

``concurrent_peer_check`` compares rounds in which bench and the probe ran AT THE SAME TIME on
one server: their requests share the engine's steps, so the drift hits both alike and each
round's difference is free of it. Bench's ``--save-detailed`` start times (``time.perf_counter``,
CLOCK_MONOTONIC on Linux, one clock for every process of a host) place its requests against the
probe's window, so only bench requests that ran inside it are compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vllm_bisect.errors import ProbeError
from vllm_bisect.models import Measurement
from vllm_bisect.probes.peer_concurrent import (
    ConcurrentPeer,
    ConcurrentRound,
    TimedRequest,
    bench_requests,
    concurrent_peer_check,
    concurrent_round,
)
from vllm_bisect.probes.peer_stats import bench_number as _num
from vllm_bisect.probes.peer_stats import bench_tokens_per_chunk as _bench_tokens_per_chunk
from vllm_bisect.probes.peer_stats import t_interval as _t_interval

__all__ = ["ConcurrentPeer", "ConcurrentRound", "PairedPeer", "PeerBlock", "PeerCheck",
           "PeerSide", "TimedRequest", "abba_order", "bench_block", "bench_requests",
           "concurrent_peer_check", "concurrent_round", "paired_peer_check", "peer_check",
           "probe_block"]


@dataclass(frozen=True)
class PeerCheck:
    bench_tpot_ms: float
    probe_itl_ms: float
    bench_itl_ms: float            # per chunk
    probe_chunk_itl_ms: float
    bench_tokens_per_chunk: float | None
    probe_tokens_per_chunk: float | None

    @property
    def per_token_diff(self) -> float:
        return self.probe_itl_ms / self.bench_tpot_ms - 1.0

    @property
    def per_chunk_diff(self) -> float:
        return self.probe_chunk_itl_ms / self.bench_itl_ms - 1.0

    @property
    def acceptance_adjusted_diff(self) -> float | None:
        """Per-token difference with the probe's ITL scaled to bench's tokens per chunk."""
        if not self.bench_tokens_per_chunk or not self.probe_tokens_per_chunk:
            return None
        scaled = self.probe_itl_ms * self.probe_tokens_per_chunk / self.bench_tokens_per_chunk
        return scaled / self.bench_tpot_ms - 1.0

    def agrees(self, tolerance: float = 0.03) -> bool:
        return abs(self.per_token_diff) <= tolerance


def peer_check(m: Measurement, bench: Mapping[str, Any]) -> PeerCheck:
    """Compare one probe measurement with a ``vllm bench serve --save-result`` document (run
    with the same output length, ``--ignore-eos`` and a pinned temperature)."""
    itl = [r.itl_ms for r in m.requests if r.itl_ms is not None]
    chunk = [r.chunk_itl_ms for r in m.requests if r.chunk_itl_ms is not None]
    if not itl or not chunk:
        raise ProbeError("the probe measured no per-token ITL to compare",
                         hint="probe with max_tokens > 1")
    tpc = [r.tokens_per_chunk for r in m.requests if r.n_chunks]
    return PeerCheck(
        bench_tpot_ms=_num(bench, "mean_tpot_ms"), probe_itl_ms=statistics.fmean(itl),
        bench_itl_ms=_num(bench, "mean_itl_ms"), probe_chunk_itl_ms=statistics.fmean(chunk),
        bench_tokens_per_chunk=_bench_tokens_per_chunk(bench),
        probe_tokens_per_chunk=statistics.fmean(tpc) if tpc else None)


# -- interleaved blocks ----------------------------------------------------------------------
class PeerSide(StrEnum):
    BENCH = "bench"
    PROBE = "probe"


@dataclass(frozen=True)
class PeerBlock:
    """One block of requests by one tool: its mean per-token time (bench's ``mean_tpot_ms``,
    the probe's mean ``itl_ms``) and the per-request values behind it."""

    side: PeerSide
    mean_ms: float
    per_request_ms: tuple[float, ...] = ()


def bench_block(doc: Mapping[str, Any]) -> PeerBlock:
    """A ``vllm bench serve --save-result [--save-detailed]`` document as a block. Per-request
    TPOT (detailed files only) is vLLM's own: the request's inter-chunk gaps summed over its
    output tokens after the first."""
    per: list[float] = []
    lens, itls = doc.get("output_lens"), doc.get("itls")
    if isinstance(lens, list) and isinstance(itls, list) and len(lens) == len(itls):
        per = [1000.0 * sum(g) / (o - 1) for o, g in zip(lens, itls, strict=True)
               if isinstance(o, int) and o > 1 and isinstance(g, list)]
    return PeerBlock(PeerSide.BENCH, _num(doc, "mean_tpot_ms"), tuple(per))


def probe_block(m: Measurement) -> PeerBlock:
    itl = [r.itl_ms for r in m.requests if r.itl_ms is not None]
    if not itl:
        raise ProbeError("the probe measured no per-token ITL to compare",
                         hint="probe with max_tokens > 1")
    return PeerBlock(PeerSide.PROBE, statistics.fmean(itl), tuple(itl))


@dataclass(frozen=True)
class PairedPeer:
    """Probe vs bench over interleaved blocks. Differences are probe / bench - 1."""

    pair_diffs: tuple[float, ...]
    mean_diff: float
    median_diff: float
    # per ABBA quad (two pairs of opposite order): probe blocks / bench blocks - 1, free of a
    # linear drift within the quad (a pair's difference carries the drift's sign: the pairs
    # alternate around the truth, so a t-interval over pairs would be widened by the drift)
    quad_diffs: tuple[float, ...]
    ci_low: float | None            # t-interval of the mean over quads (pairs if < 2 quads)
    ci_high: float | None
    ci_basis: str                   # "quads", "pairs" or "none" (one pair)
    pooled_diff: float              # mean of the probe blocks / mean of the bench blocks - 1
    first_pair_diff: float          # what a one-shot check (the first two blocks) would say
    bench_first: tuple[bool, ...]   # per pair: did bench run first
    confidence: float

    @property
    def n_pairs(self) -> int:
        return len(self.pair_diffs)

    @property
    def balanced(self) -> bool:
        """As many pairs with bench first as with the probe first (a linear drift cancels)."""
        return 2 * sum(self.bench_first) == len(self.bench_first)

    def agrees(self, tolerance: float = 0.03) -> bool:
        return abs(self.mean_diff) <= tolerance

    def as_dict(self) -> dict[str, Any]:
        return {"pair_diffs": list(self.pair_diffs), "mean_diff": self.mean_diff,
                "median_diff": self.median_diff, "quad_diffs": list(self.quad_diffs),
                "ci_low": self.ci_low, "ci_high": self.ci_high, "ci_basis": self.ci_basis,
                "confidence": self.confidence, "pooled_diff": self.pooled_diff,
                "first_pair_diff": self.first_pair_diff, "bench_first": list(self.bench_first),
                "n_pairs": self.n_pairs, "balanced": self.balanced,
                "agrees_3pct": self.agrees(0.03)}


def abba_order(pairs: int) -> list[PeerSide]:
    """The block order: bench, probe, probe, bench, bench, probe, ... (``pairs`` pairs)."""
    out: list[PeerSide] = []
    for k in range(pairs):
        first, second = ((PeerSide.BENCH, PeerSide.PROBE) if k % 2 == 0
                         else (PeerSide.PROBE, PeerSide.BENCH))
        out += [first, second]
    return out


def paired_peer_check(blocks: Sequence[PeerBlock], confidence: float = 0.95) -> PairedPeer:
    """Pair blocks (in the order they ran) two by two, each pair one bench and one probe block,
    and compare the probe with bench within each pair."""
    if len(blocks) < 2 or len(blocks) % 2:
        raise ProbeError(f"interleaved peer check needs an even number of blocks, got {len(blocks)}",
                         hint="run bench and probe blocks in pairs")
    diffs: list[float] = []
    bench_first: list[bool] = []
    pairs: list[tuple[float, float]] = []   # (bench, probe) means
    for a, b in zip(blocks[::2], blocks[1::2], strict=True):
        if {a.side, b.side} != {PeerSide.BENCH, PeerSide.PROBE}:
            raise ProbeError(f"a pair of blocks is {a.side.value}, {b.side.value}",
                             hint="each pair needs one bench and one probe block")
        bench, probe = (a, b) if a.side is PeerSide.BENCH else (b, a)
        diffs.append(probe.mean_ms / bench.mean_ms - 1.0)
        bench_first.append(a.side is PeerSide.BENCH)
        pairs.append((bench.mean_ms, probe.mean_ms))
    quads = [(pairs[k][1] + pairs[k + 1][1]) / (pairs[k][0] + pairs[k + 1][0]) - 1.0
             for k in range(0, len(pairs) - 1, 2) if bench_first[k] != bench_first[k + 1]]
    mean = statistics.fmean(diffs)
    basis, lo, hi = "none", None, None
    for name, xs in (("quads", quads), ("pairs", diffs)):
        interval = _t_interval(xs, confidence)
        if interval is not None:
            basis, (lo, hi) = name, interval
            break
    probes = [x.mean_ms for x in blocks if x.side is PeerSide.PROBE]
    benches = [x.mean_ms for x in blocks if x.side is PeerSide.BENCH]
    return PairedPeer(
        pair_diffs=tuple(diffs), mean_diff=mean, median_diff=statistics.median(diffs),
        quad_diffs=tuple(quads), ci_low=lo, ci_high=hi, ci_basis=basis,
        pooled_diff=statistics.fmean(probes) / statistics.fmean(benches) - 1.0,
        first_pair_diff=diffs[0], bench_first=tuple(bench_first), confidence=confidence)
