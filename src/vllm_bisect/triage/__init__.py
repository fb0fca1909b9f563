"""Triage: a regression report in, a bisect spec and a list of unknowns out."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import git

from vllm_bisect.spec import BisectSpec, parse_spec
from vllm_bisect.triage.parse import Triage, triage

__all__ = ["Triage", "resolve_refs", "spec_from_triage", "triage", "triage_json"]


def resolve_refs(t: Triage, repo: git.Repo) -> None:
    """Short shas to full ones, tags and release versions to commits, in place."""
    for attr in ("good", "bad"):
        ref = getattr(t, attr)
        if ref is None:
            continue
        for candidate in (ref, f"v{ref}" if ref[0].isdigit() else ref):
            try:
                setattr(t, attr, repo.commit(candidate).hexsha)
                break
            except (ValueError, git.BadName):
                continue
        else:
            t.warnings.append(f"{attr} ref {ref!r} is not in the repository (try `git fetch`)")


def spec_from_triage(t: Triage, repo_path: str = ".") -> dict[str, Any]:
    probe: dict[str, Any] = {"endpoint": "completions", "requests": 3}
    verdict: dict[str, Any] = {"symptom": t.symptom or "any"}
    if t.min_output_tokens:
        probe["max_tokens"] = max(1024, 4 * t.min_output_tokens)
    if t.itl_factor:
        verdict["itl_factor"] = t.itl_factor
    args = list(t.serve_args)
    if t.hardware.get("tensor_parallel", 1) > 1 and "--tensor-parallel-size" not in args:
        args += ["--tensor-parallel-size", str(t.hardware["tensor_parallel"])]
    build: dict[str, Any] = {"kind": "image" if t.hardware.get("arch") == "aarch64" else "wheel"}
    if t.hardware.get("variant"):
        build["variant"] = t.hardware["variant"]
    if t.hardware.get("docker_platform") and build["kind"] == "image":
        build["platform"] = t.hardware["docker_platform"]
    serve: dict[str, Any] = {"args": args, "env": t.env}
    if t.model:
        serve["model"] = t.model
    if t.speculative:
        serve["speculative"] = t.speculative
    rng: dict[str, Any] = {"repo": repo_path}
    if t.good:
        rng["good"] = t.good
    if t.bad:
        rng["bad"] = t.bad
    return {"range": rng, "build": build, "serve": serve, "probe": probe, "verdict": verdict}


def validated_spec(t: Triage, repo_path: str = ".") -> BisectSpec:
    return parse_spec(spec_from_triage(t, repo_path), source="triage")


def triage_json(t: Triage, repo_path: str = ".") -> dict[str, Any]:
    doc = asdict(t)
    doc["spec"] = spec_from_triage(t, repo_path)
    return doc
