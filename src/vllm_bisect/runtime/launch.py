"""Where a server starts: one launcher per artifact kind, each
``serve(artifact, spec) -> ContextManager[ServerHandle]``.

* :class:`ProcessLauncher` (source, wheel and command artifacts): ``vllm serve`` from the
  artifact's venv, or the command builder's shell template, as a process group
  (:func:`vllm_bisect.runtime.process.run_server`);
* :class:`ContainerLauncher` (image artifacts): the image's ``vllm serve`` entrypoint in a
  container (:func:`vllm_bisect.runtime.container.run_container`);
* :class:`UrlLauncher` (url artifacts): a server that is already running; nothing starts.

:func:`launcher_for` picks one for an artifact kind. What a server gets is
:class:`ServerSpec`: the spec's ``[serve]`` plus what a caller adds for this start only.

**Extra flags and environment** (the seam for a profiler, a debug flag, a different port):
``ServerSpec(serve, log_path, extra_args=("--profiler-config", cfg),
extra_env={"VLLM_TORCH_PROFILER_DIR": str(d)})``. ``extra_args`` go after the spec's
``serve.args`` (and after ``--speculative-config``) on the ``vllm serve`` line (a command
template gets them appended, shell-quoted); ``extra_env`` is merged last by
:func:`~vllm_bisect.runtime.base.server_env` (it wins over the artifact's and the spec's env).
A url artifact cannot take either (it is not ours to start): :class:`UrlLauncher` refuses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vllm_bisect.errors import FatalError, PortTaken
from vllm_bisect.runtime.base import Artifact, ServerHandle, handle_names, server_env
from vllm_bisect.runtime.ports import free_port
from vllm_bisect.runtime.process import LaunchPlan, run_server
from vllm_bisect.spec import ArtifactKind, ImageBuild, ServeSpec

if TYPE_CHECKING:
    import docker

__all__ = ["ContainerLauncher", "Launcher", "ProcessLauncher", "ServerSpec", "UrlLauncher",
           "launch_plan", "launcher_for"]

logger = logging.getLogger(__name__)

PORT_TRIES = 3  # a port another server took between free_port() and our bind: try another


@dataclass(frozen=True)
class ServerSpec:
    """One server start: the spec's ``[serve]``, where its log goes, the ``[ops]`` that
    apply, and what this start adds (see the module docstring)."""

    serve: ServeSpec
    log_path: Path
    timeout_s: float = 600.0
    serialize_startup: bool = True
    cancel: threading.Event | None = None
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[int, ...] | None = None  # the GPUs it may use (None: all it sees)
    session_id: str | None = None           # labels containers; VLLM_BISECT_SESSION for a process
    hf_cache: str | None = None             # containers: the host's Hugging Face cache
    on_start: Callable[[int], None] | None = field(default=None, compare=False)
    on_stop: Callable[[int], None] | None = field(default=None, compare=False)


class Launcher(Protocol):
    def serve(self, artifact: Artifact, spec: ServerSpec
              ) -> AbstractContextManager[ServerHandle]: ...


def vllm_args(serve: ServeSpec) -> list[str]:
    """What follows ``vllm serve MODEL --host --port``: the spec's args, its speculative config."""
    spec_json = serve.speculative_config_json()
    return [*serve.args, *(() if spec_json is None else ("--speculative-config", spec_json))]


def launch_plan(artifact: Artifact, serve: ServeSpec, port: int,
                extra_args: tuple[str, ...] = ()) -> LaunchPlan | None:
    """How to start a process for this artifact; None when it is not a process (an image, a url).
    The plan's env is :func:`server_env` (plus PATH and VIRTUAL_ENV for a venv)."""
    env = server_env(serve, artifact)
    if artifact.kind in (ArtifactKind.URL, ArtifactKind.IMAGE):
        return None  # already running, or served by the container runtime
    if artifact.kind is ArtifactKind.COMMAND:
        assert artifact.serve_template is not None
        spec_json = serve.speculative_config_json()
        speculative = "" if spec_json is None else "--speculative-config " + shlex.quote(spec_json)
        line = artifact.serve_template.format(port=port, model=serve.model, commit=artifact.commit,
                                              speculative=speculative)
        if extra_args:
            line = f"{line} {shlex.join(extra_args)}"
        return LaunchPlan(shell=line, env=env, cwd=artifact.checkout,
                          pass_env=tuple(serve.pass_env))
    assert artifact.venv is not None
    # vLLM listens on every interface unless told otherwise; the probe is local
    argv = [str(artifact.venv / "bin" / "vllm"), "serve", serve.model, "--host", "127.0.0.1",
            "--port", str(port), *vllm_args(serve), *extra_args]
    path = f"{artifact.venv / 'bin'}:{env.get('PATH') or os.environ.get('PATH', '/usr/bin:/bin')}"
    return LaunchPlan(argv=argv, env={**env, "PATH": path, "VIRTUAL_ENV": str(artifact.venv)},
                      cwd=artifact.checkout, pass_env=tuple(serve.pass_env))


