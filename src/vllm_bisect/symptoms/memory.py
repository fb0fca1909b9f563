"""``memory``: the KV cache capacity at start-up fell, or the memory the weights or the server
hold rose, against the good endpoint's start-up by ``verdict.memory_factor``; or the start ran
out of memory (``verdict/memory.py`` reads the start-up log). Deterministic for a commit and
a config: one start tells.

Bad when the capacity (KV cache tokens, else GPU blocks, else KV cache GiB) falls below the
good endpoint's / ``memory_factor``, or when the weights' memory or the GPU memory the server
holds (NVML) rises above the good endpoint's x ``memory_factor`` (by at least
``MIN_RISE_GIB``: 0.0 -> 0.02 GiB of a tiny model is not a regression).
"""

from __future__ import annotations

import re
from typing import Any

from vllm_bisect.models import FailureKind, Measurement, MemoryResult, Verdict
from vllm_bisect.symptoms.base import MAX_FACTOR, Direction, Judged, Key, Noise, SymptomInfo, Words

FACTOR = Key("memory_factor", "memory: bad when the KV cache capacity (tokens) at start-up falls "
             "below the good endpoint's / memory_factor, or weights / peak memory rise above its "
             "x memory_factor, or the server runs out of memory starting (verdict/memory.py)",
             default=1.1, gt=1.0, le=MAX_FACTOR)
# how triage reads it (its own rules for running out of memory and for start-up logs are
# triage's: triage/symptom_words.py): memory use or KV cache capacity with a change word
WORDS = Words(
    form="Memory: more GPU memory, fewer KV-cache blocks, out of memory",
    said=(r"(?<![\w-])VRAM|显存|(?<![\w-])GPU memory(?![-_ ]util)|memory (?:usage|use|"
          r"footprint|consumption|cost)|(?:more|higher) memory|KV[- ]cache (?:size|"
          r"capacity|usage|memory|tokens)|# GPU blocks"))

MIN_RISE_GIB = 0.25
OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory|larger than the available "
                 r"KV cache memory|No available memory for the cache blocks|larger than the "
                 r"maximum number of tokens that can be stored in KV cache", re.IGNORECASE)
MAX_TEXT = 2_000_000


def oom_start(text: str) -> bool:
    """Does a failed start's reason or log tail say it ran out of memory?"""
    return bool(OOM.search(text[-MAX_TEXT:]))


def _failed(failure: FailureKind | None, reason: str, log_tail: str) -> str | None:
    """Following memory, a start that ran out of memory is bad (not a skip)."""
    return (f"out of memory at start-up: {reason}" if oom_start(f"{reason}\n{log_tail}")
            else None)


def _capacity(m: MemoryResult, ref: MemoryResult) -> tuple[str, float, float] | None:
    for name, a, b in (("KV cache tokens", m.kv_cache_tokens, ref.kv_cache_tokens),
                       ("GPU blocks", m.gpu_blocks, ref.gpu_blocks),
                       ("KV cache GiB", m.kv_cache_gib, ref.kv_cache_gib)):
        if a is not None and b is not None:
            return name, float(a), float(b)
    return None


def judge_memory(m: MemoryResult | None, ref: MemoryResult | None, factor: float
                 ) -> tuple[Verdict, str]:
    """GOOD / BAD / SKIP and why, against the good endpoint's start-up (``ref``)."""
    if m is None:
        return Verdict.SKIP, "the server log says nothing about memory at start-up"
    if ref is None:
        return Verdict.SKIP, "no reference start-up (the good endpoint's) to compare with"
    bad: list[str] = []
    seen: list[str] = []
    cap = _capacity(m, ref)
    if cap is not None:
        name, got, want = cap
        seen.append(f"{name} {got:,.6g} vs {want:,.6g}")
        if got < want / factor:
            bad.append(f"{name} {got:,.6g} < {want:,.6g} / {factor:g}")
    for name, a, b, scale in (("weights GiB", m.weights_gib, ref.weights_gib, 1.0),
                              ("GPU MiB held", m.gpu_used_mib, ref.gpu_used_mib, 1024.0)):
        if a is None or b is None:
            continue
        seen.append(f"{name} {a:,.6g} vs {b:,.6g}")
        if a > b * factor and a - b >= MIN_RISE_GIB * scale:
            bad.append(f"{name} {a:,.6g} > {b:,.6g} x {factor:g}")
    if bad:
        return Verdict.BAD, "memory: " + "; ".join(bad)
    if not seen:
        return Verdict.SKIP, "no memory figure in common with the good endpoint's start-up"
    return Verdict.GOOD, "memory within x" + f"{factor:g}: " + "; ".join(seen)


def _judge(m: Measurement, ref: Measurement | None, v: Any, floor: int | None) -> Judged:
    verdict, why = judge_memory(m.memory, ref.memory if ref else None, v.memory_factor)
    return Judged(verdict, why)


MEMORY = SymptomInfo(
    key="memory", about="start-up memory: the KV cache shrank, memory rose, or it ran out",
    direction=Direction.DIFFERS, noise=Noise.DETERMINISTIC, judge=_judge,
    needs_reference=lambda v: True, failed=_failed, startup_memory=True,
    auto_why=("auto: memory at start-up is deterministic for a commit and a config (one start "
              "per commit tells)"),
    words=WORDS,
    keys=(FACTOR,), tunable=("memory_factor",), triage_defaults=(
        ("probe.requests", 1, "memory is read at start-up; one request checks it serves"),
        ("probe.max_tokens", 16, "one short request"),
        ("verdict.memory_factor", 1.1, "a 10% change in start-up memory")))
