"""Run ``vllm serve`` in a container (docker SDK): start, wait for /health, always remove.

The image's entrypoint is ``vllm serve`` (vLLM's ``vllm-openai`` target), so the command is
``MODEL --port P --host 127.0.0.1 ARGS``. Host networking by default (the probe talks to
127.0.0.1); ``network = "bridge"`` publishes the port on 127.0.0.1 only. Containers carry
``vllm-bisect.session`` and ``vllm-bisect.owner-pid`` labels so a later run can remove those
whose owner died.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import DeviceRequest

from vllm_bisect.errors import ServeError
from vllm_bisect.runtime.base import Artifact, ServerHandle, handle_names, server_env
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.ports import check_port_in_container
from vllm_bisect.runtime.process import startup_lock, startup_lock_path, wait_healthy
from vllm_bisect.spec import ImageBuild, ServeSpec

logger = logging.getLogger(__name__)
SESSION_LABEL = "vllm-bisect.session"
OWNER_LABEL = "vllm-bisect.owner-pid"


def container_env(serve: ServeSpec, artifact: Artifact | None = None,
                  extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """vLLM's own variables from our environment (no credentials; HF_TOKEN only when
    serve.pass_env names it), then :func:`server_env` (serve.env, then ``extra``)."""
    return child_env(server_env(serve, artifact, extra), pass_env=serve.pass_env, container=True)


def device_requests(gpus: str | list[int]) -> list[DeviceRequest]:
    if gpus == "none":
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    ids = [str(g) for g in gpus] if isinstance(gpus, list) else gpus.split(",")
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def reap_orphans(client: docker.DockerClient) -> list[str]:
    """Remove containers whose owning vllm-bisect process is gone (on this host)."""
    removed = []
    for c in client.containers.list(all=True, filters={"label": SESSION_LABEL}):
        owner = c.labels.get(OWNER_LABEL, "")
        if owner.isdigit() and Path(f"/proc/{owner}").exists():
            continue
        with contextlib.suppress(docker.errors.APIError):
            c.remove(force=True)
            removed.append(str(c.name))
    return removed


def _stream_logs(container: Any, log_path: Path) -> None:
    with contextlib.suppress(Exception), open(log_path, "ab") as out:
        for chunk in container.logs(stream=True, follow=True):
            out.write(chunk)
            out.flush()


@contextlib.contextmanager
def run_container(client: docker.DockerClient, artifact: Artifact, serve: ServeSpec,
                  build: ImageBuild, *, port: int, log_path: Path, session_id: str,
                  timeout_s: float, hf_cache: str | None = None, serialize_startup: bool = True,
                  cancel: threading.Event | None = None, extra_args: tuple[str, ...] = (),
                  extra_env: Mapping[str, str] | None = None) -> Iterator[ServerHandle]:
    """Serve the image; ``timeout_s``, ``hf_cache``, ``serialize_startup``: the spec's [ops];
    ``extra_args`` and ``extra_env``: what this start adds (:mod:`vllm_bisect.runtime.launch`)."""
    assert artifact.image is not None
    command = [serve.model, "--port", str(port), "--host", "127.0.0.1", *serve.args]
    spec_json = serve.speculative_config_json()
    if spec_json is not None:
        command += ["--speculative-config", spec_json]
    command += extra_args
    env = container_env(serve, artifact, extra_env)
    kwargs: dict[str, Any] = dict(
        command=command, detach=True, environment=env,
        labels={SESSION_LABEL: session_id, OWNER_LABEL: str(os.getpid()),
                "vllm-bisect.commit": artifact.commit},
        device_requests=device_requests(build.gpus))
    if build.network == "host":
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = {f"{port}/tcp": ("127.0.0.1", port)}
    if build.shm_size:
        kwargs["shm_size"] = build.shm_size
    else:
        kwargs["ipc_mode"] = "host"
    if hf_cache:
        hf = Path(hf_cache).expanduser()
        hf.mkdir(parents=True, exist_ok=True)
        kwargs["volumes"] = {str(hf): {"bind": "/root/.cache/huggingface", "mode": "rw"}}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:  # the env is not logged: it may hold HF_TOKEN
        log.write(f"$ docker run {artifact.image} {' '.join(command)}\n".encode())
    url = f"http://127.0.0.1:{port}"
    lock_env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, build.gpus))
                if isinstance(build.gpus, list) else "all"}
    with startup_lock(startup_lock_path(lock_env) if serialize_startup else None, cancel):
        try:
            container = client.containers.run(artifact.image, **kwargs)
        except docker.errors.APIError as err:
            raise ServeError(f"cannot start a container from {artifact.image}: "
                             f"{err.explanation or err}",
                             hint="is the NVIDIA container runtime installed? (build.gpus)") from None
        threading.Thread(target=_stream_logs, args=(container, log_path), daemon=True).start()
        try:
            # host networking: another server may hold the port; with a bridge, docker's
            # own publishing refuses a taken port when the container starts
            check = ((lambda: check_port_in_container(port, container.id,
                                                      lambda: _pids(container)))
                     if build.network == "host" else None)
            startup = wait_healthy(url, lambda: _exit_code(container), timeout_s, log_path,
                                   interval_s=0.2, what="container", cancel=cancel,
                                   port_check=check)
        except BaseException:
            _remove(container)
            raise
    name, root = handle_names(serve)
    try:
        yield ServerHandle(url=url, model=name, model_root=root, log_path=log_path,
                           startup_s=startup,
                           stop=lambda: _remove(container))
    finally:
        _remove(container)


def _pids(container: Any) -> set[int]:
    """The host pids of the container's processes, as the daemon lists them (empty when it
    cannot)."""
    try:
        top = container.top(ps_args="-eo pid")
    except docker.errors.APIError:
        return set()
    titles = [t.upper() for t in top.get("Titles") or []]
    col = titles.index("PID") if "PID" in titles else 0
    out: set[int] = set()
    for row in top.get("Processes") or []:
        try:
            out.add(int(row[col]))
        except (IndexError, ValueError):
            continue
    return out


def _exit_code(container: Any) -> int | None:
    container.reload()
    if container.status not in ("exited", "dead"):
        return None
    time.sleep(0.2)  # let the log thread catch the last lines
    return int(container.attrs.get("State", {}).get("ExitCode") or 0)


def _remove(container: Any) -> None:
    with contextlib.suppress(docker.errors.APIError, docker.errors.NotFound):
        container.stop(timeout=10)
    with contextlib.suppress(docker.errors.APIError, docker.errors.NotFound):
        container.remove(force=True)
