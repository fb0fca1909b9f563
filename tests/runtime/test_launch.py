"""The launchers: one per artifact kind, and the seam for extra flags and environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vllm_bisect.errors import FatalError
from vllm_bisect.runtime.base import Artifact
from vllm_bisect.runtime.launch import (
    ContainerLauncher,
    ProcessLauncher,
    ServerSpec,
    UrlLauncher,
    launch_plan,
    launcher_for,
)
from vllm_bisect.spec import ArtifactKind, ImageBuild, ServeSpec


def command_artifact() -> Artifact:
    return Artifact(commit="c" * 40, kind=ArtifactKind.COMMAND, identity="sim",
                    serve_template=f"exec {sys.executable} -m vllm_bisect.sim serve --port {{port}}",
                    env={"FROM_ARTIFACT": "a", "BOTH": "artifact"})


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_process_starts_with_extra_flags_and_env(tmp_path: Path) -> None:
    spec = ServerSpec(ServeSpec(model="sim-model", env={"BOTH": "spec"}), tmp_path / "log",
                      timeout_s=30, serialize_startup=False,
                      extra_args=("--startup-delay", "0.2"),
                      extra_env={"VLLM_TORCH_PROFILER_DIR": str(tmp_path)},
                      devices=(3,), session_id="s1")
    with ProcessLauncher().serve(command_artifact(), spec) as h:
        assert h.pid is not None and h.startup_s is not None and h.startup_s >= 0.2
        raw = Path(f"/proc/{h.pid}/environ").read_bytes().decode()
        env = dict(e.split("=", 1) for e in raw.split("\0") if "=" in e)
    assert env["VLLM_TORCH_PROFILER_DIR"] == str(tmp_path) and env["FROM_ARTIFACT"] == "a"
    assert env["BOTH"] == "spec"  # serve.env wins over the artifact's env
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["VLLM_BISECT_SESSION"] == "s1"
    assert "--startup-delay 0.2" in (tmp_path / "log").read_text().splitlines()[0]


def test_extra_args_follow_the_spec_args_on_the_vllm_line(tmp_path: Path) -> None:
    art = Artifact(commit="c" * 40, kind=ArtifactKind.WHEEL, identity="v", venv=tmp_path)
    plan = launch_plan(art, ServeSpec(model="m", args=["--enforce-eager"], speculative=None),
                       8000, ("--profile",))
    assert plan is not None and plan.argv is not None
    assert list(plan.argv)[-2:] == ["--enforce-eager", "--profile"]
    assert plan.env is not None and plan.env["VIRTUAL_ENV"] == str(tmp_path)


def test_a_url_is_served_as_it_is_and_takes_no_extras(tmp_path: Path) -> None:
    art = Artifact(commit="c" * 40, kind=ArtifactKind.URL, identity="u", url="http://x:1")
    with UrlLauncher().serve(art, ServerSpec(ServeSpec(model="m"), tmp_path / "log")) as h:
        assert h.url == "http://x:1" and h.startup_s is None and h.stop is None
    with pytest.raises(FatalError), UrlLauncher().serve(
            art, ServerSpec(ServeSpec(model="m"), tmp_path / "log", extra_args=("--x",))):
        pass


def test_one_launcher_per_kind() -> None:
    assert isinstance(launcher_for(ArtifactKind.URL), UrlLauncher)
    for kind in (ArtifactKind.SOURCE, ArtifactKind.WHEEL, ArtifactKind.COMMAND):
        assert isinstance(launcher_for(kind), ProcessLauncher)
    build = ImageBuild()
    assert isinstance(launcher_for(ArtifactKind.IMAGE, build=build, client=lambda: None),  # type: ignore[arg-type,return-value]
                      ContainerLauncher)
    with pytest.raises(FatalError):
        launcher_for(ArtifactKind.IMAGE)
