"""``throughput``: output tok/s under load fell (``[probe.load]``, or vLLM's own benchmark,
``[probe.bench]``). One sample per server start."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.symptoms.base import (
    MAX_FACTOR,
    MIN_RATE,
    Direction,
    Judged,
    Key,
    Need,
    Noise,
    SymptomInfo,
    Words,
)

MAX_TOK_S = 1e8   # (issue 49: no server is this fast; beyond it every commit is bad)
FACTOR = Key("throughput_factor", "throughput: bad when output tok/s < the good endpoint's / "
             "throughput_factor, or below min_throughput_tok_s", gt=1.0, le=MAX_FACTOR)
FLOOR = Key("min_throughput_tok_s", "throughput: bad when output tok/s < this (or < the good "
            "endpoint's / throughput_factor, whichever is higher)", ge=MIN_RATE, le=MAX_TOK_S)
# a rate unit is the throughput metric whatever its spelling: per second or per minute,
# tokens, requests or samples, "t/s" and per-user "t/s/u"; token generation ("TG") is the
# generation rate of a run, in tok/s; QPS (queries per second) is a request rate;
# "troughput" is how some reporters type it
WORDS = Words(
    form="Throughput: fewer tokens or requests per second under load",
    metric=(r"t(?:h)?roughput|(?<![A-Za-z0-9_])QPS(?![A-Za-z0-9_])|"
            r"(?<!first )(?<!first-)token\s{1,3}generation|"
            r"text\s{1,3}generation\s{1,3}speed|"
            r"(?<![A-Za-z0-9_])TG(?![A-Za-z0-9_])|requests/s|req/s|samples/s|(?<![A-Za-z0-9_])TPS|"
            r"tok(?:en)?s?/s|(?<![A-Za-z])(?:it|items)/s|吞吐|"
            r"req(?:uest)?s?/min|(?:samples|requests|tokens)\s{1,3}per\s{1,3}"
            r"(?:second|minute)|(?<![A-Za-z0-9_/])t/s(?:/u)?(?![A-Za-z])"))


def throughput_of(m: Measurement) -> tuple[float | None, str]:
    """Output tok/s from the load probe, else from vLLM's benchmark; and how it was measured."""
    if m.load is not None:
        return m.load.output_tok_s, (f"{m.load.output_tok_s:.1f} output tok/s at concurrency "
                                     f"{m.load.concurrency}")
    if m.bench is not None and m.bench.output_tok_s is not None:
        return m.bench.output_tok_s, (f"{m.bench.output_tok_s:.1f} output tok/s "
                                      f"(vllm bench {m.bench.tool})")
    return None, ""


def _judge(m: Measurement, ref: Measurement | None, v: Any, floor: int | None) -> Judged:
    got, where = throughput_of(m)
    if got is None:
        return Judged(Verdict.SKIP, "no throughput measurement")
    limits = []
    if v.min_throughput_tok_s is not None:
        limits.append(v.min_throughput_tok_s)
    ref_tok_s = throughput_of(ref)[0] if ref is not None else None
    if v.throughput_factor is not None and ref_tok_s is not None:
        limits.append(ref_tok_s / v.throughput_factor)
    low = max(limits) if limits else 0.0
    if got < low:
        return Judged(Verdict.BAD, f"{where} < {low:.1f}")
    return Judged(Verdict.GOOD, f"{where} >= {low:.1f}")


def _samples(m: Measurement) -> list[float]:
    tok_s, _ = throughput_of(m)
    return [tok_s] if tok_s else []


THROUGHPUT = SymptomInfo(
    key="throughput", about="output tok/s under load fell ([probe.load] or [probe.bench])",
    direction=Direction.FALLS, noise=Noise.SERVER, judge=_judge,
    needs_reference=lambda v: True, samples=_samples, factor_key="throughput_factor",
    keys=(FACTOR, FLOOR),
    needs=(Need(("[probe.load]", "[probe.bench]")),
           Need(("verdict.throughput_factor", "verdict.min_throughput_tok_s"))),
    words=WORDS, tunable=("throughput_factor",), speed=True, metric_words=("throughput",))
