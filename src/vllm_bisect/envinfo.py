"""The platform a bisect runs on, and the defaults it implies.

GPU names, compute capability (12.1 -> sm_121, "GB10"), driver and CUDA version (from
``nvidia-smi``; no NVML needed), ``uname -m``, glibc, docker and the NVIDIA container
runtime. From these: the wheel/image arch (x86_64 | aarch64), the docker platform, the wheel
variant (cu130 under CUDA 13, cu129 under 12.x, cpu without a GPU) and the arch list for
source builds (``12.1a`` on sm_121).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache

PREFIXES = ("VLLM_", "CUDA_", "TORCH_", "NCCL_", "TRITON_", "FLASHINFER_")
EXACT = ("CUTE_DSL_ARCH", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY|CREDENTIAL", re.IGNORECASE)
NICKNAMES = {"12.1": "GB10", "12.0": "RTX 50xx / RTX PRO (Blackwell)", "10.0": "B200/GB200",
             "10.3": "B300/GB300", "9.0": "H100/H200", "8.9": "L4/L40/RTX 40xx", "8.0": "A100"}


def relevant_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that change vLLM's behaviour, secrets redacted."""
    src = dict(os.environ) if env is None else env
    out = {}
    for k, v in sorted(src.items()):
        if k.startswith(PREFIXES) or k in EXACT:
            out[k] = "<redacted>" if SECRET.search(k) else v
    return out


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str
    driver: str

    @property
    def sm(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")

    @property
    def nickname(self) -> str | None:
        return NICKNAMES.get(self.compute_capability)


@dataclass(frozen=True)
class Platform:
    machine: str                       # uname -m
    glibc: tuple[int, int] | None
    gpus: tuple[Gpu, ...] = ()
    cuda_version: str | None = None    # the driver's CUDA version (nvidia-smi header)
    docker: bool = False
    nvidia_container_runtime: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def arch(self) -> str:
        return "aarch64" if self.machine in ("aarch64", "arm64") else "x86_64"

    @property
    def docker_platform(self) -> str:
        return "linux/arm64" if self.arch == "aarch64" else "linux/amd64"

    @property
    def variant(self) -> str:
        if not self.gpus or self.cuda_version is None:
            return "cpu"
        major = int(self.cuda_version.split(".")[0])
        return "cu130" if major >= 13 else "cu129"

    @property
    def torch_cuda_arch_list(self) -> str | None:
        caps = sorted({g.compute_capability for g in self.gpus})
        if not caps:
            return None
        # sm_12x consumer/DGX Spark parts need the arch-specific "a" target
        return ";".join(c + "a" if c.startswith("12.") else c for c in caps)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["gpus"] = [{**asdict(g), "sm": g.sm, "nickname": g.nickname} for g in self.gpus]
        d["glibc"] = ".".join(map(str, self.glibc)) if self.glibc else None
        d.update(arch=self.arch, docker_platform=self.docker_platform, variant=self.variant,
                 torch_cuda_arch_list=self.torch_cuda_arch_list)
        return d


def _glibc() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    m = re.match(r"(\d+)\.(\d+)", version) if name == "glibc" else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def _run(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def parse_nvidia_smi(query_csv: str, header: str) -> tuple[tuple[Gpu, ...], str | None]:
    gpus = []
    for line in query_csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append(Gpu(name=parts[0], compute_capability=parts[1], driver=parts[2]))
    m = re.search(r"CUDA Version:\s*([\d.]+)", header)
    return tuple(gpus), (m.group(1) if m else None)


@lru_cache(maxsize=1)
def detect() -> Platform:
    notes: list[str] = []
    gpus: tuple[Gpu, ...] = ()
    cuda = None
    if shutil.which("nvidia-smi"):
        q = _run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                  "--format=csv,noheader"])
        header = _run(["nvidia-smi"]) or ""
        if q is not None:
            gpus, cuda = parse_nvidia_smi(q, header)
        else:
            notes.append("nvidia-smi is installed but did not answer")
    else:
        notes.append("no NVIDIA GPU found (nvidia-smi not on PATH)")
    runtimes = (_run(["docker", "info", "--format", "{{json .Runtimes}}"])
                if shutil.which("docker") else None)
    if runtimes is None:
        notes.append("docker is not installed or its daemon is not running")
    return Platform(machine=platform.machine(), glibc=_glibc(), gpus=gpus, cuda_version=cuda,
                    docker=runtimes is not None,
                    nvidia_container_runtime=bool(runtimes and "nvidia" in runtimes),
                    notes=tuple(notes))


def fingerprint(extra_env: dict[str, str] | None = None) -> dict[str, object]:
    """What every measurement records about where it ran."""
    env = dict(os.environ)
    env.update(extra_env or {})
    p = detect()
    return {
        "machine": p.machine,
        "system": platform.system(),
        "python": platform.python_version(),
        "glibc": ".".join(map(str, p.glibc)) if p.glibc else None,
        "gpus": [{"name": g.name, "compute_capability": g.compute_capability, "sm": g.sm,
                  "driver": g.driver} for g in p.gpus] or "none",
        "cuda": p.cuda_version,
        "env": relevant_env(env),
    }
