"""The memory symptom's probe step: what the server logged about memory while it started, and
what NVML sees its processes hold (where there is a GPU to read). Nothing is sent to the server
beyond the decode probe that ran before."""

from __future__ import annotations

import logging
from typing import Protocol

from vllm_bisect.models import Measurement
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.verdict.memory import parse_startup

logger = logging.getLogger(__name__)


class _Call(Protocol):  # what it needs of probe_steps.EvalCall (no import: no cycle)
    @property
    def commit(self) -> str: ...

    def say(self, phase: str) -> None: ...


def gpu_used_mib(pid: int | None) -> float | None:
    """GPU memory held by the server's process tree (NVML or nvidia-smi), None without one."""
    if pid is None:
        return None
    from vllm_bisect.runtime.gpustate import process_tree, read_state

    state = read_state()
    if state is None:
        return None
    own = process_tree(pid)
    used = [p.used_mib for p in state.processes if p.pid in own and p.used_mib is not None]
    return sum(used) if used else None


class MemoryStep:
    """Adds ``Measurement.memory`` from the server's start-up log."""

    def run(self, call: _Call, server: ServerHandle, m: Measurement | None) -> Measurement:
        assert m is not None
        call.say("reading start-up memory from the server log")
        mem = parse_startup(server.read_log(), gpu_used_mib(server.pid))
        if mem is None:
            logger.warning("%s: the server log has no memory lines", call.commit[:12])
        return m.model_copy(update={"memory": mem})
