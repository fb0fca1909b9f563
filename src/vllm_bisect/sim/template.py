"""Files of the synthetic vLLM package (text templates; history.py commits them).

The package installs with an in-tree PEP 517 backend that needs nothing from an index, so a
per-commit venv builds offline in well under a second. ``vllm serve`` reads the behaviour
constants that the commit's own source defines and runs the simulator with them.
"""

from __future__ import annotations

PYPROJECT = """\
[build-system]
requires = []
build-backend = "backend"
backend-path = ["_build"]

[project]
name = "vllm"
version = "{version}"
description = "A synthetic vLLM for vllm-bisect demos and tests"
"""

BACKEND = '''\
"""Minimal in-tree PEP 517 backend: zips vllm/ into a pure-Python wheel."""
import base64
import hashlib
import os
import subprocess
import zipfile

NAME = "vllm"


def _version():
    """pyproject's version plus +g<sha9>[.variant], as setuptools-scm stamps vLLM's."""
    for line in open("pyproject.toml"):
        if line.startswith("version"):
            base = line.split("=", 1)[1].strip().strip('"')
            break
    else:
        raise RuntimeError("no version in pyproject.toml")
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    local = "g" + sha
    if os.environ.get("SYNTH_WHEEL_VARIANT"):
        local += "." + os.environ["SYNTH_WHEEL_VARIANT"]
    return base + "+" + local


def _check():
    pass{check}


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check()
    ver = _version()
    platform_tag = os.environ.get("SYNTH_WHEEL_TAG", "py3-none-any")
    name = f"{{NAME}}-{{ver}}-{{platform_tag}}.whl"
    dist = f"{{NAME}}-{{ver}}.dist-info"
    entries = []
    if os.environ.get("VLLM_USE_PRECOMPILED") == "1":  # what vLLM's setup.py would reuse
        info = "PRECOMPILED_WHEEL_COMMIT = %r\\n" % os.environ.get("VLLM_PRECOMPILED_WHEEL_COMMIT")
        entries.append((NAME + "/_precompiled.py", info.encode()))
    for root, _, files in sorted(os.walk(NAME)):
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(root, f)
                entries.append((p, open(p, "rb").read()))
    meta = f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{ver}}\\n".encode()
    wheel = ("Wheel-Version: 1.0\\nGenerator: synthetic\\nRoot-Is-Purelib: true\\n"
             f"Tag: {{platform_tag}}\\n").encode()
    eps = b"[console_scripts]\\nvllm = vllm.entrypoints.cli.main:main\\n"
    entries += [(f"{{dist}}/METADATA", meta), (f"{{dist}}/WHEEL", wheel),
                (f"{{dist}}/entry_points.txt", eps)]
    record = "".join(f"{{p}},{{_digest(d)}},{{len(d)}}\\n" for p, d in entries)
    entries.append((f"{{dist}}/RECORD", (record + f"{{dist}}/RECORD,,\\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for p, d in entries:
            z.writestr(p, d)
    return name
'''

BROKEN_CHECK = """
    raise RuntimeError("{message}")"""

INIT = '''\
"""Synthetic vLLM."""
from vllm.version import __version__

__all__ = ["__version__"]
'''

VERSION = '__version__ = "{version}"\n'

ENGINE_CONFIG = '''\
"""Engine pacing (synthetic): what one decode step costs on this commit."""

# Time of one engine step (one verify step under speculative decoding), in ms.
DECODE_STEP_MS = {step_ms}
# Time of the prefill step of a prompt of up to 512 tokens (longer prompts: proportionally).
PREFILL_MS = {prefill_ms}
# Memory at start-up: the weights' GiB and the GiB left for the KV cache (<= 0: out of memory).
WEIGHTS_GIB = {weights_gib}
KV_CACHE_GIB = {kv_cache_gib}
# Start-up: weight loading and CUDA-graph capture.
ENGINE_INIT_S = {init_s}
# Run-to-run variation of the step time (coefficient of variation).
STEP_NOISE_CV = {noise_cv}
# Start-to-start variation: each server start's own step-time level (coefficient of variation).
SERVER_LEVEL_CV = {server_cv}
# Numerics: greedy output is wrong after this many tokens (None: correct).
GREEDY_DIVERGES_AFTER = {diverge}
'''

SPEC_DECODE = '''\
"""Speculative decoding (synthetic): draft acceptance and output handling."""

# Probability that each draft token is accepted, given the previous one was.
DRAFT_ACCEPTANCE = {acceptance}
# Maximum output tokens of a speculative request; None means no limit.
SPEC_MAX_OUTPUT_TOKENS = {cap}
# Share of speculative requests the limit applies to (a race: not every request hits it).
SPEC_CAP_PROBABILITY = {cap_probability}
'''

GEN_CONFIG = '''\
"""Defaults merged from the model's generation_config.json (synthetic)."""

# generation_config.json max_new_tokens of the served model; None when absent.
MODEL_MAX_NEW_TOKENS = {max_new_tokens}
# Before PR #34063, max_new_tokens capped even an explicit max_tokens.
MAX_NEW_TOKENS_CAPS_EXPLICIT = {caps_explicit}
'''

