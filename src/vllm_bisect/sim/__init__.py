"""A vLLM-compatible simulator, a replay server for captured traffic, synthetic histories."""

from __future__ import annotations

from vllm_bisect.sim.engine import SimConfig

__all__ = ["SimConfig"]
