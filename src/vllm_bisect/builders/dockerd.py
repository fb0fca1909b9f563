"""The docker daemon client (shared by the image builder, the artifact cache's eviction and
the container runtime; its own module, so none of them imports another for it)."""

from __future__ import annotations

import docker
import docker.errors

from vllm_bisect.errors import ToolMissing


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as err:
        raise ToolMissing(f"cannot reach the docker daemon: {err}",
                          hint="start dockerd (or set DOCKER_HOST), or use build.kind = \"wheel\"") from None
    return client
