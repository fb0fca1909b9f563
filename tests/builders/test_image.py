"""The image builder and container runtime against a real docker engine and registry.

.ci/run starts dockerd and a registry on 127.0.0.1:5000 and sets VLLM_BISECT_REQUIRE_DOCKER=1,
so there a missing service fails these tests instead of skipping them. Nothing can be pulled
from outside: the base image is a debootstrapped Debian with python3, cached across runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import httpx
import prometheus_client
import pytest

import vllm_bisect
from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.bisect.measurement.evaluate import Evaluator
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders import make_builder
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.image import ImageBuilder, classify_pull_error, docker_client
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable, HostFault, NetworkUnavailable, ToolMissing
from vllm_bisect.models import EvalStatus, Verdict
from vllm_bisect.runtime.container import OWNER_LABEL, SESSION_LABEL, reap_orphans
from vllm_bisect.sim.history import History
from vllm_bisect.spec import ImageBuild

BASE = "vllm-bisect-test/debian-python:bookworm"
CACHE = Path(os.environ.get("VLLM_BISECT_TEST_CACHE", "/var/cache/vllm-bisect-tests"))
HOST = Platform(machine="x86_64", glibc=(2, 36))


def need(what: str) -> None:
    if os.environ.get("VLLM_BISECT_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{what} is required here (VLLM_BISECT_REQUIRE_DOCKER=1) but unavailable")
    pytest.skip(f"{what} unavailable")


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        return docker_client()
    except ToolMissing:
        need("a docker daemon")
        raise


@pytest.fixture(scope="session")
def registry() -> str:
    reg = os.environ.get("VLLM_BISECT_TEST_REGISTRY", "127.0.0.1:5000")
    try:
        httpx.get(f"http://{reg}/v2/", timeout=3).raise_for_status()
    except httpx.HTTPError:
        need(f"a docker registry at {reg}")
    return reg


def debian_mirror() -> str:
    files = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list"),
             *Path("/etc/apt/sources.list.d").glob("*.sources")]  # not *.disabled, not node
    for f in files:
        if f.is_file():
            for line in f.read_text().splitlines():
                if line.lstrip().startswith("#"):
                    continue  # (a commented-out snapshot URL is not a mirror)
                for word in line.split():
                    if word.startswith("http") and "debian" in word and "security" not in word:
                        return word
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="session")
def base_image(client: docker.DockerClient) -> str:
    try:
        client.images.get(BASE)
        return BASE
    except docker.errors.ImageNotFound:
        pass
    tarball = CACHE / "debian-bookworm-python3.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None:
            need("debootstrap (to make a base image)")
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "root"
            subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", "bookworm",
                            str(root), debian_mirror()], check=True, capture_output=True)
            subprocess.run(["tar", "-C", str(root), "-cf", str(tarball) + ".part", "."],
                           check=True)
            os.replace(str(tarball) + ".part", tarball)
    repo, tag = BASE.split(":")
    client.api.import_image_from_file(str(tarball), repository=repo, tag=tag)
    return BASE


DOCKERFILE = """\
FROM {base}
COPY sim /opt/sim
COPY app /opt/app
RUN printf '#!/bin/sh\\nexec python3 -m vllm.entrypoints.cli.main "$@"\\n' > /usr/local/bin/vllm \\
    && chmod +x /usr/local/bin/vllm
