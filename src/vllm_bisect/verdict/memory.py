"""The memory symptom (pure): what vLLM logs about memory at start-up (its verdict:
``symptoms/memory.py``).

The lines, as vLLM 0.25.1 writes them (tests/fixtures/vllm-0.25.1/server_logs_last200.txt,
tests/fixtures/vllm-0.25.1-bench/bench_throughput_stdout.txt)::

    [gpu_model_runner.py:5306] Model loading took 0.0 GiB memory and 0.229726 seconds
    [model_runner.py:302] Model loading took 0.0 GiB and 1.143961 seconds
    [gpu_worker.py:538] Available KV cache memory: 41.65 GiB
    [kv_cache_utils.py:2146] GPU KV cache size: 43,673,632 tokens

and as older (V0) vLLM wrote them: ``Loading model weights took 38.5260 GB``,
``# GPU blocks: 80, # CPU blocks: 819``. A start that runs out of memory says so
(``CUDA out of memory``, ``OutOfMemoryError``, ``... larger than the available KV cache
memory``, ``No available memory for the cache blocks``): following the memory symptom that
start is bad, not a skip (the rule that judges a start, and ``MIN_RISE_GIB``, are in
``symptoms/memory.py``; re-exported here).
"""

from __future__ import annotations

import re

from vllm_bisect.models import MemoryResult
from vllm_bisect.symptoms.memory import MAX_TEXT, MIN_RISE_GIB, OOM, judge_memory, oom_start

__all__ = ["MAX_TEXT", "MIN_RISE_GIB", "OOM", "judge_memory", "oom_start", "parse_startup"]

NUM = r"\d{1,3}(?:,\d{3}){1,5}|\d{1,15}"
KV_TOKENS = re.compile(rf"GPU KV cache size:\s{{0,4}}(?P<n>{NUM})\s{{0,4}}tokens")
KV_GIB = re.compile(r"Available KV cache memory:\s{0,4}(?P<x>\d{1,7}(?:\.\d{1,6})?)\s{0,4}GiB")
BLOCKS = re.compile(r"# GPU blocks:\s{0,4}(?P<n>\d{1,12})")
WEIGHTS = re.compile(r"(?:Model loading took|Loading model weights took)\s{1,4}"
                     r"(?P<x>\d{1,7}(?:\.\d{1,6})?)\s{0,4}(?P<unit>GiB|GB)")


def _last(pat: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pat.finditer(text):  # noqa: B007 (the last one: a later start wins)
        pass
    return found


def parse_startup(log: str, gpu_used_mib: float | None = None) -> MemoryResult | None:
    """The memory a server's start-up log reports (the last start in the log); None when it
    says nothing about memory."""
    text = log[-MAX_TEXT:]
    kv, gib, blocks, weights = (_last(p, text) for p in (KV_TOKENS, KV_GIB, BLOCKS, WEIGHTS))
    if not any((kv, gib, blocks, weights)) and gpu_used_mib is None:
        return None
    w = None
    if weights is not None:
        w = float(weights.group("x")) * (1.0 if weights.group("unit") == "GiB" else 1e9 / 2**30)
    lines = [text[text.rfind("\n", 0, m.start()) + 1:m.end()].strip()[-200:]
             for m in (weights, gib, kv, blocks) if m is not None]
    return MemoryResult(
        kv_cache_tokens=int(kv.group("n").replace(",", "")) if kv else None,
        kv_cache_gib=float(gib.group("x")) if gib else None,
        gpu_blocks=int(blocks.group("n")) if blocks else None,
        weights_gib=round(w, 4) if w is not None else None,
        gpu_used_mib=gpu_used_mib, lines=lines)
