"""A small fake vLLM source tree and precompiled wheel, for tests of source histories and the
``source`` builder's precompiled path without real vLLM (no torch, no GPU).

The tree has what a precompiled build of real vLLM touches: a ``setup.py`` that, like vLLM's,
reads ``VLLM_USE_PRECOMPILED`` / ``VLLM_PRECOMPILED_WHEEL_LOCATION`` and copies the wheel's
compiled members into the checkout, and takes its version from setuptools-scm's
``SETUPTOOLS_SCM_PRETEND_VERSION`` (+``precompiled``); ``csrc/``; and the three files of vLLM
0.25.1 the planted regressions edit, holding the exact text the plants replace
(``source_history.PLANTS``). Its ``vllm serve`` (``vllm.entrypoints.cli.main``) refuses to run
without the compiled ``_C.abi3.so`` and runs the simulator with behaviour read from that
code: the default sampling params of ``ModelConfig.get_diff_sampling_param``, the draft
acceptance of the proposer's input preparation, the step time plus the scheduler's own
``schedule()`` cost.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from vllm_bisect.sim.source_history import CAP, CSRC_FILE, HOST, SPEC

SETUP = '''import os
import zipfile

from setuptools import find_packages, setup

version = os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION", "0.1.dev0")
if os.environ.get("VLLM_USE_PRECOMPILED") == "1":
    wheel = os.environ["VLLM_PRECOMPILED_WHEEL_LOCATION"]
    print(f"Using existing wheel at {wheel}")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".so"):
                with open(name, "wb") as out:
                    out.write(z.read(name))
    version += ("." if "+" in version else "+") + "precompiled"
with open("vllm/_version.py", "w") as f:
    f.write(f"__version__ = version = {version!r}\\n")
setup(name="vllm", version=version, packages=find_packages(include=["vllm", "vllm.*"]),
      package_data={"vllm": ["*.so"]},
      entry_points={"console_scripts": ["vllm=vllm.entrypoints.cli.main:main"]})
'''
INIT = '''# SPDX-License-Identifier: Apache-2.0
import os

if not os.path.exists(os.path.join(os.path.dirname(__file__), "_C.abi3.so")):
    raise ImportError("vllm._C is missing: build with the compiled parts")
from vllm._version import __version__  # noqa: E402
'''
MODEL = '''# SPDX-License-Identifier: Apache-2.0
class ModelConfig:
    def __init__(self, generation_config: dict) -> None:
        self.generation_config = generation_config

    def get_diff_sampling_param(self) -> dict:
        config = dict(self.generation_config)
        available_params = ["temperature", "top_k", "top_p", "max_new_tokens"]
        if any(p in config for p in available_params):
            diff_sampling_param = {p: config[p] for p in available_params if p in config}
            if "max_new_tokens" in diff_sampling_param:
                diff_sampling_param["max_tokens"] = diff_sampling_param.pop("max_new_tokens")
''' + CAP.old + '''        return diff_sampling_param
'''
PROPOSER = '''# SPDX-License-Identifier: Apache-2.0
class SpecDecodeBaseProposer:
    def __init__(self) -> None:
        self.input_ids = [0] * 8

    def prepare_inputs(self, target_token_ids, token_indices_to_sample, next_token_ids):
        if True:
            num_tokens = len(target_token_ids)
            # Shift the input ids by one token.
            # E.g., [a1, b1, b2, c1, c2, c3] -> [b1, b2, c1, c2, c3, c3]
            self.input_ids[: num_tokens - 1] = target_token_ids[1:]
''' + SPEC.old + '''            return self.input_ids[:num_tokens]
'''
SCHEDULER = '''# SPDX-License-Identifier: Apache-2.0
import time


class Scheduler:
    def __init__(self) -> None:
        self.current_step = 0

    def schedule(self) -> int:
''' + HOST.old + '''        return self.current_step
'''
CLI = '''# SPDX-License-Identifier: Apache-2.0
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path


def main() -> None:
    import vllm  # noqa: F401  (fails without the compiled parts, as real vLLM does)
    from vllm.config.model import ModelConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm_bisect.sim.server import run
    from vllm_bisect.sim.vllm_compat import parse

    argv = sys.argv[1:]
    cfg = parse(argv)
    gen_path = Path(argv[1]) / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    defaults = ModelConfig(gen).get_diff_sampling_param()
    drafts = SpecDecodeBaseProposer().prepare_inputs([5, 6, 7], 2, 8)
    acceptance = cfg.acceptance if drafts[-1] == 8 else 0.02
    s = Scheduler()
    t = time.perf_counter()
    for _ in range(20):
        s.schedule()
    host_ms = (time.perf_counter() - t) / 20 * 1000
    cfg = replace(cfg, gen_max_new_tokens=defaults.get("max_tokens"), acceptance=acceptance,
                  step_ms=cfg.step_ms + host_ms)
    print(f"fake vLLM {vllm.__version__}: defaults {defaults}, acceptance {acceptance}, "
          f"step {cfg.step_ms:.2f} ms", flush=True)
    run(cfg, str(cfg.extra["host"]), int(cfg.extra["port"]))
'''
FILLER = '''# SPDX-License-Identifier: Apache-2.0
"""{name}: a module of the fake tree (neutral edits land here)."""

VALUE = {i}
'''


def write_fake_vllm_tree(root: Path, n_modules: int = 12) -> Path:
    """Write the fake tree under root; returns root."""
    files = {
        "setup.py": SETUP,
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
                          'build-backend = "setuptools.build_meta"\n',
        CSRC_FILE: "// fake ops.h\n#pragma once\n",
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.26)\n",
        "vllm/__init__.py": INIT,
        CAP.path: MODEL,
        SPEC.path: PROPOSER,
        HOST.path: SCHEDULER,
        "vllm/entrypoints/cli/main.py": CLI,
    }
    for pkg in ("config", "v1", "v1/core", "v1/core/sched", "v1/spec_decode", "entrypoints",
                "entrypoints/cli", "utils"):
        files[f"vllm/{pkg}/__init__.py"] = ""
    for i in range(n_modules):
        files[f"vllm/utils/mod_{i}.py"] = FILLER.format(name=f"mod_{i}", i=i)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def build_fake_wheel(out_dir: Path, version: str = "0.25.1") -> Path:
    """A wheel with the fake tree's compiled parts (bytes that stand for shared objects)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    info = f"vllm-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("vllm/_C.abi3.so", b"\x7fELF fake compiled part " * 64)
        z.writestr("vllm/__init__.py", "# the wheel's own Python is not used\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel
