"""The ``url`` builder: an already-running server (one commit at a time, e.g. under a hook)."""

from __future__ import annotations

from vllm_bisect.builders.base import Artifact, ArtifactKind


class UrlBuilder:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def prepare(self, commit: str) -> Artifact:
        return Artifact(commit=commit, kind=ArtifactKind.URL, identity=self.url, url=self.url)
