"""``python -m vllm_bisect.cli``: the console script's guarded entry (vllm_bisect.entry)."""

from __future__ import annotations

from vllm_bisect.entry import main

main()
