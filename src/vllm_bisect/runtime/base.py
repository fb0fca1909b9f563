"""What a runtime hands to a probe: where the server answers and where its log is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ServerHandle:
    url: str
    model: str
    log_path: Path | None = None
    pid: int | None = None
    startup_s: float | None = None
    # stops the server from another thread (a cancelled evaluation); None: not ours to stop
    stop: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def read_log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")
