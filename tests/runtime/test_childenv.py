"""Children get an allowlisted environment: read back from /proc/PID/environ of real servers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.container import container_env
from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server
from vllm_bisect.spec import ServeSpec

CREDENTIALS = {"GITHUB_TOKEN": "ghp-test-token", "VLLM_BISECT_WEBHOOK_SECRET": "whsec-test",
               "AWS_SECRET_ACCESS_KEY": "aws-test", "VLLM_API_KEY": "vllm-key-test",
               "GH_TOKEN": "gh-test", "PIP_PASSWORD": "pip-test"}


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {**CREDENTIALS, "HF_TOKEN": "hf-test-token",
                 "VLLM_SIM_STEP_MS": "1.0", "SOME_RANDOM_VAR": "x"}.items():
        monkeypatch.setenv(k, v)


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.split("=", 1) for e in raw.decode().split("\0") if "=" in e)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.usefixtures("credentials")
@pytest.mark.parametrize("pass_env", [(), ("HF_TOKEN",)])
def test_a_started_server_has_no_credentials(tmp_path: Path, pass_env: tuple[str, ...]) -> None:
    port = free_port()
    plan = LaunchPlan(argv=[sys.executable, "-m", "vllm_bisect.sim", "serve", "--port",
                            str(port)], env={"FROM_SPEC": "1"}, pass_env=pass_env)
    with run_server(plan, url=f"http://127.0.0.1:{port}", model="m", log_path=tmp_path / "log",
                    timeout_s=30, serialize_startup=False) as h:
        assert h.pid is not None
        env = environ_of(h.pid)
    assert not set(CREDENTIALS) & set(env), sorted(set(CREDENTIALS) & set(env))
    assert not any(v in CREDENTIALS.values() for v in env.values())
    assert ("HF_TOKEN" in env) == bool(pass_env)     # only when the operator opts in
    assert env["FROM_SPEC"] == "1" and env["VLLM_SIM_STEP_MS"] == "1.0" and "PATH" in env
    assert "SOME_RANDOM_VAR" not in env              # an allowlist, not a blocklist


def test_child_env_allowlist() -> None:
    src = {**CREDENTIALS, "HF_TOKEN": "h", "PATH": "/bin", "HOME": "/root", "HF_HOME": "/hf",
           "VLLM_ATTENTION_BACKEND": "FLASHINFER", "CUDA_HOME": "/cuda", "UV_INDEX_URL": "u",
           "SSH_AUTH_SOCK": "/tmp/agent", "DOCKER_HOST": "unix:///x", "LC_ALL": "C"}
    env = child_env({"X": "1"}, source=src)
    assert env == {"PATH": "/bin", "HOME": "/root", "HF_HOME": "/hf",
                   "VLLM_ATTENTION_BACKEND": "FLASHINFER", "CUDA_HOME": "/cuda",
                   "UV_INDEX_URL": "u", "LC_ALL": "C", "X": "1"}
    assert child_env(source=src, pass_env=["HF_TOKEN", "NOT_SET"])["HF_TOKEN"] == "h"
    # a container gets vLLM's own variables only (host paths mean nothing inside it)
    assert child_env(source=src, container=True) == {"VLLM_ATTENTION_BACKEND": "FLASHINFER",
                                                     "CUDA_HOME": "/cuda"}


@pytest.mark.usefixtures("credentials")
def test_container_env_has_no_credentials() -> None:
    env = container_env(ServeSpec(env={"VLLM_USE_V1": "1"}))
    assert not set(CREDENTIALS) & set(env) and "HF_TOKEN" not in env
    assert env["VLLM_USE_V1"] == "1" and env["VLLM_SIM_STEP_MS"] == "1.0"
    assert container_env(ServeSpec(pass_env=["HF_TOKEN"]))["HF_TOKEN"] == "hf-test-token"
