"""The ``vllm-bisect`` entry point: the app with every command registered."""

from __future__ import annotations

import os

from vllm_bisect.cli.app import app
from vllm_bisect.cli.bot_cmds import bot_try
from vllm_bisect.cli.explain_cmds import explain_cmd
from vllm_bisect.cli.hook_cmds import hook
from vllm_bisect.cli.operator_cmds import version  # importing a module registers its commands
from vllm_bisect.cli.run_cmds import run
from vllm_bisect.cli.spec_cmds import sim_history, spec_cmd
from vllm_bisect.cli.study_cmds import isolate_cmd
from vllm_bisect.cli.sweep_cmds import sweep_cmd
from vllm_bisect.cli.watch_cmds import watch
from vllm_bisect.interrupt import install

__all__ = ["app", "bot_try", "explain_cmd", "hook", "isolate_cmd", "main", "run", "sim_history",
           "spec_cmd",
           "sweep_cmd", "version", "watch"]


def main() -> None:
    install()   # Ctrl-C and SIGTERM raise KeyboardInterrupt, and are never lost
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