@contextlib.contextmanager
def on_a_free_port(start: Callable[[int], AbstractContextManager[ServerHandle]]
                   ) -> Iterator[ServerHandle]:
    """``start(port)`` on a free port; when another process took that port first (PortTaken),
    again on another one, up to PORT_TRIES times."""
    with contextlib.ExitStack() as stack:
        for attempt in range(1, PORT_TRIES + 1):
            try:
                handle = stack.enter_context(start(free_port()))
                break
            except PortTaken as err:
                if attempt == PORT_TRIES:
                    raise
                logger.warning("%s; starting it again on another port", err)
        yield handle


class ProcessLauncher:
    """Source, wheel and command artifacts: a process group on this host."""

    def serve(self, artifact: Artifact, spec: ServerSpec
              ) -> AbstractContextManager[ServerHandle]:
        return on_a_free_port(lambda port: self._start(artifact, spec, port))

    @staticmethod
    def _start(artifact: Artifact, spec: ServerSpec, port: int
               ) -> AbstractContextManager[ServerHandle]:
        plan = launch_plan(artifact, spec.serve, port, spec.extra_args)
        if plan is None:
            raise FatalError(f"a {artifact.kind.value} artifact is not started as a process")
        env = {**(plan.env or {}), **spec.extra_env}
        name, root = handle_names(spec.serve)
        if spec.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.devices))
        if spec.session_id is not None:
            env["VLLM_BISECT_SESSION"] = spec.session_id
        return run_server(LaunchPlan(argv=plan.argv, shell=plan.shell, env=env, cwd=plan.cwd,
                                     pass_env=plan.pass_env),
                          url=f"http://127.0.0.1:{port}", model=name, model_root=root,
                          log_path=spec.log_path, timeout_s=spec.timeout_s,
                          on_start=spec.on_start, on_stop=spec.on_stop,
                          serialize_startup=spec.serialize_startup, cancel=spec.cancel)


class ContainerLauncher:
    """Image artifacts: a container from the docker client ``client`` (created on first use)."""

    def __init__(self, client: Callable[[], docker.DockerClient], build: ImageBuild) -> None:
        self.client = client
        self.build = build

    def serve(self, artifact: Artifact, spec: ServerSpec
              ) -> AbstractContextManager[ServerHandle]:
        from vllm_bisect.runtime.container import run_container

        build = self.build if spec.devices is None else self.build.model_copy(
            update={"gpus": list(spec.devices)})
        return on_a_free_port(lambda port: run_container(
            self.client(), artifact, spec.serve, build, port=port, log_path=spec.log_path,
            session_id=spec.session_id or "", timeout_s=spec.timeout_s, hf_cache=spec.hf_cache,
            serialize_startup=spec.serialize_startup, cancel=spec.cancel,
            extra_args=spec.extra_args, extra_env=spec.extra_env))


class UrlLauncher:
    """Url artifacts: the server is already running (not ours to start or stop)."""

    @contextlib.contextmanager
    def serve(self, artifact: Artifact, spec: ServerSpec) -> Iterator[ServerHandle]:
        if spec.extra_args or spec.extra_env:
            raise FatalError("a url artifact is a server that is already running: "
                             "it cannot be started with extra flags or environment",
                             hint="use a wheel, source, command or image build")
        assert artifact.url is not None
        name, root = handle_names(spec.serve)
        yield ServerHandle(url=artifact.url, model=name, model_root=root)


def launcher_for(kind: ArtifactKind, *, build: ImageBuild | None = None,
                 client: Callable[[], docker.DockerClient] | None = None) -> Launcher:
    """The launcher for an artifact kind (``build`` and ``client``: image artifacts only)."""
    if kind is ArtifactKind.URL:
        return UrlLauncher()
    if kind is ArtifactKind.IMAGE:
        if build is None or client is None:
            raise FatalError("an image artifact needs an image build and a docker client")
        return ContainerLauncher(client, build)
    return ProcessLauncher()
