"""Triage: a regression (or fix) report in, a bisect spec and a list of unknowns out."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import asdict
from typing import Any

import git

from vllm_bisect.bisect.release import candidates, main_branch, map_ref
from vllm_bisect.spec import BisectSpec, parse_spec
from vllm_bisect.triage.comment import comment_markdown, without_form_reply
from vllm_bisect.triage.nightly import resolve_nightlies
from vllm_bisect.triage.reading import triage
from vllm_bisect.triage.roles import SearchKind
from vllm_bisect.triage.values import Read, Source, Triage

__all__ = ["Read", "Source", "Triage", "comment_markdown", "compare_command", "resolve_refs",
           "spec_from_triage", "triage", "triage_json", "validated_spec", "without_form_reply"]


def _commit(repo: git.Repo, ref: str) -> git.Commit | None:
    for candidate in candidates(ref):
        try:
            return repo.commit(candidate)
        except (ValueError, git.BadName, git.GitCommandError):
            continue
    return None


def _pr_commit(repo: git.Repo, pr: str, main: str | None) -> git.Commit | None:
    """The merge commit of PR ``#N`` on main: its subject ends in ``(#N)``."""
    try:
        out = repo.git.log(main or "HEAD", "--first-parent", "-F", f"--grep=(#{pr.lstrip('#')})",
                           "--format=%H", "-n", "1")
    except git.GitCommandError:
        return None
    return repo.commit(out.strip()) if out.strip() else None


def _resolve_pr(t: Triage, repo: git.Repo, main: str | None) -> None:
    """A PR named as the culprit: its merge commit is the bad end, its parent the good one; in a
    fix search (round 7) its merge commit is the end that has the problem."""
    if (t.good or "").startswith("#"):
        merged = _pr_commit(repo, t.good or "", main)
        if merged is None:
            t.warnings.append(f"PR {t.good} has no merge commit on {main}")
        else:
            t.read.append(Read(f"range.good ({t.old_term})", merged.hexsha[:12], None,
                               f"the merge commit of {t.good} on {main}"))
            t.good = merged.hexsha
    if not (t.bad or "").startswith("#"):
        return
    c = _pr_commit(repo, t.bad or "", main)
    if c is None:
        t.warnings.append(f"PR {t.bad} has no merge commit on {main} (git log --grep '({t.bad})')")
        return
    pr = next((r for r in reversed(t.read) if r.what.startswith("range.bad")), None)
    line, source, quote = (pr.line, pr.source, pr.quote) if pr else (None, Source.GUESSED, "")
    t.read.append(Read("range.bad (bad)", c.hexsha[:12], line,
                       f"the merge commit of {t.bad} on {main} (its subject ends in '({t.bad})')",
                       source, quote))
    if t.good is None and c.parents:
        t.good = c.parents[0].hexsha
        t.read.append(Read("range.good (good)", t.good[:12], line,
                           f"the parent of {t.bad}'s merge commit: the culprit alone is checked",
                           source, quote))
    t.bad = c.hexsha


def resolve_refs(t: Triage, repo: git.Repo) -> None:
    """Refs to full shas, in place: release tags off main become their branch point (said so,
    with the cherry-picks the branch point lacks); several refs of one role are ordered by
    git ancestry (the earliest new end, the latest old end before it); a PR named as the
    culprit becomes its merge commit."""
    main = main_branch(repo)
    before = len(t.read)
    given = {attr: r for r in t.read for attr in ("good", "bad") if r.what.startswith(f"range.{attr}")}
    _resolve(t, repo, main)
    for i, r in enumerate(t.read[before:], before):  # a commit found for an end: as sure as the end
        end = next((given[a] for a in given if r.what.startswith(f"range.{a}")), None)
        if end is not None:
            t.read[i] = dataclasses.replace(r, source=end.source, quote=end.quote,
                                            line=r.line or end.line)


def _resolve(t: Triage, repo: git.Repo, main: str | None) -> None:
    resolve_nightlies(t, repo, main)
    _resolve_pr(t, repo, main)
    resolved: dict[str, git.Commit] = {}
    for role in ("old", "new"):
        for ref in t.candidates.get(role, []):
            c = _commit(repo, ref)
            if c is not None:
                mapped = map_ref(repo, ref, c, main)
                resolved[ref] = repo.commit(mapped.sha)
                if mapped.note and ref in (t.good, t.bad):
                    t.warnings.append(mapped.note)
                    t.read.append(Read("release branch point", mapped.sha[:12], None,
                                       mapped.note + (": " + "; ".join(mapped.cherry_picks[:10])
                                                      if mapped.cherry_picks else "")))
    news = [resolved[r] for r in t.candidates.get("new", []) if r in resolved]
    if len(news) > 1:  # the earliest new end by ancestry (a versionless sha is ordered too)
        first = news[0]
        for c in news[1:]:
            if repo.is_ancestor(c, first):
                first = c
        t.bad = next(r for r in t.candidates["new"] if resolved.get(r) == first)
    olds = [resolved[r] for r in t.candidates.get("old", []) if r in resolved]
    bad_c = resolved.get(t.bad or "")
    if len(olds) > 1 and bad_c is not None:
        before = [c for c in olds if repo.is_ancestor(c, bad_c)]
        if before:
            last = before[0]
            for c in before[1:]:
                if repo.is_ancestor(last, c):
                    last = c
            t.good = next(r for r in t.candidates["old"] if resolved.get(r) == last)
    for attr in ("good", "bad"):
        ref = getattr(t, attr)
        if ref is None:
            continue
        if ref in resolved:
            setattr(t, attr, resolved[ref].hexsha)
        else:
            t.warnings.append(f"{attr} ref {ref!r} is not in the repository (try `git fetch`)")


