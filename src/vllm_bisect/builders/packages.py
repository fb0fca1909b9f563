"""The installed packages of an artifact's environment (for the endpoints' environment diff).

A venv is asked through its own interpreter (``importlib.metadata`` over its ``sys.path``,
in order, the first of a name winning as an import would): a source build with
``reuse_installed`` sees the interpreter's torch through ``--system-site-packages`` and a
``.pth`` link, which its own site-packages does not hold (read there, torch would show as
missing on both sides). Where the interpreter cannot run, its site-packages is
read in place. An image is asked once: a short container of the image's own Python lists
its distributions with ``importlib.metadata`` (no pip needed, no network, no GPU). A command
or URL artifact has no environment vllm-bisect can see.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from vllm_bisect.runtime.base import Artifact
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.spec.build import ArtifactKind

if TYPE_CHECKING:
    import docker

logger = logging.getLogger(__name__)

# packages whose change moves kernels under vLLM: a change here is a dependency's, not vLLM's
NOTABLE = ("torch", "flashinfer", "triton", "xformers", "cuda", "nvidia-", "cupy", "deep-gemm",
           "deep_gemm", "vllm-flash-attn", "transformers")
# run by the image's own python: [[name, version], ...] of every distribution on its path
LIST_SCRIPT = ("import importlib.metadata as m, json; print(json.dumps(sorted("
               "[d.metadata['Name'] or '', d.version] for d in m.distributions())))")
PYTHONS = ("python3", "python")


# run by a venv's own python: [[name, version], ...] in sys.path order (first one wins)
PATH_LIST_SCRIPT = ("import importlib.metadata as m, json; print(json.dumps("
                    "[[d.metadata['Name'] or '', d.version] for d in m.distributions()]))")


def venv_packages(venv: Path) -> dict[str, str]:
    """name -> version of every distribution the venv's python sees (see the module doc)."""
    python = venv / "bin" / "python"
    if python.exists():
        try:
            r = subprocess.run([str(python), "-c", PATH_LIST_SCRIPT], capture_output=True,
                               text=True, timeout=60, env=child_env(), check=True)
            seen: dict[str, str] = {}
            for name, version in json.loads(r.stdout):
                if name:
                    seen.setdefault(canonicalize_name(str(name)), str(version))
            return seen
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            logger.info("listing %s through its python failed (%s): reading it in place",
                        venv, err)
    return site_packages(venv)


def site_packages(venv: Path) -> dict[str, str]:
    """name -> version of every distribution in the venv's own site-packages."""
    out: dict[str, str] = {}
    for sp in sorted(venv.glob("lib/python*/site-packages")):
        for dist in importlib.metadata.distributions(path=[str(sp)]):
            name = dist.metadata["Name"]
            if name:
                out[canonicalize_name(str(name))] = dist.version
    return out


def image_packages(image: str, client: docker.DockerClient | None = None) -> dict[str, str]:
    """name -> version of every distribution the image's Python sees (one ``docker run
    --rm --entrypoint python3 IMAGE -c ...``, the network off). Raises
    ``docker.errors.DockerException`` (or ``ToolMissing`` without a daemon)."""
    import docker.errors

    from vllm_bisect.builders.dockerd import docker_client

    client = client or docker_client()
    last: docker.errors.DockerException | None = None
    for python in PYTHONS:
        try:
            out = client.containers.run(image, command=["-c", LIST_SCRIPT], entrypoint=[python],
                                        remove=True, stdout=True, stderr=False,
                                        network_disabled=True)
        except docker.errors.ContainerError as err:  # no such python in the image: the next
            last = err
            continue
        text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)
        pairs = json.loads(text.strip().splitlines()[-1])
        return {canonicalize_name(str(n)): str(v) for n, v in pairs if n}
    assert last is not None
    raise last


def artifact_packages(artifact: Artifact) -> tuple[dict[str, str] | None, str | None]:
    """The artifact's packages, or None and why not."""
    if artifact.venv is not None and artifact.venv.is_dir():
        return venv_packages(artifact.venv), None
    if artifact.kind is ArtifactKind.IMAGE and artifact.image:
        import docker.errors

        from vllm_bisect.errors import ToolMissing

        try:
            return image_packages(artifact.image), None
        except (docker.errors.DockerException, ToolMissing, ValueError, IndexError) as err:
            logger.info("listing the packages of %s failed: %s", artifact.image, err)
            return None, (f"image {artifact.image}: its packages could not be listed "
                          f"({type(err).__name__}: {str(err)[:200]})")
    return None, f"a {artifact.kind.value} artifact: its packages are not visible"


def changed(a: dict[str, str], b: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    """(name, version in a, version in b) of every package that differs, by name."""
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def beyond_vllm(changes: list[tuple[str, str | None, str | None]]) -> list[str]:
    """The changed packages that move kernels under vLLM (torch, flashinfer, triton, ...)."""
    return sorted(n for n, _, _ in changes if n != "vllm" and n.startswith(NOTABLE))
