"""The ``image`` builder: vLLM's per-commit Docker images, pulled with the docker SDK.

Tag templates are tried in order (``{sha}``, ``{short_sha}``, ``{arch}``, ``{variant}``,
``{arm64_suffix}``); the first that pulls for this host's platform and whose
``VLLM_BUILD_COMMIT`` (when the image has one) equals the commit wins. Not found, a lying
image, or an unreachable registry make the commit unavailable (a skip). With
``build = true`` the commit's ``docker/Dockerfile`` (target ``vllm-openai``) is built instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors

from vllm_bisect.builders.base import Artifact, ArtifactKind
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.dockerd import docker_client as docker_client
from vllm_bisect.builders.netfail import combined, network_failure
from vllm_bisect.envinfo import Platform, detect
from vllm_bisect.errors import (
    ArtifactUnavailable,
    BuildError,
    Cancelled,
    HostFault,
    NetworkUnavailable,
    ToolMissing,
)
from vllm_bisect.spec import ImageBuild

logger = logging.getLogger(__name__)


def render_tags(templates: list[str], commit: str, p: Platform, variant: str = "auto"
                ) -> list[str]:
    """The image references to try for commit ({variant}: the spec's, or the host's on auto)."""
    values = {"sha": commit, "short_sha": commit[:9], "arch": p.arch,
              "variant": p.variant if variant == "auto" else variant,
              "arm64_suffix": "-arm64" if p.arch == "aarch64" else ""}
    return [t.format(**values) for t in templates]


def split_ref(ref: str) -> tuple[str, str]:
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repo, tag


def classify_pull_error(message: str) -> type[ArtifactUnavailable] | type[HostFault]:
    """A pull that failed for lack of disk stops the run; one the network failed is not the
    image's fault (not cached); anything else skips the commit."""
    text = message.lower()
    if "no space left on device" in text:
        return HostFault
    if network_failure(text):
        return NetworkUnavailable
    return ArtifactUnavailable


def build_commit(env: list[str] | None) -> str | None:
    for item in env or []:
        key, _, value = item.partition("=")
        if key == "VLLM_BUILD_COMMIT":
            return value
    return None


