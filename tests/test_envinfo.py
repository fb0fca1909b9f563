"""Platform detection and the defaults it implies (parsing real nvidia-smi output shapes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vllm_bisect.builders.cache import ArtifactCache, parse_size
from vllm_bisect.envinfo import Platform, parse_nvidia_smi, relevant_env

GB10_QUERY = "NVIDIA GB10, 12.1, 580.95.05\n"
GB10_HEADER = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |"
H200_QUERY = "NVIDIA H200, 9.0, 580.159.04\nNVIDIA H200, 9.0, 580.159.04\n"


def test_gb10_defaults() -> None:
    gpus, cuda = parse_nvidia_smi(GB10_QUERY, GB10_HEADER)
    p = Platform(machine="aarch64", glibc=(2, 39), gpus=gpus, cuda_version=cuda)
    assert gpus[0].sm == "sm_121" and gpus[0].nickname == "GB10"
    assert (p.arch, p.docker_platform, p.variant) == ("aarch64", "linux/arm64", "cu130")
    assert p.torch_cuda_arch_list == "12.1a"


def test_h200_and_cpu_defaults() -> None:
    gpus, _ = parse_nvidia_smi(H200_QUERY, "CUDA Version: 12.9")
    p = Platform(machine="x86_64", glibc=(2, 35), gpus=gpus, cuda_version="12.9")
    assert len(p.gpus) == 2 and p.variant == "cu129" and p.torch_cuda_arch_list == "9.0"
    assert Platform(machine="x86_64", glibc=(2, 36)).variant == "cpu"


def test_relevant_env_redacts_secrets() -> None:
    env = relevant_env({"VLLM_USE_V1": "1", "HF_TOKEN": "hf_secret", "CUTE_DSL_ARCH": "sm_121a",
                        "VLLM_API_KEY": "k", "PATH": "/bin", "NCCL_DEBUG": "INFO"})
    assert env == {"CUTE_DSL_ARCH": "sm_121a", "HF_TOKEN": "<redacted>", "NCCL_DEBUG": "INFO",
                   "VLLM_API_KEY": "<redacted>", "VLLM_USE_V1": "1"}


def test_env_command_without_gpu() -> None:
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "env", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["arch"] in ("x86_64", "aarch64") and "variant" in doc and "env" in doc


def test_cache_prune_is_lru_and_keeps_endpoints(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    for i, commit in enumerate(["a" * 40, "b" * 40, "c" * 40]):
        d = cache.path(f"venv-{i}")
        d.mkdir(parents=True)
        (d / "blob").write_bytes(b"x" * 1000)
        cache.register(f"venv-{i}", d, commit=commit, kind="venv")
    cache.touch("venv-0")  # a is now the most recently used; b the least
    evicted = cache.prune(2000, keep=["b" * 40])
    assert [e.commit for e in evicted] == ["c" * 40]  # b is kept (endpoint), c is LRU after it
    assert cache.total_size() == 2000 and not cache.path("venv-2").exists()
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "cache", "prune", "--max-size",
                        "1K", "--cache-dir", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0 and "1 evicted; 1000 B left" in r.stdout  # b (LRU) goes
    assert parse_size("50G") == 50 << 30 and parse_size("1.5K") == 1536
