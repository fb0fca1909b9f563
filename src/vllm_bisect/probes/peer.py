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

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vllm_bisect.errors import ProbeError
from vllm_bisect.models import Measurement


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


def _num(doc: Mapping[str, Any], key: str) -> float:
    v = doc.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise ProbeError(f"vllm bench serve result has no number {key!r}",
                         hint="run it with --save-result")
    return float(v)


def _bench_tokens_per_chunk(doc: Mapping[str, Any]) -> float | None:
    lens, itls = doc.get("output_lens"), doc.get("itls")
    if isinstance(lens, list) and isinstance(itls, list) and lens and len(lens) == len(itls):
        per = [o / (len(g) + 1) for o, g in zip(lens, itls, strict=True)
               if isinstance(o, int) and isinstance(g, list) and o > 0]
        if per:
            return statistics.fmean(per)
    al = doc.get("spec_decode_acceptance_length")
    return float(al) if isinstance(al, int | float) else None


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


def _t_interval(xs: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """The t-interval of the mean of ``xs`` (None for fewer than two values)."""
    if len(xs) < 2:
        return None
    from scipy import stats  # here, not at import (scipy.stats is slow to load)

    centre = statistics.fmean(xs)
    half = float(stats.t.ppf(0.5 + confidence / 2, len(xs) - 1)
                 * statistics.stdev(xs) / math.sqrt(len(xs)))
    return centre - half, centre + half


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


# -- concurrent rounds -----------------------------------------------------------------------
@dataclass(frozen=True)
class TimedRequest:
    """One request of a ``vllm bench serve --save-detailed`` file: when it ran (bench's
    ``time.perf_counter`` clock), its TPOT (vLLM's own: chunk gaps summed over the output tokens
    after the first) and its chunk gaps."""

    start_s: float
    end_s: float
    tpot_ms: float
    chunk_gaps_ms: tuple[float, ...]

    def inside(self, lo: float, hi: float) -> float:
        """The fraction of this request's span that lies within [lo, hi]."""
        span = self.end_s - self.start_s
        cut = max(0.0, min(hi, self.end_s) - max(lo, self.start_s))
        return cut / span if span > 0 else float(lo <= self.start_s <= hi)


def bench_requests(doc: Mapping[str, Any]) -> tuple[TimedRequest, ...]:
    """The requests of a ``--save-detailed`` bench file (``start_times``, ``ttfts``, ``itls``,
    ``output_lens``), in file order; requests of one output token carry no TPOT and are left
    out."""
    cols: list[list[Any]] = []
    for key in ("start_times", "ttfts", "itls", "output_lens"):
        col = doc.get(key)
        if not isinstance(col, list) or (cols and len(col) != len(cols[0])):
            raise ProbeError("vllm bench serve result has no per-request start_times/ttfts/"
                             "itls/output_lens", hint="run it with --save-result --save-detailed")
        cols.append(col)
    out: list[TimedRequest] = []
    for st, ttft, gaps, n in zip(*cols, strict=True):
        if not isinstance(n, int) or n < 2 or not gaps:
            continue
        total = float(sum(gaps))
        out.append(TimedRequest(float(st), float(st) + float(ttft) + total,
                                1000.0 * total / (n - 1), tuple(1000.0 * g for g in gaps)))
    return tuple(out)


@dataclass(frozen=True)
class ConcurrentRound:
    """Bench and the probe at the same time on one server. The probe's numbers cover its whole
    window; bench's ``inside_*`` numbers only the bench requests that ran (at least
    ``min_inside`` of their span) within the probe's window, bench's ``*_all`` numbers are its
    own means over all its requests (as it reports them)."""

    probe_itl_ms: float              # mean per-token itl_ms over the probe's requests
    probe_chunk_itl_ms: float        # mean chunk_itl_ms over the probe's requests
    bench_tpot_all_ms: float         # bench's mean_tpot_ms
    bench_itl_all_ms: float          # bench's mean_itl_ms (one gap per chunk)
    inside_tpot_ms: float | None     # mean TPOT of the bench requests inside the probe window
    inside_itl_ms: float | None      # mean of their chunk gaps (bench's ITL definition)
    n_inside: int
    n_bench: int
    # bench's requests in flight over the probe window / bench's concurrency (1.0: bench ran at
    # full concurrency for the probe's whole window, so every probe step had both tools' load)
    coverage: float

    @property
    def diff(self) -> float:
        """Probe per-token ITL / bench TPOT - 1, bench over its requests inside the window."""
        bench = self.inside_tpot_ms if self.inside_tpot_ms is not None else self.bench_tpot_all_ms
        return self.probe_itl_ms / bench - 1.0

    @property
    def chunk_diff(self) -> float:
        bench = self.inside_itl_ms if self.inside_itl_ms is not None else self.bench_itl_all_ms
        return self.probe_chunk_itl_ms / bench - 1.0

    @property
    def diff_all(self) -> float:
        """Against bench's own mean TPOT over all its requests."""
        return self.probe_itl_ms / self.bench_tpot_all_ms - 1.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "diff": self.diff, "chunk_diff": self.chunk_diff,
                "diff_all": self.diff_all}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConcurrentRound:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def concurrent_round(bench: Mapping[str, Any], probe: Measurement,
                     window: tuple[float, float], min_inside: float = 0.9) -> ConcurrentRound:
    """One round from bench's ``--save-detailed`` document and the probe's measurement taken
    in ``window`` (``time.perf_counter`` at the probe's start and end, the clock of bench's
    ``start_times``)."""
    lo, hi = window
    if hi <= lo:
        raise ProbeError(f"the probe's window is empty ({lo} .. {hi})")
    itl = [r.itl_ms for r in probe.requests if r.itl_ms is not None]
    chunk = [r.chunk_itl_ms for r in probe.requests if r.chunk_itl_ms is not None]
    if not itl or not chunk:
        raise ProbeError("the probe measured no per-token ITL to compare",
                         hint="probe with max_tokens > 1")
    reqs = bench_requests(bench)
    inside = [r for r in reqs if r.inside(lo, hi) >= min_inside]
    gaps = [g for r in inside for g in r.chunk_gaps_ms]
    conc = bench.get("max_concurrency")
    c = conc if isinstance(conc, int) and conc > 0 else 1
    busy = sum(r.inside(lo, hi) * (r.end_s - r.start_s) for r in reqs)
    return ConcurrentRound(
        probe_itl_ms=statistics.fmean(itl), probe_chunk_itl_ms=statistics.fmean(chunk),
        bench_tpot_all_ms=_num(bench, "mean_tpot_ms"), bench_itl_all_ms=_num(bench, "mean_itl_ms"),
        inside_tpot_ms=statistics.fmean(r.tpot_ms for r in inside) if inside else None,
        inside_itl_ms=statistics.fmean(gaps) if gaps else None,
        n_inside=len(inside), n_bench=len(reqs), coverage=busy / (c * (hi - lo)))


