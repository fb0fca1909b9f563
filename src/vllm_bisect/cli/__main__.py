"""``python -m vllm_bisect.cli``: the console script's guarded entry (vllm_bisect.cli.entry)."""

from __future__ import annotations

from vllm_bisect.cli.entry import main

main()
