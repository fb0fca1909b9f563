"""Verdicts: pure judgement of measurements."""

from __future__ import annotations

from vllm_bisect.verdict.judge import Judge, Judgement

__all__ = ["Judge", "Judgement"]
