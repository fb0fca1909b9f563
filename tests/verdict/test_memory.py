"""The memory symptom's log reading and verdict, on vLLM's real start-up lines."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.models import Verdict
from vllm_bisect.verdict.memory import judge_memory, oom_start, parse_startup

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_reads_the_real_vllm_0_25_1_start_up_lines() -> None:
    log = (FIXTURES / "vllm-0.25.1" / "server_logs_last200.txt").read_text()
    m = parse_startup(log)
    assert m is not None
    # three servers started in this log: the last start counts
    assert m.kv_cache_tokens == 43_689_088 and m.kv_cache_gib == 41.67
    assert m.weights_gib == 0.0 and m.gpu_blocks is None
    assert any("GPU KV cache size: 43,689,088 tokens" in line for line in m.lines)
    bench = parse_startup((FIXTURES / "vllm-0.25.1-bench" / "bench_throughput_stdout.txt")
                          .read_text())
    assert bench is not None and bench.kv_cache_tokens == 36_341_072  # "Model loading took X GiB and"


def test_reads_the_older_v0_lines_and_an_out_of_memory_start() -> None:
    # vllm-project/vllm#11230 (v0.6.4.post1)
    log = ("INFO 12-16 02:38:24 model_runner.py:1077] Loading model weights took 38.5260 GB\n"
           "INFO 12-16 02:38:41 gpu_executor.py:113] # GPU blocks: 80, # CPU blocks: 819\n"
           "ERROR 12-16 02:38:41 engine.py:366] The model's max seq len (8192) is larger than the "
           "maximum number of tokens that can be stored in KV cache (1280).\n")
    m = parse_startup(log)
    assert m is not None and m.gpu_blocks == 80 and m.weights_gib is not None
    assert abs(m.weights_gib - 38.526e9 / 2**30) < 1e-3
    assert oom_start(log)
    assert oom_start("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 23.04 GiB")
    assert not oom_start("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert parse_startup("INFO Starting vLLM server on http://127.0.0.1:8000") is None


def test_capacity_falls_or_memory_rises_by_more_than_the_factor() -> None:
    good = parse_startup("Model loading took 16.00 GiB memory and 1 seconds\n"
                         "GPU KV cache size: 720,896 tokens\n")
    less = parse_startup("Model loading took 16.00 GiB memory and 1 seconds\n"
                         "GPU KV cache size: 589,824 tokens\n")
    same = parse_startup("Model loading took 16.10 GiB memory and 1 seconds\n"
                         "GPU KV cache size: 700,000 tokens\n")
    heavier = parse_startup("Model loading took 24.00 GiB memory and 1 seconds\n")
    v, why = judge_memory(less, good, 1.1)
    assert v is Verdict.BAD and "KV cache tokens 589,824 < 720,896 / 1.1" in why
    assert judge_memory(same, good, 1.1)[0] is Verdict.GOOD
    v, why = judge_memory(heavier, good, 1.1)
    assert v is Verdict.BAD and "weights GiB 24 > 16 x 1.1" in why
    tiny = parse_startup("Model loading took 0.0 GiB memory\n")
    assert judge_memory(parse_startup("Model loading took 0.02 GiB memory\n"), tiny, 1.1)[0] \
        is Verdict.GOOD  # 0.0 -> 0.02 GiB is below MIN_RISE_GIB
    assert judge_memory(None, good, 1.1)[0] is Verdict.SKIP
    assert judge_memory(good, None, 1.1)[0] is Verdict.SKIP
