"""``explain``: profile the culprit against its parent and diff the two endpoints' setups.

Cost: ``servers_per_side`` server starts per side (2 by default, 4 in all), interleaved
parent, culprit, parent, culprit so that a slow drift of the host does not fall on one side.
Everything lands in the session: raw traces under ``explain/traces/<side>-<n>/`` (open them
in https://ui.perfetto.dev), server logs under ``explain/logs/``, the plot
``explain/deltas.svg``, and the ``explain`` key of result.json (then report.md/html again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vllm_bisect.builders import make_builder
from vllm_bisect.builders.base import prepare
from vllm_bisect.builders.wheel import write_atomic
from vllm_bisect.errors import ProbeError
from vllm_bisect.explain.diff import profile_diff
from vllm_bisect.explain.envdiff import SideEnv, artifact_packages, env_diff, gpu_info, logged_vars
from vllm_bisect.explain.launch import profiled_run, profiler_switch
from vllm_bisect.explain.plot import deltas_svg
from vllm_bisect.explain.trace import TraceSummary, summarize, worker_trace
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.spec import BisectSpec

logger = logging.getLogger(__name__)

OnPhase = Callable[[str], None]
SIDES = ("parent", "culprit")


def _side_env(spec: BisectSpec, builder: Any, sha: str, log: Path) -> SideEnv:
    artifact = prepare(builder, sha)
    packages, note = artifact_packages(artifact)
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    given = {**artifact.env, **spec.serve.env}
    found = logged_vars(text, given)
    found.pop("VLLM_TORCH_PROFILER_DIR", None)  # ours, a different folder per server
    return SideEnv(packages=packages, vllm_vars=found, gpu=gpu_info(),
                   notes=[note] if note else [])


def tokens_per_step(spec: BisectSpec, ev: Evaluation, steps: int) -> float | None:
    """Output tokens per decode step in the profiled window (the measured requests only:
    their warm-up runs before the profiler starts); None when the probe ran more than the
    decode requests (a load grid, a benchmark)."""
    m = ev.measurement
    if m is None or not m.requests or steps <= 0 or spec.probe.load is not None \
            or spec.probe.bench is not None:
        return None
    return round(sum(max(0, r.output_tokens - 1) for r in m.requests) / steps, 3)


def setup_key(spec: BisectSpec) -> str:
    """What a profiled server's numbers depend on beyond the commit: the build, the serve
    line and the probe (a kept server is reused only under the same setup)."""
    doc = spec.model_dump(mode="json", include={"build", "serve", "probe", "explain"})
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def explain_session(session: Path, cache_dir: Path, servers_per_side: int = 2,
                    on_phase: OnPhase | None = None, culprit_ref: str | None = None,
                    spec: BisectSpec | None = None, against: BisectSpec | None = None
                    ) -> dict[str, Any]:
    """Profile, diff, save into the session; returns the ``explain`` document.
    ``culprit_ref``: another commit than the session's culprit (against its parent);
    ``spec``: instead of the session's stored one; ``against``: profile the culprit under
    ``spec`` (the "parent" side) and under ``against`` (the "culprit" side) instead of
    against its parent: two setups of one commit (eager against CUDA graphs, MTP on
    against off)."""
    from vllm_bisect.isolate.studies import target

    say = on_phase or (lambda _msg: None)
    spec, repo, culprit, parent = target(session, spec, culprit_ref)
    if against is not None:
        parent = culprit
    base = session / "explain"
    specs = {"parent": spec, "culprit": against or spec}
    builders = {"parent": make_builder(spec, repo, cache_dir, base / "logs")}
    builders["culprit"] = builders["parent"] if against is None or \
        against.build == spec.build else make_builder(against, repo, cache_dir, base / "logs")
    shas = {"parent": parent, "culprit": culprit}
    keys = {side: f"{shas[side]}:{setup_key(specs[side])}" for side in SIDES}
    summaries: dict[str, list[TraceSummary]] = {s: [] for s in SIDES}
    per_step: dict[str, list[float | None]] = {s: [] for s in SIDES}
    switches: dict[str, str] = {}
    logs: dict[str, Path] = {}
    kept_count = 0
    for n in range(1, servers_per_side + 1):
        for side in SIDES:
            sha = shas[side]
            trace_dir = base / "traces" / f"{side}-{n}"
            switch = profiler_switch(repo, sha, trace_dir)
            # where the traces went, from the session (never a literal DIR: issue 50)
            switches[side] = switch.describe().replace(str(trace_dir.absolute()),
                                                       _from_session(trace_dir, session))
            log_dir = base / "logs" / f"{side}-{n}"
            logs.setdefault(side, log_dir / f"serve-{sha[:12]}.log")
            kept = _kept(base, side, n, keys[side])
            if kept is not None:  # profiled by an earlier, interrupted explain: not again
                say(f"{side} {sha[:12]}, server {n}/{servers_per_side}: kept from an earlier run")
                summaries[side].append(kept[0])
                per_step[side].append(kept[1])
                kept_count += 1
                continue
            shutil.rmtree(trace_dir, ignore_errors=True)
            say(f"{side} {sha[:12]}, server {n}/{servers_per_side}: {switches[side]}")
            ev = profiled_run(specs[side], builders[side], sha, switch, log_dir, cache_dir,
                              on_phase=_steps(say, side, n, servers_per_side))
            if ev.status is not EvalStatus.MEASURED:
                raise ProbeError(f"profiling the {side} ({sha[:12]}), server {n}: {ev.reason}",
                                 log_tail=ev.log_tail or "")
            say(f"{side} {sha[:12]}, server {n}/{servers_per_side}: reading its trace")
            summaries[side].append(summarize(worker_trace(trace_dir)))
            per_step[side].append(tokens_per_step(specs[side], ev,
                                                  summaries[side][-1].steps))
            _keep(base, side, n, keys[side], summaries[side][-1], per_step[side][-1])
    diff = profile_diff(summaries["parent"], summaries["culprit"],
                        (per_step["parent"], per_step["culprit"]))
    say("the two sides' packages, VLLM_* variables and GPU")
    envs = {side: _side_env(specs[side], builders[side], shas[side], logs[side])
            for side in SIDES}
    svg = base / "deltas.svg"
    svg.write_text(deltas_svg(diff.deltas[:12]))
    doc: dict[str, Any] = {
        "culprit": culprit, "parent": parent, "servers_per_side": servers_per_side,
        "setups": None if against is None else {
            side: specs[side].serve.model_dump(mode="json",
                                               include={"args", "env", "speculative"})
            for side in SIDES},
        "server_starts": 2 * servers_per_side - kept_count, "servers_kept": kept_count,
        "profiler": switches,
        "segmentation": summaries["culprit"][0].segmentation,
        "steps": {s: [x.steps for x in summaries[s]] for s in SIDES},
        "tokens_per_step": per_step,
        "traces": {s: [str(Path(x.path).relative_to(session)) for x in summaries[s]]
                   for s in SIDES},
        "totals": [d.to_dict() for d in diff.totals],
        "deltas": [d.to_dict() for d in diff.deltas],
        "within_spread": diff.within_spread,
        "plot": str(svg.relative_to(session)),
        "environment": env_diff(envs["parent"], envs["culprit"]),
    }
    _save(session, doc)
    return doc


def _steps(say: OnPhase, side: str, n: int, k: int) -> Callable[[str, str], None]:
    """One profiled server's steps (preparing, starting, probing, the profiler on and off)
    as progress lines: a real server takes a minute to start and its trace as long to write
    (issue 50: no long silence)."""
    def step(commit: str, phase: str) -> None:
        say(f"{side} {commit[:12]}, server {n}/{k}: {phase}")
    return step


def _from_session(path: Path, session: Path) -> str:
    try:
        return str(path.absolute().relative_to(session.absolute()))
    except ValueError:
        return str(path.absolute())


def _kept_path(base: Path, side: str, n: int) -> Path:
    return base / "servers" / f"{side}-{n}.json"


def _keep(base: Path, side: str, n: int, key: str, summary: TraceSummary,
          per_step: float | None) -> None:
    """One profiled server's numbers, written as soon as its trace is read (an interrupted
    explain resumes from the next server; the trace itself stays under ``traces/``)."""
    path = _kept_path(base, side, n)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"commit": key, "summary": asdict(summary),
                                   "tokens_per_step": per_step}, indent=2))


def _kept(base: Path, side: str, n: int, key: str) -> tuple[TraceSummary, float | None] | None:
    path = _kept_path(base, side, n)
    try:
        doc = json.loads(path.read_text())
        if doc["commit"] != key:  # another commit, or the same under another setup
            return None
        return TraceSummary(**doc["summary"]), doc["tokens_per_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(session: Path, doc: dict[str, Any]) -> None:
    from vllm_bisect.explain.report_section import ExplainDoc
    from vllm_bisect.report.render import write_section

    write_section(session, "explain", ExplainDoc.model_validate(doc))
