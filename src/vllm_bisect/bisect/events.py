"""What the core tells its user interface (mozregression's split between bisector core and
UI): the CLI prints these, the bot posts them; the core itself prints nothing."""

from __future__ import annotations

from typing import Protocol

from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.models import Outcome


class EventHandler(Protocol):
    def on_range(self, rng: CommitRange) -> None: ...
    # role: a ``bisect.policy.Role`` (a str: "good endpoint", "bisect", ...)
    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None: ...
    def on_phase(self, commit: str, phase: str) -> None: ...
    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None: ...


class NullEvents:
    def on_range(self, rng: CommitRange) -> None:
        pass

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        pass

    def on_phase(self, commit: str, phase: str) -> None:
        pass

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        pass
