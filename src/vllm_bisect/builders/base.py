"""The builder seam: ``Builder.prepare(commit) -> Artifact``, and how an artifact is served.

"Cannot get an artifact" raises :class:`~vllm_bisect.errors.ArtifactUnavailable` (a skip,
never a bad verdict). ``prepare`` is idempotent: a second call for the same commit reuses
what the first one made.
"""

from __future__ import annotations

import inspect
import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vllm_bisect.runtime.process import LaunchPlan
from vllm_bisect.spec import ArtifactKind, ServeSpec

__all__ = ["Artifact", "ArtifactKind", "Builder"]


@dataclass(frozen=True)
class Artifact:
    commit: str
    kind: ArtifactKind
    identity: str                      # what was served: a venv path, a URL, a command
    checkout: Path | None = None
    venv: Path | None = None
    url: str | None = None
    serve_template: str | None = None  # command builder: {port} {model} {commit} {speculative}
    image: str | None = None           # image builder: the pulled reference
    digest: str | None = None          # image builder: repo digest or image id
    env: dict[str, str] = field(default_factory=dict)
    cached: bool = False

    def launch_plan(self, serve: ServeSpec, port: int) -> LaunchPlan | None:
        """How to start a server for this artifact; None when it is already running."""
        env = {**self.env, **serve.env}
        if self.kind in (ArtifactKind.URL, ArtifactKind.IMAGE):
            return None  # already running, or served by the container runtime
        if self.kind is ArtifactKind.COMMAND:
            assert self.serve_template is not None
            spec_json = serve.speculative_config_json()
            speculative = ("" if spec_json is None
                           else "--speculative-config " + shlex.quote(spec_json))
            line = self.serve_template.format(port=port, model=serve.model, commit=self.commit,
                                              speculative=speculative)
            return LaunchPlan(shell=line, env=env, cwd=self.checkout,
                              pass_env=tuple(serve.pass_env))
        assert self.venv is not None
        # vLLM listens on every interface unless told otherwise; the probe is local
        argv = [str(self.venv / "bin" / "vllm"), "serve", serve.model, "--host", "127.0.0.1",
                "--port", str(port), *serve.args]
        spec_json = serve.speculative_config_json()
        if spec_json is not None:
            argv += ["--speculative-config", spec_json]
        path = f"{self.venv / 'bin'}:{env.get('PATH') or os.environ.get('PATH', '/usr/bin:/bin')}"
        return LaunchPlan(argv=argv, env={**env, "PATH": path, "VIRTUAL_ENV": str(self.venv)},
                          cwd=self.checkout, pass_env=tuple(serve.pass_env))


class Builder(Protocol):
    def prepare(self, commit: str) -> Artifact: ...


def prepare(builder: Builder, commit: str, cancel: threading.Event | None = None) -> Artifact:
    """``builder.prepare(commit)``, passing ``cancel`` to builders whose prepare takes one
    (wheel downloads and image pulls check it between chunks)."""
    if cancel is not None and "cancel" in inspect.signature(builder.prepare).parameters:
        return builder.prepare(commit, cancel=cancel)  # type: ignore[call-arg]
    return builder.prepare(commit)
