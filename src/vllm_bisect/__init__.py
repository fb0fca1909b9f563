"""vllm-bisect: find the vLLM commit that broke decode speed or output length."""

from __future__ import annotations

__version__ = "0.1.0"
