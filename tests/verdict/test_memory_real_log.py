"""The memory symptom reads real vLLM 0.25.1 start-up lines (a start on the H200, issue 31)."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.verdict.memory import parse_startup

LOG = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-source" / "serve_startup_full.log"


def test_real_start_up_lines() -> None:
    s = parse_startup(LOG.read_text())
    assert s.kv_cache_tokens == 7_446_449          # "GPU KV cache size: 7,446,449 tokens"
    assert s.kv_cache_gib == 41.54                  # "Available KV cache memory: 41.54 GiB"
    assert s.weights_gib == 0.02                    # "Model loading took 0.02 GiB memory"
    assert len(s.lines) == 3