@dataclass(frozen=True)
class ConcurrentPeer:
    """Probe vs bench over concurrent rounds; differences are probe / bench - 1 per round."""

    diffs: tuple[float, ...]
    mean_diff: float
    median_diff: float
    ci_low: float | None             # t-interval of the mean over rounds (None: one round)
    ci_high: float | None
    pooled_diff: float               # sum of the probe means / sum of the bench means - 1
    chunk_diffs: tuple[float, ...]
    chunk_mean_diff: float
    chunk_ci_low: float | None
    chunk_ci_high: float | None
    diffs_all: tuple[float, ...]     # against bench's own means over all its requests
    min_coverage: float
    confidence: float

    @property
    def n_rounds(self) -> int:
        return len(self.diffs)

    def agrees(self, tolerance: float = 0.03) -> bool:
        return abs(self.mean_diff) <= tolerance

    def resolved(self, tolerance: float = 0.03) -> bool:
        """The whole interval lies within ±tolerance: agreement shown, not merely not refuted."""
        return (self.ci_low is not None and self.ci_high is not None
                and -tolerance <= self.ci_low and self.ci_high <= tolerance)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "diffs": list(self.diffs), "chunk_diffs": list(self.chunk_diffs),
                "diffs_all": list(self.diffs_all), "n_rounds": self.n_rounds,
                "agrees_3pct": self.agrees(0.03), "resolved_3pct": self.resolved(0.03)}


def concurrent_peer_check(rounds: Sequence[ConcurrentRound],
                          confidence: float = 0.95) -> ConcurrentPeer:
    if not rounds:
        raise ProbeError("concurrent peer check needs at least one round")
    diffs = [r.diff for r in rounds]
    chunks = [r.chunk_diff for r in rounds]
    ci, chunk_ci = _t_interval(diffs, confidence), _t_interval(chunks, confidence)
    bench = [r.inside_tpot_ms if r.inside_tpot_ms is not None else r.bench_tpot_all_ms
             for r in rounds]
    return ConcurrentPeer(
        diffs=tuple(diffs), mean_diff=statistics.fmean(diffs),
        median_diff=statistics.median(diffs),
        ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
        pooled_diff=sum(r.probe_itl_ms for r in rounds) / sum(bench) - 1.0,
        chunk_diffs=tuple(chunks), chunk_mean_diff=statistics.fmean(chunks),
        chunk_ci_low=chunk_ci[0] if chunk_ci else None,
        chunk_ci_high=chunk_ci[1] if chunk_ci else None,
        diffs_all=tuple(r.diff_all for r in rounds),
        min_coverage=min(r.coverage for r in rounds), confidence=confidence)
