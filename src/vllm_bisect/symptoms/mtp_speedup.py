"""``mtp-speedup``: speculative decoding's speed-up over plain decoding (the same load on a
server with and one without ``[serve.speculative]``) fell below ``verdict.min_mtp_speedup``.
One sample per server start."""

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
from vllm_bisect.symptoms.plain import itl_reference

# how triage reads it (comparisons of MTP with plain decoding are triage's own rule):
# a speculative method's accepted length stuck at 1 ("the speculative decoding length is
# stuck at 1", "accept length 1"): no draft token is accepted, so the speed-up is lost
WORDS = Words(
    form="Speculative decoding: the MTP / draft speed-up is gone",
    alone=(r"(?:accept(?:ance|ed)?[\s_-]{0,2}(?:length|len)|spec\w{0,10}\s{1,3}"
           r"(?:decoding\s{1,3})?length|接受长度)[^.。\d]{0,24}?(?<![\d.])1(?![\d.])"),
    means="no draft token accepted")
FLOOR = Key("min_mtp_speedup", "mtp-speedup: bad when speculative / plain output tok/s < "
            "min_mtp_speedup (e.g. 1.5)", ge=MIN_RATE, le=MAX_FACTOR)


def _judge(m: Measurement, ref: Measurement | None, v: Any, floor: int | None) -> Judged:
    low = v.min_mtp_speedup or 0.0
    if m.mtp_speedup is None or m.mtp_on is None:
        return Judged(Verdict.SKIP, "no MTP speed-up measurement")
    ctx = (f", {m.mtp_on.context_tokens}-token context"
           if m.mtp_on.context_tokens is not None else "")
    where = (f"MTP speed-up {m.mtp_speedup:.2f}x at concurrency {m.mtp_on.concurrency}{ctx} "
             f"({m.mtp_on.output_tok_s:.1f} vs {m.mtp_off.output_tok_s if m.mtp_off else 0:.1f}"
             " tok/s)")
    if m.mtp_speedup < low:
        return Judged(Verdict.BAD, f"{where} < {low:.2f}x")
    return Judged(Verdict.GOOD, f"{where} >= {low:.2f}x")


MTP_SPEEDUP = SymptomInfo(
    key="mtp-speedup", about="speculative decoding's speed-up over plain decoding fell",
    direction=Direction.FALLS, noise=Noise.SERVER, judge=_judge,
    # (the plain judge's ITL limit was relative once itl_factor is set: kept as it was)
    needs_reference=itl_reference,
    samples=lambda m: [m.mtp_speedup] if m.mtp_speedup else [],
    keys=(FLOOR,), words=WORDS,
    needs=(Need(("[probe.mtp_speedup]",)), Need(("verdict.min_mtp_speedup",)),
           Need(("[serve.speculative]",))),
    tunable=("min_mtp_speedup",), triage_defaults=(
        ("probe.mtp_speedup", {"concurrency": 16, "requests": 32}, "the tool's default: 16 "
         "requests at once (where the founding MTP benchmark saw MTP lose 22-37%)"),
        ("verdict.min_mtp_speedup", 1.0, "bad when MTP is slower than plain decoding")),
    speed=True)
