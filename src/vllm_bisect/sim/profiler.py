"""``POST /start_profile`` and ``POST /stop_profile`` of the simulated server.

As in vLLM (``entrypoints/serve/profile/api_router.py``), the routes exist only when a
profiler is configured (``--profiler-config`` with ``"profiler": "torch"``, or the older
``VLLM_TORCH_PROFILER_DIR``); both answer 200 with an empty body. Steps run between them are
recorded; stop writes one worker trace (``sim/profile_trace.py``) and returns once it is on
disk, as vLLM's stop returns after the workers' trace handlers ran.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from vllm_bisect.sim.engine import SimConfig
from vllm_bisect.sim.http import Responder
from vllm_bisect.sim.profile_trace import StepRecord, kernel_table, trace_events, write_trace

WORKER_NAME = "vllm_dp0_pp0_tp0_dcp0_ep0_rank0"


class SimProfiler:
    def __init__(self, cfg: SimConfig, level: float, start: str = "") -> None:
        """``level``: the server start's speed; ``start``: what tells this start's timing
        noise from another's (a pid; with a seeded config, starts still differ)."""
        assert cfg.profiler_dir is not None
        self.cfg = cfg
        self.dir = Path(cfg.profiler_dir)
        kernels, gap = (cfg.kernels, cfg.host_gap_us) if cfg.kernels else kernel_table(
            cfg.step_ms, None, "", 0.0)
        self.rng = random.Random(f"{cfg.seed}|{start}")
        # this server start's own level (clocks, placement) scales every kernel alike, and
        # each kernel varies a little from start to start (1%)
        self.kernels = tuple((n, us * level * max(0.5, self.rng.gauss(1.0, 0.01)), k)
                             for n, us, k in kernels)
        self.gap = gap if gap is not None else 0.0  # host time: GPU clocks do not move it
        self.active = False
        self.steps: list[StepRecord] = []

    def record(self, prefill: bool, tokens: int) -> None:
        if self.active:
            self.steps.append(StepRecord(prefill=prefill, tokens=tokens))

    async def handle(self, path: str, resp: Responder) -> None:
        if path == "/start_profile":
            self.active, self.steps = True, []
        elif self.active:
            await asyncio.to_thread(self.flush)
        await resp.send(200, b"")

    def flush(self) -> Path:
        """Stop recording and write the trace of the steps recorded since start."""
        self.active = False
        events = trace_events(self.steps, self.kernels, self.gap,
                              max(self.cfg.noise_cv, 0.02), self.rng,
                              graphs=self.cfg.cuda_graphs)
        return write_trace(self.dir, WORKER_NAME, events, self.cfg.version,
                           self.cfg.profiler_gzip)
