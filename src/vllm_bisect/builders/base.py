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
from typing import Protocol, runtime_checkable

from vllm_bisect.errors import ArtifactUnavailable
from vllm_bisect.runtime.base import Artifact
from vllm_bisect.spec import ArtifactKind

__all__ = ["Artifact", "ArtifactKind", "Builder"]


class Builder(Protocol):
    def prepare(self, commit: str) -> Artifact: ...


@runtime_checkable
class KnowsUnbuildable(Protocol):
    """A builder that can tell, without building, that a commit cannot be built."""

    def unbuildable(self, commit: str) -> ArtifactUnavailable | None: ...


def prepare(builder: Builder, commit: str, cancel: threading.Event | None = None) -> Artifact:
    """``builder.prepare(commit)``, passing ``cancel`` to builders whose prepare takes one
    (wheel downloads and image pulls check it between chunks)."""
    if cancel is not None and "cancel" in inspect.signature(builder.prepare).parameters:
        return builder.prepare(commit, cancel=cancel)  # type: ignore[call-arg]
    return builder.prepare(commit)


def known_unavailable(builder: Builder, commit: str) -> ArtifactUnavailable | None:
    """Why ``builder`` cannot make an artifact of ``commit``, when it can tell without
    building (a :class:`KnowsUnbuildable` builder: the source builder's
    precompiled plan, a ``git diff``); None when it can or cannot tell. The run asks it of
    both endpoints before it builds anything: on real vLLM a csrc/ change at the bad end was
    found only after the good end's build and server (7.6 min, docs/validation.md (m))."""
    return builder.unbuildable(commit) if isinstance(builder, KnowsUnbuildable) else None
