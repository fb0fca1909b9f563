"""The ``vllm-bisect`` command line (the only package that prints or picks exit codes).

``app`` (the typer app, consoles, errors), ``run_cmds`` (run, demo, report), ``hook_cmds`` (hook),
``operator_cmds`` (triage, probe, compare, cache, env, version), ``bot_cmds`` (bot serve,
bot try), ``study_cmds``
(isolate, deps, knobs), ``sweep_cmds`` (sweep), ``main`` (the entry point that registers
them all), ``__main__`` (``python -m vllm_bisect.cli``).
"""

from __future__ import annotations

from vllm_bisect.cli.main import main

__all__ = ["main"]
