"""``python -m vllm_bisect.cli``: the package is imported once; this only calls its main."""

from __future__ import annotations

from vllm_bisect.cli.main import main

main()
