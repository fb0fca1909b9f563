"""The probe against ``vllm bench serve`` on the same server (a peer check).

Both count output tokens the server's way, so the probe's mean per-token ``itl_ms`` should match
bench's mean TPOT, and the probe's mean ``chunk_itl_ms`` (one gap per SSE chunk) bench's mean ITL
(also one gap per chunk). Under speculative decoding both per-token numbers also depend on
acceptance, which depends on the prompts (bench's random prompts are not the probe's), so the
check also reports tokens per chunk on both sides and the per-token difference once the probe's
ITL is scaled to bench's tokens per chunk (per-step time x tokens per step). Real numbers:
docs/validation.md (d).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
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