ENV PYTHONPATH=/opt/app VLLM_BISECT_SIM_PATH=/opt/sim VLLM_BUILD_COMMIT={claimed}
ENTRYPOINT ["vllm", "serve"]
"""


@dataclass(frozen=True)
class Published:
    history: History
    tags: list[str]
    special: dict[int, str]


def build_image(client: docker.DockerClient, base: str, checkout: Path | None, claimed: str,
                ctx: Path, ref: str) -> None:
    shutil.rmtree(ctx, ignore_errors=True)
    (ctx / "app").mkdir(parents=True)
    if checkout is not None:
        shutil.copytree(checkout / "vllm", ctx / "app" / "vllm")
    for pkg in (vllm_bisect, prometheus_client):
        shutil.copytree(Path(pkg.__file__).parent, ctx / "sim" / pkg.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base, claimed=claimed))
    client.images.build(path=str(ctx), tag=ref, rm=True)


@pytest.fixture(scope="module")
def published(client: docker.DockerClient, registry: str, base_image: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    tmp = tmp_path_factory.mktemp("images")
    h = history(tmp, n_commits=10, cap_at=6)
    co = Checkouts(open_repo(h.path), tmp / "cache")
    tags = [f"{registry}/q9t5s3a7/vllm-release-repo:{{sha}}-{{arch}}",
            f"{registry}/q9t5s3a7/vllm-ci-postmerge-repo:{{sha}}{{arm64_suffix}}",
            f"{registry}/vllm/vllm-openai:nightly-{{sha}}"]
    special = {2: "missing", 7: "lying", 9: "no vllm"}
    pushed = []
    for i, sha in enumerate(h.shas):
        if special.get(i) == "missing":
            continue
        ref = tags[i % 3].format(sha=sha, arch="x86_64", arm64_suffix="")
        claimed = h.shas[1] if special.get(i) == "lying" else sha
        checkout = None if special.get(i) == "no vllm" else co.get(sha)
        build_image(client, base_image, checkout, claimed, tmp / f"ctx{i}", ref)
        repo, tag = ref.rsplit(":", 1)
        for line in client.images.push(repo, tag=tag, stream=True, decode=True):
            assert "error" not in line, line
        client.images.remove(ref)  # make the builder really pull it back
        pushed.append(ref)
    yield Published(h, tags, special)


def image_builder(tmp_path: Path, tags: list[str]) -> ImageBuilder:
    spec = ImageBuild(tags=tags, gpus="none")
    return ImageBuilder(spec, ArtifactCache(tmp_path / "cache"), tmp_path / "logs", platform=HOST)


def test_pulls_each_tag_shape_and_verifies_commit(tmp_path: Path, published: Published) -> None:
    h, b = published.history, image_builder(tmp_path, published.tags)
    for i in (0, 1, 5):  # release, ci-postmerge and docker hub shapes
        a = b.prepare(h.shas[i])
        assert a.image is not None and h.shas[i] in a.image
        assert a.digest and "sha256:" in a.digest
    assert (tmp_path / "logs" / f"pull-{h.shas[0][:12]}.log").read_text().count("docker pull")


def test_missing_and_lying_images_are_unavailable(tmp_path: Path, published: Published) -> None:
    h, b = published.history, image_builder(tmp_path, published.tags)
    with pytest.raises(ArtifactUnavailable, match=r"not found|manifest unknown"):
        b.prepare(h.shas[2])
    with pytest.raises(ArtifactUnavailable, match="says VLLM_BUILD_COMMIT"):
        b.prepare(h.shas[7])


def test_registry_down_is_unavailable(tmp_path: Path, client: docker.DockerClient) -> None:
    b = image_builder(tmp_path, ["127.0.0.1:9/vllm/vllm-openai:nightly-{sha}"])
    with pytest.raises(ArtifactUnavailable, match=r"127\.0\.0\.1:9"):
        b.prepare("c" * 40)


def test_a_pull_the_network_failed_is_a_network_failure(tmp_path: Path, published: Published,
                                                       client: docker.DockerClient) -> None:
    # the daemon's words for a registry nothing answers on: not the image's fault (not
    # cached); a manifest the registry does not have stays the commit's own answer
    b = image_builder(tmp_path, ["127.0.0.1:9/vllm/vllm-openai:nightly-{sha}"])
    with pytest.raises(NetworkUnavailable) as caught:
        b.prepare("c" * 40)
    assert not caught.value.final
    h = published.history
    with pytest.raises(ArtifactUnavailable) as missing:
        image_builder(tmp_path, published.tags).prepare(h.shas[2])
    assert not isinstance(missing.value, NetworkUnavailable) and missing.value.final


def test_daemon_not_running(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ToolMissing, match="docker daemon"):
        docker_client()


def test_disk_full_stops_the_run() -> None:
    assert classify_pull_error("write /var/lib/docker/tmp/x: no space left on device") is HostFault
    assert classify_pull_error("manifest unknown") is ArtifactUnavailable


def test_image_without_vllm_is_a_serve_failure(tmp_path: Path, published: Published) -> None:
    h = published.history
    spec = make_spec(h, build={"kind": "image", "tags": published.tags, "gpus": "none"},
                     serve={"env": {}}, ops={"startup_timeout_s": 20})
    builder = make_builder(spec, open_repo(h.path), tmp_path / "cache", tmp_path / "logs")
    ev = Evaluator(spec, builder, tmp_path / "logs", None, "t").evaluate(h.shas[9])
    assert ev.status is EvalStatus.FAILED
    assert "exited with code" in ev.reason and "No module named" in ev.log_tail


def test_bisect_by_pulling_images(tmp_path: Path, published: Published,
                                  client: docker.DockerClient) -> None:
    h = published.history
    spec = make_spec(h, build={"kind": "image", "tags": published.tags, "gpus": "none"},
                     serve={"env": {}}, ops={"startup_timeout_s": 30})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["length"]
    assert any(o.verdict is Verdict.SKIP for o in r.probed)
    for ev in r.evaluations.values():  # measured commits name the exact image they ran
        assert ev.measurement is None or (ev.artifact and "@sha256:" in ev.artifact)
    left = client.containers.list(all=True, filters={"label": SESSION_LABEL})
    assert not [c for c in left if c.labels.get(OWNER_LABEL) == str(os.getpid())]


def test_orphaned_containers_are_reaped(client: docker.DockerClient, base_image: str) -> None:
    c = client.containers.create(base_image, command=["sleep", "60"],
                                 labels={SESSION_LABEL: "dead", OWNER_LABEL: "999999999"})
    assert c.name in reap_orphans(client)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(c.id)


BUILD_DOCKERFILE = """\
FROM {base} AS base
FROM base AS vllm-openai
ARG VLLM_BUILD_COMMIT
ARG max_jobs
COPY vllm /opt/app/vllm
COPY docker/sim /opt/sim
RUN printf '#!/bin/sh\\nexec python3 -m vllm.entrypoints.cli.main "$@"\\n' > /usr/local/bin/vllm \\
    && chmod +x /usr/local/bin/vllm && test -n "$max_jobs"
