"""The two endpoints' environments side by side: installed packages, ``VLLM_*`` variables as
the server logged them (or was given them), CUDA, driver and GPU clocks where available.

Packages come from :mod:`vllm_bisect.builders.packages` (a venv read in place, an image's
listed by one short container run); a command or URL artifact has no environment
vllm-bisect can see.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from vllm_bisect.builders.packages import NOTABLE, artifact_packages, changed, venv_packages

__all__ = ["NOTABLE", "SideEnv", "artifact_packages", "env_diff", "gpu_info",
           "logged_vars", "venv_packages"]

# NAME=VALUE in a log line; vLLM writes these in prose too (0.25.1's sampler: "disabled via
# VLLM_USE_FLASHINFER_SAMPLER=0."; advice: "Set VLLM_USE_FLASHINFER_SAMPLER=0 to silence."),
# so a sentence's closing mark is not part of the value, and advice (Set/Unset/export
# before the name) is not a setting
LOGGED_VAR = re.compile(r"(?:\b(?i:(set|unset|export))\s+)?\b(VLLM_[A-Z0-9_]+)=(\S+)")
SENTENCE_END = ".,;:)\"'"
LOGGED_ITEM = re.compile(r"'(VLLM_[A-Z0-9_]+)':\s*'([^']*)'")
SMI_FIELDS = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm"


@dataclass(frozen=True)
class SideEnv:
    packages: dict[str, str] | None
    vllm_vars: dict[str, str]
    gpu: dict[str, str] | None
    notes: list[str] = field(default_factory=list)


def logged_vars(log_text: str, given: dict[str, str]) -> dict[str, str]:
    """``VLLM_*`` variables the server logged, over those it was given."""
    out = {k: v for k, v in given.items() if k.startswith("VLLM_")}
    for m in LOGGED_VAR.finditer(log_text):
        value = m.group(3).rstrip(SENTENCE_END)
        if m.group(1) is None and value:
            out[m.group(2)] = value
    out.update({m.group(1): m.group(2) for m in LOGGED_ITEM.finditer(log_text)})
    out.pop("VLLM_BISECT_SESSION", None)
    return out


def gpu_info() -> dict[str, str] | None:
    """GPU name, driver and clocks from nvidia-smi (the first GPU); None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        line = subprocess.run([smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True
                              ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
    return dict(zip(SMI_FIELDS.split(","), (x.strip() for x in line.split(",")), strict=False))


def _changes(a: dict[str, str], b: dict[str, str]) -> list[dict[str, str | None]]:
    return [{"name": k, "parent": x, "culprit": y} for k, x, y in changed(a, b)]


def env_diff(parent: SideEnv, culprit: SideEnv) -> dict[str, Any]:
    """What differs between the sides, and whether more than vLLM itself moved."""
    pkgs = (_changes(parent.packages, culprit.packages)
            if parent.packages is not None and culprit.packages is not None else None)
    beyond = sorted(str(c["name"]) for c in pkgs or []
                    if c["name"] != "vllm" and str(c["name"]).startswith(NOTABLE))
    torch = {side: (env.packages or {}).get("torch")
             for side, env in (("parent", parent), ("culprit", culprit))}
    return {
        "packages": pkgs,
        "packages_total": {"parent": len(parent.packages or {}),
                           "culprit": len(culprit.packages or {})},
        "beyond_vllm": beyond,
        "vllm_vars": _changes(parent.vllm_vars, culprit.vllm_vars),
        "vllm_vars_parent": parent.vllm_vars,
        "torch": torch,
        "gpu": {"parent": parent.gpu, "culprit": culprit.gpu},
        "notes": sorted(set(parent.notes) | set(culprit.notes)),
    }
