"""Dependency pins: reading every kind of pin file, what changed, rewriting one pin."""

from __future__ import annotations

from packaging.version import Version

from vllm_bisect.isolate.pins import PinKind, is_pin_file, pin_changes, pins_of, rewrite
from vllm_bisect.isolate.pkgindex import between, index_from_args

REQS = """\
# Common dependencies for all hardware
regex # Replace re for higher-performance regex matching
torch == 2.9.0
flashinfer-python==0.5.2; platform_machine == "x86_64"
-r common.txt
--extra-index-url https://download.pytorch.org/whl/cu129
xgrammar >= 0.1.25, < 0.2
"""

PYPROJECT = """\
[build-system]
requires = ["cmake>=3.26.1", "setuptools>=77.0.3,<80.0.0", "torch == 2.9.0"]

[project]
name = "vllm"
dependencies = ["transformers >= 4.56.0"]
[project.optional-dependencies]
audio = ["librosa"]
"""

DOCKERFILE = """\
ARG CUDA_VERSION=12.9.1
ARG PYTHON_VERSION=3.12
ARG BUILD_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu20.04
ARG GET_PIP_URL="https://bootstrap.pypa.io/get-pip.py"
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL UV_EXTRA_INDEX_URL
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04 AS base
ARG CUDA_VERSION
ARG max_jobs=2
FROM --platform=linux/amd64 ubuntu:22.04 AS tools
ARG FLASHINFER_GIT_REF="v0.5.2"
ARG FLASHINFER_WHEEL='git+https://github.com/flashinfer-ai/flashinfer@21ea1d2545f7'
"""  # (as vLLM's docker/Dockerfile writes its base versions)


def test_pin_files() -> None:
    for p in ("requirements/cuda.txt", "requirements-common.txt", "pyproject.toml",
              "setup.py", "docker/Dockerfile", "docker/Dockerfile.rocm"):
        assert is_pin_file(p), p
    assert not is_pin_file("vllm/requirements.py") and not is_pin_file("docs/requirements.md")


def test_reads_requirements_pyproject_setup_and_dockerfile() -> None:
    got = {(p.name, p.spec, p.marker) for p in pins_of("requirements/cuda.txt", REQS)}
    assert ("torch", "==2.9.0", "") in got
    assert ("flashinfer-python", "==0.5.2", 'platform_machine == "x86_64"') in got
    assert ("xgrammar", "<0.2,>=0.1.25", "") in got and ("regex", "", "") in got
    assert len(got) == 4  # -r and --extra-index-url are not pins
    py = {(p.name, p.spec) for p in pins_of("pyproject.toml", PYPROJECT)}
    assert {("torch", "==2.9.0"), ("transformers", ">=4.56.0"), ("librosa", "")} <= py
    setup = pins_of("setup.py", 'install_requires=["ray>=2.9", "numpy"]\nx = "a == b"\n')
    assert [(p.name, p.spec) for p in setup] == [("ray", ">=2.9")]
    docker = pins_of("docker/Dockerfile", DOCKERFILE)
    assert all(p.kind is PinKind.DOCKER for p in docker)
    assert {(p.name, p.spec) for p in docker} == {
        ("CUDA_VERSION", "12.9.1"), ("PYTHON_VERSION", "3.12"), ("ubuntu", "22.04"),
        ("BUILD_BASE_IMAGE", "nvidia/cuda:${CUDA_VERSION}-devel-ubuntu20.04"),
        ("FLASHINFER_GIT_REF", "v0.5.2"),
        ("FLASHINFER_WHEEL", "git+https://github.com/flashinfer-ai/flashinfer@21ea1d2545f7")}


def test_changes_and_exact_versions() -> None:
    before = {"requirements/cuda.txt": REQS, "docker/Dockerfile": DOCKERFILE}
    after = {"requirements/cuda.txt": REQS.replace("torch == 2.9.0", "torch==2.10.0")
             .replace("regex # Replace", "# regex"),
             "docker/Dockerfile": DOCKERFILE.replace("12.9.1", "13.0.1")
             .replace('GIT_REF="v0.5.2"', "GIT_REF=v0.5.3")}
    ch = pin_changes(before, after)
    labels = [c.label for c in ch]
    assert labels == ["CUDA_VERSION 12.9.1 -> 13.0.1 (docker/Dockerfile)",
                      "FLASHINFER_GIT_REF v0.5.2 -> v0.5.3 (docker/Dockerfile)",
                      "regex (any) -> (none) (requirements/cuda.txt)",
                      "torch ==2.9.0 -> ==2.10.0 (requirements/cuda.txt)"]
    assert pins_of("r.txt", "torch==2.9.0\n")[0].exact == Version("2.9.0")
    assert pins_of("r.txt", "torch>=2.9.0\n")[0].exact is None


def test_rewrite_keeps_extras_markers_comments() -> None:
    text = 'torch==2.9.0  # pinned\nvllm-flash-attn[cu12]==2.6; sys_platform == "linux"\n'
    out = rewrite("requirements/x.txt", text, "Vllm_Flash_Attn", "2.7")
    assert out == ('torch==2.9.0  # pinned\n'
                   'vllm-flash-attn[cu12]==2.7; sys_platform == "linux"\n')
    assert rewrite("requirements/x.txt", text, "torch", "2.10.0").startswith(
        "torch==2.10.0 # pinned\n")
    py = rewrite("pyproject.toml", PYPROJECT, "torch", "2.10.0")
    assert '"torch==2.10.0"' in py and '"cmake>=3.26.1"' in py


def test_versions_between_pins() -> None:
    vs = [Version(v) for v in ("1.0", "1.1", "1.2rc1", "1.2", "1.3", "2.0")]
    assert [str(v) for v in between(vs, Version("1.0"), Version("1.3"))] == [
        "1.1", "1.2rc1", "1.2", "1.3"]
    assert [str(v) for v in between(vs, Version("1.3"), Version("1.1"))] == [
        "1.2", "1.2rc1", "1.1"]
    assert index_from_args(["--index-url", "http://x/simple"]) == "http://x/simple"
    assert index_from_args(["--index-url=http://y"]) == "http://y" and index_from_args([]) is None


def test_swap_conclusions() -> None:
    from vllm_bisect.isolate.deps import Conclusion, conclude
    from vllm_bisect.models import Verdict

    g, b, s = Verdict.GOOD, Verdict.BAD, Verdict.SKIP
    assert conclude(b, g) == Conclusion.DEPENDENCY and conclude(g, b) == Conclusion.CODE
    assert conclude(b, b) == Conclusion.EITHER and conclude(g, g) == Conclusion.BOTH
    assert conclude(s, g) == Conclusion.UNDETERMINED
