"""Synthetic histories for the studies after a bisect (``vllm-bisect sim history --study``):
``isolate`` (a refactor touching 20 files, one hunk of which caps speculative outputs),
``deps`` (a commit that bumps two pins and the Dockerfile's CUDA_VERSION; one new pin caps
outputs) and ``knobs`` (a commit where one serve flag caps outputs). Each comes with its
spec and the commands that run the study on it: what ``scripts/isolate_demo.py`` runs.

``deps`` needs a package index: its packages are built as wheels into a static PEP 503 tree
beside the history (``<path>-index/simple``), which uv, pip and the ``deps`` study read as a
``file://`` index (no server, no network).
"""

from __future__ import annotations

import hashlib
import html
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from vllm_bisect.sim.history import History, sim_path

STUDIES = ("isolate", "deps", "knobs")
MTP = '{{"method":"mtp","num_speculative_tokens":3}}'
KNOBS = ("VLLM_USE_FLASHINFER_SAMPLER=1,0", "--attention-backend=FLASH_ATTN,TRITON_ATTN",
         "VLLM_MTP_ASYNC_SCHEDULING=-,1")


@dataclass(frozen=True)
class StudyHistory:
    history: History
    spec: dict[str, Any]          # the spec's data (parse_spec validates it)
    commands: tuple[str, ...]     # what runs the study: ``{spec}`` and ``{session}`` filled


def command_spec(h: History, verdict: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    """A ``command`` build that serves each commit's simulated vLLM from its checkout."""
    return {
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "command", "setup": f"{sys.executable} -m compileall -q vllm",
                  "serve": f"{sys.executable} -m vllm.entrypoints.cli.main serve {{model}} "
                           f"--port {{port}} --speculative-config '{MTP}'"},
        "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()}},
        "probe": {"max_tokens": 160, "requests": 1, "warmup": 0, **probe},
        "verdict": {"symptom": "length", "verify_samples": 0, **verdict},
    }


def static_index(dist: Path, root: Path) -> str:
    """A PEP 503 tree under ``root`` for the wheels in ``dist``; its ``file://`` URL."""
    from vllm_bisect.sim.package_index import _project

    simple = root / "simple"
    projects: dict[str, list[Path]] = {}
    for f in sorted(dist.iterdir()):
        name = _project(f.name)
        if name is not None:
            projects.setdefault(canonicalize_name(name), []).append(f)
    for name, files in projects.items():
        (simple / name).mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="{html.escape(f"../../files/{f.name}")}#sha256='
            f'{hashlib.sha256(f.read_bytes()).hexdigest()}">{html.escape(f.name)}</a>\n'
            for f in files)
        (simple / name / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    (simple / "index.html").write_text("".join(f'<a href="{n}/">{n}</a>\n' for n in projects))
    return simple.resolve().as_uri()


def study_history(study: str, path: Path) -> StudyHistory:
    """The history of ``study`` at ``path`` (a new directory), its spec and commands."""
    from vllm_bisect.sim.synth import dependency_history, knob_history, wide_culprit_history

    if study == "isolate":
        w = wide_culprit_history(path, n_files=20, before=1, after=1)
        return StudyHistory(w.history, command_spec(w.history, {}, {}), (
            "vllm-bisect run --spec {spec} --session {session}",
            "vllm-bisect isolate {session}"))
    if study == "deps":
        from vllm_bisect.sim.package_index import build_package

        index = path.parent / f"{path.name}-index"
        dist = (index / "files").absolute()
        for v in ("1.0", "1.1", "1.2", "1.3", "1.4"):   # 1.3 on cap speculative outputs
            cap = "128" if v >= "1.3" else "None"
            build_package("tinydep", v, f'"""tinydep {v}"""\nSPEC_OUTPUT_CAP = {cap}\n', dist)
        for v in ("2.0", "2.1"):                        # bumped beside it, harmless
            build_package("aiodep", v, f'"""aiodep {v}"""\n', dist)
        h = dependency_history(path, "tinydep", "1.0", "1.4", before=1, after=1,
                               also={"aiodep": ("2.0", "2.1")}, cuda=("12.8.1", "12.9.1"))
        data = command_spec(h, {}, {})
        data["build"] = {"kind": "source", "install_args": ["--index-url",
                                                            static_index(dist, index)]}
        data["serve"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 3}
        return StudyHistory(h, data, ("vllm-bisect run --spec {spec} --session {session}",
                                      "vllm-bisect deps {session}"))
    if study == "knobs":
        h = knob_history(path)
        knobs = " ".join(f"--knob {k}" for k in KNOBS)
        return StudyHistory(h, command_spec(h, {}, {}), (
            f"vllm-bisect knobs --spec {{spec}} --commit {h.planted['knob'][:12]} {knobs}",))
    raise ValueError(f"no study history {study!r} (one of {', '.join(STUDIES)})")
