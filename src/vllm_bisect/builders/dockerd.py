"""The docker daemon client (image builds, the container runtime, the artifact cache's image
eviction), kept apart so that the cache and the image builder do not import each other."""

from __future__ import annotations

import docker

from vllm_bisect.errors import ToolMissing


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as err:
        raise ToolMissing(f"cannot reach the docker daemon: {err}",
                          hint="start dockerd (or set DOCKER_HOST), or use build.kind = \"wheel\"") from None
    return client
