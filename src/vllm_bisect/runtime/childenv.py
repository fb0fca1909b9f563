"""The environment every child process gets: servers, builds, ``vllm bench``, containers.

An allowlist, not a copy of ``os.environ``: the names a server, a build or a benchmark needs
(PATH, HOME, locale, proxies and CA bundles, the Hugging Face cache, compiler and build
settings, and the variables that change vLLM's behaviour), never a name that looks like a
credential (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH: ``GITHUB_TOKEN``,
``VLLM_BISECT_WEBHOOK_SECRET``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ...). A credential a
server needs (``HF_TOKEN`` for a gated model) is passed only when it is named in
``serve.pass_env`` — the operator's opt-in. A container gets only the vLLM-relevant subset
(host paths mean nothing inside it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH|COOKIE|SESSION_ID",
                         re.IGNORECASE)
# what vLLM, PyTorch, CUDA, NCCL, Triton and FlashInfer read (also inside a container)
VLLM_PREFIXES = ("VLLM_", "CUDA_", "TORCH_", "NCCL_", "TRITON_", "FLASHINFER_", "CUTE_DSL_",
                 "NVIDIA_", "OMP_", "MKL_", "PYTORCH_")
HOST_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "PWD", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH",
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV", "CONDA_PREFIX",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TRANSFORMERS_CACHE",
    "TRANSFORMERS_OFFLINE", "CC", "CXX", "CUDACXX", "MAX_JOBS", "NVCC_THREADS",
})
# build tools, package installers, the Hugging Face cache, the C/C++ toolchain
HOST_PREFIXES = ("LC_", "HF_", "HUGGINGFACE_", "PIP_", "UV_", "CMAKE_", "CCACHE_", "SCCACHE_",
                 "SYNTH_WHEEL_")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _allowed(name: str, container: bool) -> bool:
    if is_secret_name(name):
        return False
    if name.startswith(VLLM_PREFIXES):
        return True
    return not container and (name in HOST_NAMES or name.startswith(HOST_PREFIXES))


def child_env(extra: Mapping[str, str] | None = None, *, pass_env: Iterable[str] = (),
              container: bool = False, source: Mapping[str, str] | None = None
              ) -> dict[str, str]:
    """The allowlisted part of ``source`` (default ``os.environ``), plus the names in
    ``pass_env`` taken from ``source`` even if they look like credentials, plus ``extra``
    (the spec's ``serve.env`` and what the runtime sets: VIRTUAL_ENV, CUDA_VISIBLE_DEVICES)."""
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if _allowed(k, container)}
    for name in pass_env:
        if name in src:
            env[name] = src[name]
    env.update(extra or {})
    return env