class ImageBuilder:
    def __init__(self, spec: ImageBuild, cache: ArtifactCache, log_dir: Path,
                 checkouts: Checkouts | None = None, platform: Platform | None = None,
                 client: docker.DockerClient | None = None) -> None:
        self.spec = spec
        self.cache = cache
        self.log_dir = log_dir
        self.checkouts = checkouts
        self.platform = platform or detect()
        self.client = client or docker_client()

    @property
    def docker_platform(self) -> str:
        return self.platform.docker_platform if self.spec.platform == "auto" else self.spec.platform

    def prepare(self, commit: str, cancel: threading.Event | None = None) -> Artifact:
        reasons = []
        failed: list[ArtifactUnavailable] = []
        for ref in render_tags(self.spec.tags, commit, self.platform, self.spec.variant):
            try:
                image = self._pull(ref, commit, cancel)
            except Cancelled:
                raise
            except ArtifactUnavailable as err:
                reasons.append(err.message)
                failed.append(err)
                continue
            claimed = build_commit(image.attrs.get("Config", {}).get("Env"))
            if claimed is not None and claimed != commit:
                reasons.append(f"{ref} says VLLM_BUILD_COMMIT={claimed[:12]}, not {commit[:12]}")
                continue
            digests = image.attrs.get("RepoDigests") or []
            digest = digests[0] if digests else str(image.id)
            self.cache.register(f"image-{commit}-{self.platform.arch}", ref, commit=commit,
                                kind="image", size=int(image.attrs.get("Size") or 0))
            return Artifact(commit=commit, kind=ArtifactKind.IMAGE, identity=f"image:{digest}",
                            image=ref, digest=digest)
        if self.spec.build:
            return self._build(commit, reasons)
        # a tag the network kept from us may exist: then the answer is "not now", not "none"
        cls = combined(failed)
        raise cls(f"no usable image for {commit[:12]}: " + "; ".join(reasons),
                  hint="check the network and the registry, then run again" if cls is not
                  ArtifactUnavailable else "per-commit images expire; try build.kind = "
                  "\"wheel\", or build = true to build one")

    def _pull(self, ref: str, commit: str, cancel: threading.Event | None = None) -> Any:
        repo, tag = split_ref(ref)
        log = self.log_dir / f"pull-{commit[:12]}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = open(log, "a")  # noqa: SIM115 - closed below; opened apart from docker I/O
        except OSError as err:
            raise HostFault(f"cannot write pull log {log}: {err.strerror}") from None
        layers: dict[str, str] = {}
        last = 0.0
        try:
            out.write(f"$ docker pull --platform {self.docker_platform} {ref}\n")
            for event in self.client.api.pull(repo, tag=tag, stream=True, decode=True,
                                              platform=self.docker_platform):
                if "error" in event:
                    raise classify_pull_error(event["error"])(f"pull of {ref} failed: "
                                                              f"{event['error']}")
                out.write(json.dumps(event) + "\n")
                if cancel is not None and cancel.is_set():  # closing the stream stops the pull
                    raise Cancelled(f"pull of {ref} cancelled")
                if "id" in event and "status" in event:
                    layers[event["id"]] = event["status"]
                if time.monotonic() - last > 5.0 and layers:
                    last = time.monotonic()
                    done = sum(1 for st in layers.values() if st in ("Pull complete",
                                                                   "Already exists"))
                    logger.info("pulling %s: %d/%d layers done", ref, done, len(layers))
            return self.client.images.get(ref)
        except docker.errors.NotFound as err:
            raise ArtifactUnavailable(f"{ref}: not found ({err.explanation})") from None
        except docker.errors.APIError as err:
            cls = classify_pull_error(str(err.explanation or err))
            raise cls(f"pull of {ref} failed: {err.explanation or err}",
                      hint="free disk space: `vllm-bisect cache prune`" if cls is HostFault
                      else "") from None
        except docker.errors.DockerException as err:
            raise ToolMissing(f"lost the docker daemon while pulling {ref}: {err}",
                              hint="is dockerd still running?") from None
        finally:
            out.close()

    def _build(self, commit: str, reasons: list[str]) -> Artifact:
        if self.checkouts is None:
            raise ArtifactUnavailable("image build needs a checkout")
        checkout = self.checkouts.get(commit)
        dockerfile = checkout / "docker" / "Dockerfile"
        if not dockerfile.exists():
            raise ArtifactUnavailable(f"no usable image ({'; '.join(reasons)}) and no "
                                      f"docker/Dockerfile at {commit[:12]} to build")
        tag = f"vllm-bisect/vllm-openai:{commit}"
        args = self.build_args(commit)
        log = self.log_dir / f"docker-build-{commit[:12]}.log"
        try:
            with open(log, "w") as out:
                for event in self.client.api.build(path=str(checkout), dockerfile="docker/Dockerfile",
                                                   target="vllm-openai", tag=tag, buildargs=args,
                                                   platform=self.docker_platform, decode=True):
                    if "error" in event:
                        raise BuildError(f"docker build of {commit[:12]} failed: {event['error']}",
                                         hint=f"see {log}")
                    out.write(event.get("stream", "") or json.dumps(event) + "\n")
        except docker.errors.APIError as err:
            raise BuildError(f"docker build of {commit[:12]} failed: {err}", hint=f"see {log}") from None
        image = self.client.images.get(tag)
        return Artifact(commit=commit, kind=ArtifactKind.IMAGE, identity=f"image:{image.id}",
                        image=tag, digest=str(image.id), checkout=checkout)

    def build_args(self, commit: str) -> dict[str, str]:
        """Build args for vLLM's Dockerfile from the host (arch list from the GPU)."""
        args = {"max_jobs": "16", "nvcc_threads": "2", "VLLM_BUILD_COMMIT": commit}
        arch_list = self.platform.torch_cuda_arch_list
        if arch_list:
            args["torch_cuda_arch_list"] = arch_list
        if self.spec.precompiled:
            args.update(VLLM_USE_PRECOMPILED="1", VLLM_MERGE_BASE_COMMIT=commit,
                        VLLM_PRECOMPILED_WHEEL_COMMIT=commit)
        return args
