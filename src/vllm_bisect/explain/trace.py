"""Read one torch-profiler trace (Chrome trace JSON) into per-decode-step numbers.

The trace is what vLLM's torch profiler writes (``<worker>.<ms>.pt.trace.json[.gz]``,
``{"traceEvents": [...]}``): ``kernel`` events on the GPU, ``cuda_runtime`` launches and
``cpu_op`` events on the host, and vLLM's per-step ``user_annotation``
``execute_context_<n>(<t>)_generation_<m>(<t>)``. A decode step is an annotation with no
context (prefill) request. A kernel belongs to the step whose host window launched it (the
launch's ``args.correlation`` equals the kernel's); without correlations, to the step whose
window it starts in. Older traces without vLLM's annotation fall back to torch's
``ProfilerStep#N``; a trace with neither is one window (and says so).

Holistic Trace Analysis (``holistictraceanalysis``) was considered and not used: its wheel
requires jupyterlab, plotly, pydot, networkx, pandas and pytest at install time, none of
which vllm-bisect needs otherwise, and its analyses (kernel breakdown, idle time, trace
diff) work per rank over a whole trace, not per decode step. What is needed here is small:
this module, tested on its own.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_bisect.errors import ProbeError

STEP_RE = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
# the host's launch calls (runtime and driver API): one per kernel in eager mode, one per
# graph under CUDA graphs (as named in real vLLM 0.25.1 traces: cudaLaunchKernel,
# cuLaunchKernelEx)
LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                          "cuLaunchKernelEx", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
                          "cuGraphLaunch"})


@dataclass(frozen=True)
class _Event:
    name: str
    cat: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    correlation: int | None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class TraceSummary:
    """One trace's decode steps, averaged per step (microseconds)."""

    path: str
    steps: int
    kernel_us: dict[str, float]          # GPU time per decode step, by kernel name
    cpu_op_us: dict[str, float]          # top-level host op time per decode step, by name
    gpu_busy_us: float                   # all kernels of a step
    gpu_idle_us: float                   # GPU idle between consecutive decode steps
    host_us: float                       # the step annotation's host time
    launches: float                      # kernels run per decode step
    segmentation: str                    # how steps were found
    notes: list[str] = field(default_factory=list)
    launch_calls: float = 0.0            # host launch calls per step (kernels or graphs)

    def metrics(self) -> dict[str, float]:
        """Every number compared across servers, by a stable key."""
        out = {f"kernel:{k}": v for k, v in self.kernel_us.items()}
        out.update({f"cpu_op:{k}": v for k, v in self.cpu_op_us.items()})
        out.update({"step:gpu_busy": self.gpu_busy_us, "step:gpu_idle": self.gpu_idle_us,
                    "step:host": self.host_us, "step:launches": self.launches,
                    "step:launch_calls": self.launch_calls})
        return out


def trace_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.name.endswith(TRACE_SUFFIXES))