CLI_MAIN = '''\
"""`vllm serve MODEL [--port P] [--speculative-config JSON] ...` (synthetic, runs the simulator)."""
import argparse
import json
import os
import sys

from vllm import version
from vllm.config import engine
from vllm.spec_decode import config as spec
from vllm.transformers_utils import generation_config as gen


def main():
    ap = argparse.ArgumentParser(prog="vllm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--speculative-config", default=None)
    s.add_argument("--generation-config", default="auto")
    s.add_argument("--max-model-len", type=int, default=8192)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--enforce-eager", action="store_true")
    try:  # vLLM's ProfilerConfig (vllm/config/profiler.py): where the commit has it
        from vllm.config import profiler as prof
    except ImportError:
        prof = None
    if prof is not None:
        s.add_argument("--profiler-config", default=None)
    for extra in os.environ.get("VLLM_BISECT_SIM_PATH", "").split(os.pathsep):
        if extra and extra not in sys.path:
            sys.path.append(extra)
    if sys.argv[1:3] == ["bench", "serve"]:
        from vllm_bisect.sim import bench

        return bench.main(sys.argv[3:])
    args, unknown = ap.parse_known_args()
    if any(u.startswith("--profiler-config") for u in unknown):
        ap.error("unrecognized arguments: " + " ".join(unknown))
    from vllm_bisect.sim.engine import SimConfig
    from vllm_bisect.sim.profile_trace import kernel_table
    from vllm_bisect.sim.server import run

    spec_k = 0
    if args.speculative_config:
        spec_k = int(json.loads(args.speculative_config).get("num_speculative_tokens", 1))
    use_gen = args.generation_config != "vllm"
    profile = json.loads(getattr(args, "profiler_config", None) or "{}")
    declared = getattr(getattr(prof, "ProfilerConfig", None), "__annotations__", None)
    if declared is not None and set(profile) - set(declared):
        ap.error(f"--profiler-config: extra fields not permitted: {sorted(set(profile) - set(declared))}")
    if profile.get("profiler") == "torch":
        profiler_dir, gz = profile["torch_profiler_dir"], profile.get("torch_profiler_use_gzip", True)
    else:  # before --profiler-config: the VLLM_TORCH_PROFILER_DIR environment variable
        profiler_dir, gz = (os.environ.get("VLLM_TORCH_PROFILER_DIR") or None), True
    try:  # the commit's decode-step kernel table, where it has one
        from vllm.v1.worker import step_profile
        kernels, gap = tuple(step_profile.DECODE_KERNELS), step_profile.HOST_GAP_US
    except ImportError:
        kernels, gap = kernel_table(engine.DECODE_STEP_MS, None, "", 0.0)
    cfg = SimConfig(
        model=args.model,
        version=version.__version__,
        max_model_len=args.max_model_len,
        step_ms=engine.DECODE_STEP_MS,
        prefill_ms=engine.PREFILL_MS,
        startup_delay_s=engine.ENGINE_INIT_S,
        noise_cv=engine.STEP_NOISE_CV,
        diverge_after_tokens=getattr(engine, "GREEDY_DIVERGES_AFTER", None),
        spec_k=spec_k,
        acceptance=spec.DRAFT_ACCEPTANCE,
        spec_output_cap=spec.SPEC_MAX_OUTPUT_TOKENS,
        cap_probability=getattr(spec, "SPEC_CAP_PROBABILITY", 1.0),
        gen_max_new_tokens=gen.MODEL_MAX_NEW_TOKENS if use_gen else None,
        gen_caps_explicit=gen.MAX_NEW_TOKENS_CAPS_EXPLICIT,
        seed=args.seed,
        weights_gib=getattr(engine, "WEIGHTS_GIB", 16.0),
        kv_cache_gib=getattr(engine, "KV_CACHE_GIB", 40.0),
        kernels=tuple(tuple(k) for k in kernels),
        host_gap_us=gap,
        profiler_dir=profiler_dir,
        profiler_gzip=bool(gz),
        cuda_graphs=not args.enforce_eager,
        # (only when set: a simulator package from before server_cv still runs the rest)
        **({"server_cv": server_cv} if (server_cv := getattr(engine, "SERVER_LEVEL_CV", 0.0))
           else {}),
        # how long a SIGTERM'd server takes to exit (real vLLM: seconds); only when set too
        **({"shutdown_delay_s": down} if (down := float(os.environ.get("VLLM_SIM_SHUTDOWN_S")
                                                         or 0)) else {}),
    )
    run(cfg, args.host, args.port)


if __name__ == "__main__":
    main()
'''

STEP_PROFILE = '''\
"""Decode-step composition (synthetic): the GPU kernels one decode step launches."""

# (kernel name, microseconds per launch, launches per decode step)
DECODE_KERNELS = {kernels}
# Host time between two decode steps, while the GPU idles, in microseconds.
HOST_GAP_US = {gap}
'''

PROFILER_CONFIG = '''\
"""Profiler configuration (synthetic): ``--profiler-config \'{"profiler": "torch",
"torch_profiler_dir": DIR}\'`` replaces the VLLM_TORCH_PROFILER_DIR variable."""

PROFILERS = ("torch", "cuda")


class ProfilerConfig:
    """The fields of vLLM 0.25.1's ProfilerConfig that the simulator knows (vLLM's configs
    forbid unknown keys: ``vllm serve`` exits on one, and so does the simulator)."""

    profiler: str | None = None
    torch_profiler_dir: str = ""
    torch_profiler_with_stack: bool = True
    torch_profiler_use_gzip: bool = True
    torch_profiler_dump_cuda_time_total: bool = True
    ignore_frontend: bool = False
'''

KERNEL_SOURCE = """\
// Synthetic CUDA source (revision {rev}).
#include <cuda_runtime.h>
__global__ void fused_add_rms_norm_kernel(float* out, const float* in, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += in[i];  // rev {rev}
}}
"""

README = "# vLLM (synthetic)\n\nA synthetic history for vllm-bisect. Revision {rev}.\n"
