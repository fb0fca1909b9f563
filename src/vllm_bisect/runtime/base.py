"""Plain data between builders, runtime and probes: the :class:`Artifact` a builder made, the
:class:`ServerHandle` a launcher hands to a probe (where the server answers, where its log is),
and :func:`server_env`, the one place a server's environment additions are merged."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_bisect.spec import ArtifactKind, ServeSpec


@dataclass(frozen=True)
class Artifact:
    """What a builder made for one commit (plain data: how it is served is the runtime's
    launchers' business, :mod:`vllm_bisect.runtime.launch`)."""

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


_PATHS = ("checkout", "venv")


def artifact_json(artifact: Artifact) -> str:
    """The artifact as JSON (a session's journal keeps what each call prepared)."""
    data = asdict(artifact)
    data["kind"] = artifact.kind.value
    for key in _PATHS:
        data[key] = str(data[key]) if data[key] is not None else None
    return json.dumps(data)


def artifact_of_json(text: str) -> Artifact | None:
    """An artifact :func:`artifact_json` wrote (None: unreadable, e.g. another version's)."""
    try:
        data = json.loads(text)
        data["kind"] = ArtifactKind(data["kind"])
        for key in _PATHS:
            data[key] = Path(data[key]) if data.get(key) is not None else None
        return Artifact(**data)
    except (ValueError, TypeError, KeyError):
        return None


def server_env(serve: ServeSpec, artifact: Artifact | None = None,
               extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a server gets on top of the allowlisted environment
    (:func:`~vllm_bisect.runtime.childenv.child_env`): the artifact's env, then the spec's
    ``serve.env``, then ``extra`` (what a caller adds: GPUs, profiler variables). Later wins."""
    return {**(artifact.env if artifact is not None else {}), **serve.env, **(extra or {})}


def handle_names(serve: ServeSpec) -> tuple[str, str | None]:
    """A :class:`ServerHandle`'s ``model`` and ``model_root`` for this serve spec."""
    name = serve.request_name()
    return name, serve.model if name != serve.model else None


@dataclass(frozen=True)
class ServerHandle:
    url: str
    model: str                     # the name requests ask for (the served name)
    # the model the spec says is behind that name, where the spec names both (serve.model
    # and --served-model-name in serve.args): /v1/models' ``root`` must be it
    model_root: str | None = None
    log_path: Path | None = None
    pid: int | None = None
    startup_s: float | None = None
    # stops the server from another thread (a cancelled evaluation); None: not ours to stop
    stop: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def read_log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")
