"""The ``vllm-bisect`` entry point: the app with every command registered."""

from __future__ import annotations

import os
import signal
from types import FrameType

from vllm_bisect.cli import operator_cmds, run_cmds
from vllm_bisect.cli.app import app

__all__ = ["app", "main", "operator_cmds", "run_cmds"]


def _sigterm(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
