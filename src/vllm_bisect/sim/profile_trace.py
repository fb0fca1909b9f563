"""Torch-profiler-shaped traces of the simulated engine (what ``POST /stop_profile`` writes).

vLLM's torch profiler (``vllm/profiler/wrapper.py``, ``TorchProfilerWrapper``) hands the
trace to ``torch.profiler.tensorboard_trace_handler(dir, worker_name, use_gzip)``, which
writes a Chrome trace (``{"traceEvents": [...]}``) named
``<worker_name>.<ms timestamp>.pt.trace.json[.gz]``. The GPU worker wraps every engine step
in a ``record_function`` annotation ``execute_context_<n>(<tokens>)_generation_<m>(<tokens>)``
(``gpu_worker.py``); inside it the host runs ``cpu_op`` events and ``cuda_runtime`` launches
(``cudaLaunchKernel``), each launch tied by ``args.correlation`` to its ``kernel`` event on
the GPU stream. This module writes the same shapes from the commit's kernel table (pure but
for :func:`write_trace`): the planted regressions of ``sim/history.py`` add a kernel, slow
one, or lengthen the host gap between steps, and the trace shows exactly that.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (name, microseconds per launch, launches per decode step): a decode step of a small MoE
# model, about 8.5 ms of kernels at the default 10 ms step
BASE_KERNELS: tuple[tuple[str, float, int], ...] = (
    ("nvjet_tst_128x64_64x6_2x1_v_bz_coopB_TNT", 800.0, 4),
    ("flash_fwd_splitkv_kernel", 700.0, 2),
    ("fused_moe_kernel", 900.0, 2),
    ("fused_add_rms_norm_kernel", 100.0, 4),
    ("rotary_embedding_kernel", 125.0, 2),
    ("act_and_mul_kernel", 175.0, 2),
    ("reshape_and_cache_flash_kernel", 150.0, 2),
    ("triton_poi_fused_sampler_0", 300.0, 1),
)
BASE_HOST_GAP_US = 1500.0
# host ops of one step: (name, microseconds)
CPU_OPS: tuple[tuple[str, float], ...] = (
    ("aten::copy_", 120.0), ("aten::index_select", 60.0), ("aten::argmax", 40.0),
)
DEVICE_PID, STREAM_TID = 0, 7
LAUNCH_US = 4.0  # host time of one cudaLaunchKernel


@dataclass(frozen=True)
class StepRecord:
    """One engine step the server ran while profiling: prefill (with its prompt tokens) or
    decode (with the tokens it verified: 1 + K under speculative decoding)."""

    prefill: bool
    tokens: int


def annotation(step: StepRecord) -> str:
    """vLLM's per-step annotation (``gpu_worker.py``): one request, prefill or decode."""
    if step.prefill:
        return f"execute_context_1({step.tokens})_generation_0(0)"
    return f"execute_context_0(0)_generation_1({step.tokens})"


def trace_events(steps: list[StepRecord], kernels: tuple[tuple[str, float, int], ...],
                 host_gap_us: float, noise_cv: float, rng: random.Random,
                 pid: int = 1000, graphs: bool = False) -> list[dict[str, Any]]:
    """The Chrome-trace events of ``steps``: per step an annotation, its cpu ops, its
    launches and their kernels (back to back on one stream), then the host gap.
    ``graphs``: a decode step's kernels but the last table entry's (the sampler) run from
    one ``cudaGraphLaunch``, all under its correlation id, as real vLLM's CUDA-graph traces
    show (docs/validation.md (m); real vLLM also fuses kernels under torch.compile, which
    is not modelled: the kernels stay those of the table)."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": DEVICE_PID, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "VllmWorker"}}]
    t = 1_000_000.0
    corr = 1
    for i, step in enumerate(steps):
        def jit(us: float) -> float:
            return max(0.1, us * rng.gauss(1.0, noise_cv)) if noise_cv > 0 else us
        launches = [(name, jit(us * (8.0 if step.prefill else 1.0)))
                    for name, us, n in kernels for _ in range(n)]
        ann: dict[str, Any] = {"ph": "X", "cat": "user_annotation", "name": annotation(step),
                               "pid": pid, "tid": pid, "ts": t, "dur": 0.0,
                               "args": {"External id": i + 1}}
        events.append(ann)
        h = t
        for name, us in CPU_OPS:  # back to back, never overlapping
            dur = jit(us)
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": pid,
                           "ts": h, "dur": dur * 0.999, "args": {}})
            h += dur
        gpu = h
        captured = len(launches) - kernels[-1][2] if graphs and kernels and not step.prefill \
            else 0
        for j, (name, dur) in enumerate(launches):
            if j == 0 or j >= captured:  # a launch call: the graph's (once), or the kernel's
                call = "cudaGraphLaunch" if j < captured else "cudaLaunchKernel"
                corr += j > 0
                events.append({"ph": "X", "cat": "cuda_runtime", "name": call,
                               "pid": pid, "tid": pid, "ts": h, "dur": LAUNCH_US * 0.9,
                               "args": {"correlation": corr}})
                gpu = max(gpu, h + LAUNCH_US)
                h += LAUNCH_US
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": DEVICE_PID,
                           "tid": STREAM_TID, "ts": gpu, "dur": dur,
                           "args": {"correlation": corr, "device": 0, "stream": STREAM_TID}})
            gpu += dur
        corr += 1
        ann["dur"] = h - t
        t = max(h, gpu) + jit(host_gap_us)
    return events


def write_trace(directory: Path, worker_name: str, events: list[dict[str, Any]],
                version: str, use_gzip: bool = True) -> Path:
    """Write the trace the way ``tensorboard_trace_handler`` names it."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Simulated GPU"}],
           "vllm_version": json.dumps(version), "traceEvents": events,
           "displayTimeUnit": "ms", "baseTimeNanoseconds": time.time_ns()}
    name = f"{worker_name}.{int(time.time() * 1000)}.pt.trace.json"
    data = json.dumps(doc).encode()
    path = directory / (name + (".gz" if use_gzip else ""))
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.compress(data) if use_gzip else data)
    tmp.replace(path)
    return path


def kernel_table(step_ms: float, change: str | None, kernel: str, effect: float
                 ) -> tuple[tuple[tuple[str, float, int], ...], float]:
    """The commit's kernel table and host gap for a ``step_ms`` decode step (the base
    table scaled to it) with one planted change: ``slower`` (``kernel`` takes ``effect`` x
    step_ms longer per step), ``new`` (``kernel`` appears, ``effect`` x step_ms per step),
    ``host-gap`` (the GPU idles ``effect`` x step_ms longer between steps), or None."""
    base_us = sum(us * n for _, us, n in BASE_KERNELS) + BASE_HOST_GAP_US
    scale = step_ms * 1000.0 / base_us
    extra = effect * step_ms * 1000.0
    rows = []
    for name, us, n in BASE_KERNELS:
        per = us * scale
        if change == "slower" and name == kernel:
            per += extra / n
        rows.append((name, round(per, 3), n))
    if change == "new":
        rows.append((kernel, round(extra, 3), 1))
    gap = BASE_HOST_GAP_US * scale + (extra if change == "host-gap" else 0.0)
    return tuple(rows), round(gap, 3)
