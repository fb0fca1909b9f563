"""A Ctrl-C (or SIGTERM) is never lost.

Python runs a signal's handler in the main thread at the next bytecode it executes, wherever
that is. When that is a callback whose exceptions Python ignores (an ``os.register_at_fork``
hook such as logging's, run while ``subprocess`` forks a server or a git command; a
``__del__``; a weakref callback), the ``KeyboardInterrupt`` is printed as "Exception
ignored" and lost: seen here, a Ctrl-C that landed while a server was being forked was
swallowed and the run went on to its end, exit 0 (tests/test_interrupt.py).

:func:`install` (the CLI's entry point) makes both signals raise ``KeyboardInterrupt`` as
before and remember that they came; :func:`check`, called where new work starts (a server's
launch, a measurement's submission), raises it again when it was received. Cleanup code never
calls it, so tearing servers down is not cut short.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["check", "install"]

_received = threading.Event()


def _handler(_sig: int, _frame: FrameType | None) -> None:
    _received.set()
    raise KeyboardInterrupt


def install() -> None:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` and are remembered. SIGINT is taken even
    when the process was started with it ignored (``cmd &`` from a script, some CI runners):
    Ctrl-C must still stop a run and tear its servers down."""
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def check() -> None:
    """Raise ``KeyboardInterrupt`` when one was received (even if Python swallowed it)."""
    if _received.is_set():
        raise KeyboardInterrupt
