"""result.json's ``endpoint_env``: the endpoints' environments side by side, as
typed values: the packages that differ (what :mod:`~vllm_bisect.bisect.endpoint_env` told
before the search), the ``VLLM_*`` variables each side's servers were started with, and the
GPU, driver and CUDA each side's measurement recorded (``Evaluation.environment``, the
fingerprint every measurement keeps). The report's "Environments of the endpoints" section
(report/env_section.py) is rendered from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vllm_bisect.builders.packages import beyond_vllm, changed
from vllm_bisect.models import Evaluation


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Change(_Doc):
    """One name whose value differs between the sides (None: absent on that side)."""

    name: str
    good: str | None
    bad: str | None


class EndpointEnvDoc(_Doc):
    """The good side (the good endpoint; a lazy good endpoint: the first commit judged good)
    against the bad endpoint."""

    good: str
    bad: str
    good_judged: bool = False          # the good side is a commit judged good, not the endpoint
    compared: bool = False             # both sides' packages were seen
    packages: list[Change] = Field(default_factory=list)   # the packages that differ
    package_counts: tuple[int, int] | None = None          # installed on each side
    beyond_vllm: list[str] = Field(default_factory=list)   # changed: torch, flashinfer, ...
    deps_command: str | None = None    # more than vLLM differs: the study that swaps the pins
    vllm_vars: list[Change] = Field(default_factory=list)  # VLLM_* the servers were given
    vllm_vars_same: int = 0            # VLLM_* variables equal on both sides
    platform: list[Change] = Field(default_factory=list)   # gpu, driver, cuda that differ
    gpu: str | None = None             # the good side's (the bad side's too unless in platform)
    driver: str | None = None
    cuda: str | None = None
    notes: list[str] = Field(default_factory=list)
    line: str | None = None            # what the terminal said before the first search step


def _platform(ev: Evaluation | None) -> dict[str, str]:
    env = ev.environment if ev is not None else {}
    gpus = env.get("gpus")
    first = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else {}
    out = {"gpu": first.get("name"), "driver": first.get("driver"), "cuda": env.get("cuda")}
    return {k: str(v) for k, v in out.items() if v}


def _vllm_vars(ev: Evaluation | None) -> dict[str, str]:
    env = ev.environment.get("env") if ev is not None else None
    return ({str(k): str(v) for k, v in env.items() if str(k).startswith("VLLM_")}
            if isinstance(env, dict) else {})


def _changes(a: Mapping[str, str], b: Mapping[str, str]) -> list[Change]:
    return [Change(name=n, good=x, bad=y) for n, x, y in changed(dict(a), dict(b))]


def env_doc(packages: tuple[dict[str, str] | None, dict[str, str] | None] | None,
            evaluations: tuple[Evaluation | None, Evaluation | None], *, good: str, bad: str,
            judged_good: bool, notes: tuple[str, ...], line: str | None,
            session: Path) -> EndpointEnvDoc | None:
    """The document from each side's packages (None: no artifact here) and evaluation."""
    ge, be = evaluations
    if ge is None and be is None and packages is None:
        return None
    pg, pb = packages or (None, None)
    pkgs = _changes(pg, pb) if pg is not None and pb is not None else []
    beyond = beyond_vllm([(c.name, c.good, c.bad) for c in pkgs])
    vg, vb = _vllm_vars(ge), _vllm_vars(be)
    fg, fb = _platform(ge), _platform(be)
    why = list(notes)
    if packages is None:
        why.append("an endpoint's artifact was not prepared in this run (measured before, "
                   "from the result cache): its packages were not read")
    return EndpointEnvDoc(
        good=good, bad=bad, good_judged=judged_good, compared=bool(pg is not None and pb
                                                                    is not None),
        packages=pkgs, package_counts=(len(pg), len(pb)) if pg is not None and pb is not None
        else None, beyond_vllm=beyond,
        deps_command=f"vllm-bisect deps {session}" if beyond else None,
        vllm_vars=_changes(vg, vb), vllm_vars_same=sum(vg.get(k) == v for k, v in vb.items()),
        platform=_changes(fg, fb) if ge is not None and be is not None else [],
        gpu=fg.get("gpu") or fb.get("gpu"), driver=fg.get("driver") or fb.get("driver"),
        cuda=fg.get("cuda") or fb.get("cuda"), notes=why, line=line)
