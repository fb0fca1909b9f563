"""The Chrome-trace reader: decode steps, kernels by correlation, idle gaps, fallbacks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from vllm_bisect.errors import ProbeError
from vllm_bisect.explain.trace import summarize, worker_trace


def x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1,
      corr: int | None = None) -> dict[str, Any]:
    args = {} if corr is None else {"correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": args}


def step(t: float, name: str, kernels: list[tuple[str, float]], corr0: int, gpu_at: float
         ) -> list[dict[str, Any]]:
    """A step's annotation at t (host 50 us), an op, launches, kernels from gpu_at on."""
    ev = [x("user_annotation", name, t, 50.0), x("cpu_op", "aten::copy_", t, 10.0),
          x("cpu_op", "aten::nested", t + 1, 5.0)]
    g = gpu_at
    for i, (k, dur) in enumerate(kernels):
        ev.append(x("cuda_runtime", "cudaLaunchKernel", t + 20 + i, 0.5, corr=corr0 + i))
        ev.append(x("kernel", k, g, dur, pid=0, tid=7, corr=corr0 + i))
        g += dur
    return ev


def write(path: Path, events: list[dict[str, Any]], gz: bool = False) -> Path:
    data = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


DECODE = "execute_context_0(0)_generation_1(4)"


def test_decode_steps_kernels_idle_and_ops(tmp_path: Path) -> None:
    ev = step(0, "execute_context_1(30)_generation_0(0)", [("prefill_k", 500.0)], 1, 30)
    # decode steps: kernels run late (async scheduling) but belong to the launching step
    ev += step(1000, DECODE, [("a", 100.0), ("b", 50.0)], 10, 1200)
    ev += step(1100, DECODE, [("a", 110.0), ("b", 50.0)], 20, 1400)
    ev += step(1200, DECODE, [("a", 90.0), ("c", 30.0)], 30, 1700)
    s = summarize(write(tmp_path / "w.pt.trace.json.gz", ev, gz=True))
    assert s.steps == 3 and s.segmentation.startswith("vLLM step annotations")
    assert s.kernel_us == pytest.approx({"a": 100.0, "b": 100.0 / 3, "c": 10.0})
    assert "prefill_k" not in s.kernel_us
    assert s.launches == 2.0
    assert s.cpu_op_us == {"aten::copy_": 10.0}  # the nested op is inside it
    # idle: 1350 -> 1400 and 1560 -> 1700
    assert s.gpu_idle_us == pytest.approx((50.0 + 140.0) / 2)
    assert s.host_us == 50.0
    assert s.gpu_busy_us == pytest.approx(100.0 + 100.0 / 3 + 10.0)


def test_without_correlations_a_kernel_goes_to_the_step_it_starts_in(tmp_path: Path) -> None:
    ev = [x("user_annotation", DECODE, 0, 10), x("kernel", "a", 5, 100, pid=0),
          x("user_annotation", DECODE, 200, 10), x("kernel", "a", 205, 300, pid=0)]
    s = summarize(write(tmp_path / "t.pt.trace.json", ev))
    assert s.kernel_us == {"a": 200.0} and s.gpu_idle_us == 100.0


def test_profiler_steps_then_the_whole_trace_as_fallbacks(tmp_path: Path) -> None:
    ev = [x("user_annotation", "ProfilerStep#1", 0, 100), x("kernel", "a", 5, 50, pid=0),
          x("user_annotation", "ProfilerStep#2", 100, 100), x("kernel", "a", 105, 70, pid=0)]
    s = summarize(write(tmp_path / "p.pt.trace.json", ev))
    assert s.steps == 2 and "ProfilerStep" in s.segmentation and s.kernel_us == {"a": 60.0}
    s = summarize(write(tmp_path / "n.pt.trace.json", [x("kernel", "a", 5, 50, pid=0)]))
    assert s.steps == 1 and s.notes


def test_unreadable_or_cpu_only_traces_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="no GPU kernel events"):
        summarize(write(tmp_path / "c.pt.trace.json", [x("cpu_op", "aten::mm", 0, 5)]))
    (tmp_path / "bad.pt.trace.json").write_text("{not json")
    with pytest.raises(ProbeError, match="cannot read"):
        summarize(tmp_path / "bad.pt.trace.json")
    with pytest.raises(ProbeError, match="no decode step"):
        summarize(write(tmp_path / "pre.pt.trace.json", step(
            0, "execute_context_1(9)_generation_0(0)", [("k", 5.0)], 1, 30)))


def test_worker_trace_prefers_rank0_with_kernels(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="no torch profiler trace"):
        worker_trace(tmp_path)
    write(tmp_path / "async_llm.1.pt.trace.json", [x("cpu_op", "a", 0, 1)])
    write(tmp_path / "w_rank1.2.pt.trace.json", [x("kernel", "k", 0, 1, pid=0)])
    assert worker_trace(tmp_path).name == "w_rank1.2.pt.trace.json"
    write(tmp_path / "w_rank0.3.pt.trace.json", [x("kernel", "k", 0, 1, pid=0)])
    assert worker_trace(tmp_path).name == "w_rank0.3.pt.trace.json"
