"""The ``vllm-bisect`` command line (the only package that prints or picks exit codes).

``app`` (the typer app, consoles, errors), ``run_cmds`` (run, demo, report), ``hook_cmds`` (hook),
``operator_cmds`` (triage, probe, compare, cache, env, version), ``bot_cmds`` (bot serve,
bot try), ``study_cmds``
(isolate, deps, knobs), ``sweep_cmds`` (sweep), ``main`` (the entry point that registers
them all), ``__main__`` (``python -m vllm_bisect.cli``, through the guard of
:mod:`vllm_bisect.cli.entry`).

The package imports nothing itself (``entry``, the console script, is the guard inside it):
``python -m vllm_bisect.cli hook`` in an environment
whose dependencies fail at import must reach the guard (exit 128), not die importing this
file (exit 1, which ``git bisect run`` reads as "bad").
"""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from vllm_bisect.cli.main import main
        return main
    raise AttributeError(name)