def load_events(path: Path) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, ValueError, EOFError) as err:
        raise ProbeError(f"cannot read the trace {path}: {err}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ProbeError(f"{path} is not a Chrome trace (no traceEvents list)")
    return [e for e in events if isinstance(e, dict)]


def _parse(events: list[dict[str, Any]]) -> list[_Event]:
    out = []
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        args = e.get("args") or {}
        corr = args.get("correlation") if isinstance(args, dict) else None
        try:
            out.append(_Event(str(e.get("name", "")), str(e.get("cat", "")).lower(),
                              float(e["ts"]), float(e.get("dur", 0.0)), e.get("pid"),
                              e.get("tid"), int(corr) if isinstance(corr, int | str)
                              and str(corr).isdigit() else None))
        except (TypeError, ValueError):
            continue
    return out


def _windows(ev: list[_Event]) -> tuple[list[_Event], list[bool], str]:
    """Every step's host window in time order, whether each is a decode step, and how they
    were found."""
    ann = [e for e in ev if e.cat == "user_annotation"]
    steps = sorted((e for e in ann if STEP_RE.match(e.name)), key=lambda e: e.ts)
    if steps:
        decode = []
        for e in steps:
            m = STEP_RE.match(e.name)
            assert m is not None
            decode.append(int(m.group(1)) == 0 and int(m.group(3)) > 0)
        return steps, decode, "vLLM step annotations (decode steps only)"
    prof = sorted((e for e in ann if PROFILER_STEP_RE.match(e.name)), key=lambda e: e.ts)
    if prof:
        return prof, [True] * len(prof), "torch ProfilerStep#N (prefill not told apart)"
    return [], [], "none"


def _top_level(ops: list[_Event]) -> list[_Event]:
    """Host ops not nested in another op of the same thread."""
    out: list[_Event] = []
    ends: dict[tuple[Any, Any], float] = {}
    for e in sorted(ops, key=lambda e: (e.ts, -e.dur)):
        key = (e.pid, e.tid)
        if e.ts >= ends.get(key, float("-inf")):
            out.append(e)
            ends[key] = e.end
    return out


def _assign(windows: list[_Event], items: list[_Event], launch_ts: dict[int, float],
            until_next: bool = False) -> list[list[_Event]]:
    """Each item (kernel, op or launch call) into the window it belongs to (see the module
    docstring). ``until_next``: an item launched after its window's host span but before
    the next window's is the step's too (kernels and their launches: MTP's drafter launches
    after vLLM's step annotation ends)."""
    import bisect

    starts = [w.ts for w in windows]
    out: list[list[_Event]] = [[] for _ in windows]
    for it in items:
        t = launch_ts.get(it.correlation, it.ts) if it.correlation is not None else it.ts
        i = bisect.bisect_right(starts, t) - 1
        if i < 0:
            continue
        w = windows[i]
        nxt = windows[i + 1].ts if i + 1 < len(windows) else float("inf")
        if t <= w.end or (until_next and t < nxt):
            out[i].append(it)
    return out


def summarize(path: Path) -> TraceSummary:
    """Per-decode-step averages of one trace."""
    ev = _parse(load_events(path))
    kernels = [e for e in ev if e.cat == "kernel"]
    if not kernels:
        raise ProbeError(f"{path} has no GPU kernel events (a CPU-only trace, e.g. the API "
                         "server's)")
    launch_ts = {e.correlation: e.ts for e in ev
                 if e.cat == "cuda_runtime" and e.correlation is not None}
    windows, decode, how = _windows(ev)
    notes = []
    if not windows:
        lo = min(e.ts for e in ev)
        hi = max(e.end for e in ev)
        windows = [_Event("whole trace", "user_annotation", lo, hi - lo, None, None, None)]
        decode = [True]
        notes.append("no step annotations: the whole trace is one window")
    if not any(decode):
        raise ProbeError(f"{path} has no decode step (only prefill steps were profiled)")
    all_k = _assign(windows, kernels, launch_ts, until_next=True)
    all_op = _assign(windows, _top_level([e for e in ev if e.cat == "cpu_op"]), {})
    all_calls = _assign(windows, [e for e in ev if e.cat in ("cuda_runtime", "cuda_driver")
                                  and e.name in LAUNCH_CALLS], {}, until_next=True)
    idle = []
    for i in range(len(windows) - 1):
        a, b = all_k[i], all_k[i + 1]
        if decode[i] and decode[i + 1] and a and b:
            idle.append(max(0.0, min(k.ts for k in b) - max(k.end for k in a)))
    per_k = [ks for ks, d in zip(all_k, decode, strict=True) if d]
    per_op = [ops for ops, d in zip(all_op, decode, strict=True) if d]
    calls = sum(len(c) for c, d in zip(all_calls, decode, strict=True) if d)
    windows = [w for w, d in zip(windows, decode, strict=True) if d]
    n = len(windows)
    k_us: dict[str, float] = defaultdict(float)
    op_us: dict[str, float] = defaultdict(float)
    for ks in per_k:
        for k in ks:
            k_us[k.name] += k.dur / n
    for ops in per_op:
        for o in ops:
            op_us[o.name] += o.dur / n
    return TraceSummary(
        path=str(path), steps=n, kernel_us=dict(k_us), cpu_op_us=dict(op_us),
        gpu_busy_us=sum(k_us.values()), gpu_idle_us=sum(idle) / len(idle) if idle else 0.0,
        host_us=sum(w.dur for w in windows) / n,
        launches=sum(len(ks) for ks in per_k) / n, segmentation=how, notes=notes,
        launch_calls=calls / n)


def worker_trace(directory: Path) -> Path:
    """The GPU worker's trace in a profiler directory: rank 0's where there are several
    (the API server's CPU-only trace is skipped)."""
    files = trace_files(directory)
    if not files:
        raise ProbeError(f"no torch profiler trace (*.pt.trace.json[.gz]) in {directory}",
                         hint="the server may not have the profiler on; see its log")
    ranked = sorted(files, key=lambda p: ("rank0" not in p.name and "rank_0" not in p.name,
                                          "async_llm" in p.name.lower(), p.name))
    for p in ranked:
        try:
            if any(e.get("cat") == "kernel" for e in load_events(p)):
                return p
        except ProbeError:
            continue
    raise ProbeError(f"no trace in {directory} has GPU kernel events",
                     hint="the profiler needs the CUDA activity (vLLM's worker traces)")