def compare_command(t: Triage) -> str | None:
    """`vllm-bisect compare` for an env var the report flips between runs (an A/B at one
    commit), or None."""
    if not t.env_flips:
        return None
    name, values = next(iter(t.env_flips.items()))
    # where the variable matters: the commit with the problem
    commit = (t.good if t.search is SearchKind.FIX else t.bad) or t.good or t.bad or "<commit>"
    return (f"vllm-bisect compare --spec spec.toml --commit {shlex.quote(commit)} "
            f"--a-env {shlex.quote(f'{name}={values[0]}')} "
            f"--b-env {shlex.quote(f'{name}={values[1]}')}")


def spec_from_triage(t: Triage, repo_path: str = ".") -> dict[str, Any]:
    probe: dict[str, Any] = {"endpoint": "completions", "requests": 3}
    symptom = t.symptom if t.symptom in ("length", "itl", "any", "throughput", "correctness",
                                         "crash", "mtp-speedup", "ttft", "memory") else "any"
    if symptom == "mtp-speedup" and not t.speculative:
        symptom = "any"
    verdict: dict[str, Any] = {"symptom": symptom}
    if t.min_output_tokens:
        probe["max_tokens"] = max(1024, 4 * t.min_output_tokens)
    if t.itl_factor and symptom in ("itl", "any"):
        verdict["itl_factor"] = t.itl_factor
    if symptom == "itl" and "itl_factor" not in verdict:
        verdict["itl_factor"] = 1.5  # no numbers to size it: a 1.5x slowdown
    if symptom == "throughput":
        verdict["throughput_factor"] = t.throughput_factor or 1.1
        if t.bench is not None:
            probe["bench"] = {"kind": t.bench["kind"], "args": t.bench["args"]}
        else:
            probe["load"] = {"concurrency": 8, "requests": 32}
    if symptom == "mtp-speedup":
        probe["mtp_speedup"] = {"concurrency": 16, "requests": 32}
        verdict["min_mtp_speedup"] = 1.0  # bad when MTP is slower than plain decoding
    if symptom == "correctness":
        probe["temperature"] = 0.0
    if symptom == "ttft":  # a long prefill, judged by the two-level test like ITL
        probe.update(prompt_tokens=2048, max_tokens=16)
        verdict["ttft_factor"] = 1.5
    if symptom == "memory":  # read at start-up; one short request checks the server serves
        probe.update(requests=1, max_tokens=16)
        verdict["memory_factor"] = 1.1
    args = list(t.serve_args)
    tp = t.hardware.get("tensor_parallel", 1)
    if tp > 1 and "--tensor-parallel-size" not in args and "-tp" not in args:
        args += ["--tensor-parallel-size", str(tp)]
    images = [i for i in t.images if "vllm-openai" in i or "vllm-release-repo" in i]
    kind = "image" if t.hardware.get("arch") == "aarch64" or images else "wheel"
    build: dict[str, Any] = {"kind": kind}
    if t.hardware.get("variant"):
        build["variant"] = t.hardware["variant"]
    if t.hardware.get("docker_platform") and kind == "image":
        build["platform"] = t.hardware["docker_platform"]
    serve: dict[str, Any] = {"args": args, "env": t.env}
    if t.local_model:  # the path the reporter served (t.model is then only its folder's name)
        serve["model"] = t.local_model
    elif t.model:
        serve["model"] = t.model
    if t.speculative:
        serve["speculative"] = t.speculative
    rng: dict[str, Any] = {"repo": repo_path}
    if t.search is SearchKind.FIX:
        rng["search"] = "fix"
    if t.good:
        rng["good"] = t.good
    if t.bad:
        rng["bad"] = t.bad
    return {"range": rng, "build": build, "serve": serve, "probe": probe, "verdict": verdict}


def validated_spec(t: Triage, repo_path: str = ".") -> BisectSpec:
    return parse_spec(spec_from_triage(t, repo_path), source="triage")


def triage_json(t: Triage, repo_path: str = ".") -> dict[str, Any]:
    doc = asdict(t)
    doc["search"] = t.search.value
    doc["spec"] = spec_from_triage(t, repo_path)
    doc["compare_command"] = compare_command(t)
    return doc