ENV PYTHONPATH=/opt/app VLLM_BISECT_SIM_PATH=/opt/sim VLLM_BUILD_COMMIT=$VLLM_BUILD_COMMIT
ENTRYPOINT ["vllm", "serve"]
"""


def test_build_fallback_uses_the_commits_dockerfile(tmp_path: Path, base_image: str,
                                                    client: docker.DockerClient) -> None:
    import git as gitmod

    h = history(tmp_path, n_commits=2, cap_at=2)
    repo = gitmod.Repo(h.path)
    (h.path / "docker").mkdir()
    (h.path / "docker" / "Dockerfile").write_text(BUILD_DOCKERFILE.format(base=base_image))
    for pkg in (vllm_bisect, prometheus_client):
        shutil.copytree(Path(pkg.__file__).parent, h.path / "docker" / "sim" / pkg.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    repo.git.add("docker")
    sha = repo.index.commit("[Build] Add docker/Dockerfile (#1)").hexsha
    spec = make_spec(h, build={"kind": "image", "tags": ["127.0.0.1:9/none:{sha}"],
                               "build": True, "gpus": "none"},
                     serve={"env": {}}, ops={"startup_timeout_s": 30})
    builder = make_builder(spec, open_repo(h.path), tmp_path / "cache", tmp_path / "logs")
    a = builder.prepare(sha)
    assert a.image == f"vllm-bisect/vllm-openai:{sha}"
    env = client.images.get(a.image).attrs["Config"]["Env"]
    assert f"VLLM_BUILD_COMMIT={sha}" in env
    ev = Evaluator(spec, builder, tmp_path / "logs", None, "t").evaluate(sha)
    assert ev.status is EvalStatus.MEASURED and ev.measurement is not None
    assert ev.measurement.output_tokens == [128]  # the planted cap is in this commit's source
    client.images.remove(a.image, force=True)


def test_containers_get_no_credentials(tmp_path: Path, published: Published,
                                       client: docker.DockerClient,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_bisect.runtime.container import run_container
    from vllm_bisect.runtime.process import free_port

    for name, value in {"GITHUB_TOKEN": "ghp-x", "VLLM_BISECT_WEBHOOK_SECRET": "whsec-x",
                        "HF_TOKEN": "hf-x", "VLLM_USE_V1": "1"}.items():
        monkeypatch.setenv(name, value)
    h = published.history
    artifact = image_builder(tmp_path, published.tags).prepare(h.shas[0])
    build = ImageBuild(tags=published.tags, gpus="none")
    for pass_env in ([], ["HF_TOKEN"]):
        serve = make_spec(h, serve={"env": {}}).serve.model_copy(
            update={"pass_env": pass_env})
        with run_container(client, artifact, serve, build, port=free_port(),
                           log_path=tmp_path / "log", session_id=f"env-{len(pass_env)}",
                           timeout_s=30):
            c = client.containers.list(filters={"label": f"{SESSION_LABEL}=env-{len(pass_env)}"})
            env = dict(e.split("=", 1) for e in c[0].attrs["Config"]["Env"])
        assert "GITHUB_TOKEN" not in env and "VLLM_BISECT_WEBHOOK_SECRET" not in env
        assert ("HF_TOKEN" in env) == bool(pass_env) and env["VLLM_USE_V1"] == "1"


def test_a_host_network_container_owns_its_port(tmp_path: Path, published: Published,
                                                client: docker.DockerClient) -> None:
    """The health check's port test for containers: the listener runs in the container
    (its cgroup names it, or the daemon lists its pid), not in another process."""
    from vllm_bisect.runtime.container import _pids, run_container
    from vllm_bisect.runtime.ports import Ownership, check_port_in_container, free_port

    h = published.history
    artifact = image_builder(tmp_path, published.tags).prepare(h.shas[0])
    build = ImageBuild(tags=published.tags, gpus="none")
    serve = make_spec(h, serve={"env": {}}).serve
    port = free_port()
    with run_container(client, artifact, serve, build, port=port, log_path=tmp_path / "log",
                       session_id="ports", timeout_s=30):
        c = client.containers.list(filters={"label": f"{SESSION_LABEL}=ports"})[0]
        assert check_port_in_container(port, c.id).ownership is Ownership.OURS
        other = check_port_in_container(port, "f" * 64)  # another container's id
        assert other.ownership is (Ownership.OTHER if os.geteuid() == 0 else Ownership.UNKNOWN)
        # where the cgroup path does not name it, the daemon's process list does
        assert _pids(c)
        assert check_port_in_container(port, "f" * 64, lambda: _pids(c)).ownership \
            is Ownership.OURS
