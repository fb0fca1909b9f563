"""The builder seam: ``Builder.prepare(commit) -> Artifact``.

"Cannot get an artifact" raises :class:`~vllm_bisect.errors.ArtifactUnavailable` (a skip,
never a bad verdict). ``prepare`` is idempotent: a second call for the same commit reuses
what the first one made. The :class:`Artifact` is plain data (defined in
:mod:`vllm_bisect.runtime.base`); how it is served is the runtime's launchers' business
(:mod:`vllm_bisect.runtime.launch`).
"""

from __future__ import annotations

import inspect
import threading
from typing import Protocol

from vllm_bisect.runtime.base import Artifact
from vllm_bisect.spec import ArtifactKind

__all__ = ["Artifact", "ArtifactKind", "Builder"]


class Builder(Protocol):
    def prepare(self, commit: str) -> Artifact: ...


def prepare(builder: Builder, commit: str, cancel: threading.Event | None = None) -> Artifact:
    """``builder.prepare(commit)``, passing ``cancel`` to builders whose prepare takes one
    (wheel downloads and image pulls check it between chunks)."""
    if cancel is not None and "cancel" in inspect.signature(builder.prepare).parameters:
        return builder.prepare(commit, cancel=cancel)  # type: ignore[call-arg]
    return builder.prepare(commit)
