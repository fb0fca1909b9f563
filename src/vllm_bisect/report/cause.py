"""The line of a build or server log that says why a commit was skipped.

A skip's reason names what failed ("build of X failed (exit 1): uv pip install ...", "server
exited with code 1 before it was healthy"); the cause is in the log's tail: the last
exception or ``error:`` line, skipping the generic wrappers that point elsewhere ("See root
cause above")."""

from __future__ import annotations

import re
from pathlib import Path

MAX_CAUSE = 300
# "RuntimeError: ...", "torch.OutOfMemoryError: ...", "error: ...", "ERROR ... : ..."
_CAUSE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception|Exit|Interrupt)\b:?|error:|fatal:"
                    r"|ERROR\b|FAILED\b|Killed\b).*", re.IGNORECASE)
_WRAPPERS = ("see root cause above", "build failures usually indicate",
             "failed to build `", "call to `backend.build_wheel` failed")


def cause_line(log_tail: str) -> str | None:
    """The last line of ``log_tail`` that states an error (None: none does)."""
    lines = [ln.strip() for ln in log_tail.splitlines()]
    found = [ln for ln in lines if _CAUSE.match(ln) and not ln.startswith("# exit")]
    specific = [ln for ln in found if not any(w in ln.lower() for w in _WRAPPERS)]
    if not found:
        return None
    pick = (specific or found)[-1]
    return pick if len(pick) <= MAX_CAUSE else pick[:MAX_CAUSE - 3] + "..."


def session_path(log: str | Path | None, session: Path) -> str | None:
    """``log`` relative to the session directory when it lies inside it, else as it is."""
    if log is None:
        return None
    p = Path(log)
    try:
        return str(p.resolve().relative_to(session.resolve()))
    except (ValueError, OSError):
        return str(p)
