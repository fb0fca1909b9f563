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

from vllm_bisect.sim.study_history import KNOBS, command_spec, study_history
from vllm_bisect.sim.synth import wide_culprit_history
from vllm_bisect.spec import dump_spec, parse_spec


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
    # the same histories and specs as `vllm-bisect sim history PATH --study isolate|deps|knobs`
    if "wide" in which:
        w = study_history("isolate", root / "wide")
        spec = write(root / "wide.toml", w.spec)
        sh(root, "run", "--spec", spec, "--session", "s-wide")
        sh(root, "isolate", "s-wide")
    if "noisy" in which:
        n = wide_culprit_history(root / "noisy", n_files=7, before=0, after=0, slowdown=3.0)
        spec = write(root / "noisy.toml", command_spec(
            n.history, {"symptom": "itl", "itl_factor": 1.3}, {"max_tokens": 48}))
        sh(root, "isolate", "s-noisy", "--spec", spec, "--culprit", n.culprit, "--no-deps")
    if "deps" in which:   # its packages on a file:// index beside the history
        d = study_history("deps", root / "dep")
        spec = write(root / "dep.toml", d.spec)
        sh(root, "run", "--spec", spec, "--session", "s-dep")
        sh(root, "deps", "s-dep")
    if "knobs" in which:
        k = study_history("knobs", root / "knob")
        spec = write(root / "knob.toml", k.spec)
        knobs = [a for knob in KNOBS for a in ("--knob", knob)]
        sh(root, "knobs", "--spec", spec, "--commit", k.history.planted["knob"][:12], *knobs)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["wide", "noisy", "deps", "knobs"])
