"""Re-run the README's and docs/isolate.md's `isolate` / `deps` / `knobs` examples on the
synthetic histories (simulator servers, a local PEP 503 index; no GPU) and print each
command with its real output.

    PYTHONPATH=src python3 scripts/isolate_demo.py /tmp/isolate-demo [wide|noisy|deps|knobs]...
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vllm_bisect.isolate.synth import (
    dependency_history,
    knob_history,
    wide_culprit_history,
)
from vllm_bisect.sim.history import History, sim_path
from vllm_bisect.sim.package_index import PackageIndex, build_package
from vllm_bisect.spec import dump_spec, parse_spec

MTP = '{{"method":"mtp","num_speculative_tokens":3}}'


def command_spec(h: History, verdict: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    return {
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "command", "setup": f"{sys.executable} -m compileall -q vllm",
                  "serve": f"{sys.executable} -m vllm.entrypoints.cli.main serve {{model}} "
                           f"--port {{port}} --speculative-config '{MTP}'"},
        "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()}},
        "probe": {"max_tokens": 160, "requests": 1, "warmup": 0, **probe},
        "verdict": {"symptom": "length", "verify_samples": 0, **verdict},
    }


def write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(dump_spec(parse_spec(data)))
    return path.name


def sh(root: Path, *args: str) -> None:
    shown = " ".join(a if " " not in a else repr(a) for a in args)
    print(f"$ vllm-bisect {shown}", flush=True)
    done = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args, "--cache-dir",
                           str(root / "cache")], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "300"}, check=False)
    print((done.stderr + done.stdout).rstrip(), flush=True)


def main(root: Path, which: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if "wide" in which:
        w = wide_culprit_history(root / "wide", n_files=20, before=1, after=1)
        spec = write(root / "wide.toml", command_spec(w.history, {}, {}))
        sh(root, "run", "--spec", spec, "--session", "s-wide")
        sh(root, "isolate", "s-wide")
    if "noisy" in which:
        w = wide_culprit_history(root / "noisy", n_files=7, before=0, after=0, slowdown=3.0)
        spec = write(root / "noisy.toml", command_spec(
            w.history, {"symptom": "itl", "itl_factor": 1.3}, {"max_tokens": 48}))
        sh(root, "isolate", "s-noisy", "--spec", spec, "--culprit", w.culprit, "--no-deps")
    if "deps" in which:
        dist = root / "dist"
        for v in ("1.0", "1.1", "1.2", "1.3", "1.4"):
            cap = "128" if v >= "1.3" else "None"
            build_package("tinydep", v, f'"""tinydep {v}"""\nSPEC_OUTPUT_CAP = {cap}\n', dist)
        for v in ("2.0", "2.1"):
            build_package("aiodep", v, f'"""aiodep {v}"""\n', dist)
        h = dependency_history(root / "dep", "tinydep", "1.0", "1.4", before=1, after=1,
                               also={"aiodep": ("2.0", "2.1")}, cuda=("12.8.1", "12.9.1"))
        with PackageIndex(dist) as idx:
            data = command_spec(h, {}, {})
            data["build"] = {"kind": "source", "install_args": ["--index-url", idx.url]}
            data["serve"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 3}
            spec = write(root / "dep.toml", data)
            sh(root, "run", "--spec", spec, "--session", "s-dep")
            sh(root, "deps", "s-dep")
    if "knobs" in which:
        h = knob_history(root / "knob")
        spec = write(root / "knob.toml", command_spec(h, {}, {}))
        sh(root, "knobs", "--spec", spec, "--commit", h.planted["knob"][:12],
           "--knob", "VLLM_USE_FLASHINFER_SAMPLER=1,0",
           "--knob", "--attention-backend=FLASH_ATTN,TRITON_ATTN",
           "--knob", "VLLM_MTP_ASYNC_SCHEDULING=-,1")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["wide", "noisy", "deps", "knobs"])
