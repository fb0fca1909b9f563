"""The environment a measurement ran in: host, GPU (when nvidia-smi answers), vLLM env vars."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from functools import lru_cache

PREFIXES = ("VLLM_", "CUDA_", "TORCH_", "NCCL_", "TRITON_", "FLASHINFER_")
EXACT = ("CUTE_DSL_ARCH",)
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY|CREDENTIAL", re.IGNORECASE)


def relevant_env(env: dict[str, str] | None = None) -> dict[str, str]:
    src = dict(os.environ) if env is None else env
    out = {}
    for k, v in sorted(src.items()):
        if k.startswith(PREFIXES) or k in EXACT:
            out[k] = "<redacted>" if SECRET.search(k) else v
    return out


@lru_cache(maxsize=1)
def gpus() -> tuple[dict[str, str], ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            found.append({"name": parts[0], "compute_capability": parts[1], "driver": parts[2]})
    return tuple(found)


def fingerprint(extra_env: dict[str, str] | None = None) -> dict[str, object]:
    env = dict(os.environ)
    env.update(extra_env or {})
    return {
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "glibc": "-".join(platform.libc_ver()),
        "gpus": list(gpus()) or "none",
        "env": relevant_env(env),
    }
