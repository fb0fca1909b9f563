"""An artifact's installed packages (issue 28's environment diff): a venv read in place, and
an image's listed by one container of the image's own Python, against a real docker engine
(the Debian base image of test_image.py; CI sets VLLM_BISECT_REQUIRE_DOCKER=1, so there a
missing daemon fails instead of skipping)."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker

from tests.builders.test_image import base_image, client  # noqa: F401 (fixtures)
from tests.explain.test_envdiff import fake_venv
from vllm_bisect.bisect.endpoint_env import endpoint_env
from vllm_bisect.builders.packages import artifact_packages, image_packages
from vllm_bisect.runtime.base import Artifact
from vllm_bisect.spec.build import ArtifactKind

DOCKERFILE = """\
FROM {base}
COPY app /opt/app
ENV PYTHONPATH=/opt/app
ENTRYPOINT ["false"]
"""


def dist_info(root: Path, pkgs: dict[str, str]) -> None:
    for name, ver in pkgs.items():
        d = root / f"{name.replace('-', '_')}-{ver}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")


def build(docker_: docker.DockerClient, base: str, ctx: Path, ref: str,
          pkgs: dict[str, str]) -> str:
    """An image whose Python sees ``pkgs`` (dist-info on its PYTHONPATH); its entrypoint
    fails, as a serving image's would without a GPU: the listing must not use it."""
    shutil.rmtree(ctx, ignore_errors=True)
    dist_info(ctx / "app", pkgs)
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    docker_.images.build(path=str(ctx), tag=ref, rm=True)
    return ref


def test_an_images_packages_come_from_its_own_python(
        tmp_path: Path, client: docker.DockerClient, base_image: str) -> None:  # noqa: F811
    old = build(client, base_image, tmp_path / "a", "vllm-bisect-test/pkgs:old",
                {"vllm": "0.25.0", "torch": "2.9.0", "numpy": "2.2.0"})
    new = build(client, base_image, tmp_path / "b", "vllm-bisect-test/pkgs:new",
                {"vllm": "0.25.1", "torch": "2.10.0+cu130", "FlashInfer_Python": "0.5"})
    try:
        got = image_packages(new, client)
        assert {k: got[k] for k in ("vllm", "torch", "flashinfer-python")} == {
            "vllm": "0.25.1", "torch": "2.10.0+cu130", "flashinfer-python": "0.5"}
        assert "numpy" not in got
        arts = {sha: Artifact(commit=sha, kind=ArtifactKind.IMAGE, identity=ref, image=ref)
                for sha, ref in (("g", old), ("b", new))}
        env = endpoint_env(arts, "g", "b")
        assert env is not None and env.good is not None and env.good["torch"] == "2.9.0"
        line = env.line("S")
        assert line is not None and "torch 2.9.0 -> 2.10.0+cu130" in line
        assert "flashinfer-python (absent) -> 0.5" in line and "vllm-bisect deps S" in line
        # an image that is not there: a note, not an error
        gone = Artifact(commit="x", kind=ArtifactKind.IMAGE, identity="x",
                        image="vllm-bisect-test/pkgs:absent")
        packages, note = artifact_packages(gone)
        assert packages is None and note is not None and "could not be listed" in note
    finally:
        for ref in (old, new):
            client.images.remove(ref, force=True)


def test_a_venvs_packages_are_read_in_place(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v", {"vllm": "0.25.1", "triton": "3.5.0"})
    art = Artifact(commit="c", kind=ArtifactKind.SOURCE, identity=str(venv), venv=venv)
    assert artifact_packages(art) == ({"vllm": "0.25.1", "triton": "3.5.0"}, None)
    cmd = Artifact(commit="c", kind=ArtifactKind.COMMAND, identity="serve")
    assert artifact_packages(cmd)[0] is None
    assert endpoint_env({"g": cmd, "b": cmd}, "g", "b") is not None
    assert endpoint_env({"g": art}, "g", "b") is None   # an endpoint from the result cache
