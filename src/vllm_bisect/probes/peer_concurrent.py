"""The concurrent peer check: rounds in which ``vllm bench serve`` and the probe ran AT THE SAME
TIME on one server (see ``probes.peer``'s docstring). Re-exported by ``probes.peer``."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_bisect.errors import ProbeError
from vllm_bisect.models import Measurement
from vllm_bisect.probes.peer_stats import bench_number as _num
from vllm_bisect.probes.peer_stats import t_interval as _t_interval

__all__ = ["ConcurrentPeer", "ConcurrentRound", "TimedRequest", "bench_requests",
           "concurrent_peer_check", "concurrent_round"]


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
