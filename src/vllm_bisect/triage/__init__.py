"""Triage: a regression (or fix) report in, a bisect spec and a list of unknowns out."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import asdict
from typing import Any

import git

from vllm_bisect.bisect.release import candidates, main_branch, map_ref
from vllm_bisect.spec import BisectSpec, parse_spec
from vllm_bisect.symptoms import Symptom
from vllm_bisect.triage.comment import comment_markdown, without_form_reply
from vllm_bisect.triage.nightly import resolve_nightlies
from vllm_bisect.triage.reading import triage
from vllm_bisect.triage.roles import SearchKind
from vllm_bisect.triage.values import Read, Source, Triage

__all__ = ["Read", "Source", "Triage", "comment_markdown", "compare_command", "resolve_refs",
           "spec_and_choices", "spec_from_triage", "spec_toml", "triage", "triage_json",
           "validated_spec", "without_form_reply"]


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
    return spec_and_choices(t, repo_path)[0]


def _ratio_why(values: list[float], unit: str) -> str:
    pos = sorted(v for v in values if v > 0)
    return (f"the reported {unit} {pos[0]:g} and {pos[-1]:g} ({pos[-1] / pos[0]:.2f}x): a "
            "commit counts as bad past the geometric midpoint of the step (sqrt of the ratio)"
            if len(pos) >= 2 else "the reported values' ratio")


def _verdict_choices(t: Triage, symptom: str, probe: dict[str, Any], verdict: dict[str, Any],
                     chose: list[Read]) -> None:
    """The probe and verdict keys a symptom needs (each listed in ``chose`` with why)."""
    def put(section: dict[str, Any], key: str, value: Any, why: str) -> None:
        section[key] = value
        chose.append(Read(f"{'probe' if section is probe else 'verdict'}.{key}", str(value),
                          None, why))

    info = Symptom(symptom).info
    if t.itl_factor and "itl_factor" in (info.factor_key, *(
            Symptom(c).info.factor_key for c in info.covers)):
        put(verdict, "itl_factor", t.itl_factor, _ratio_why(
            t.numbers.get("itl_ms") or t.numbers.get("tok_s") or [],
            "ITL (ms)" if t.numbers.get("itl_ms") else "speeds (tok/s)"))
    if symptom == "throughput":   # (sized from the report's speeds; measured by its bench line)
        put(verdict, "throughput_factor", t.throughput_factor or 1.1, _ratio_why(
            t.numbers.get("tok_s") or [], "speeds (tok/s)") if t.throughput_factor else
            "no two speeds reported: a 10% drop")
        if t.bench is not None:
            probe["bench"] = {"kind": t.bench["kind"], "args": t.bench["args"]}
        else:
            put(probe, "load", {"concurrency": 8, "requests": 32}, "no `vllm bench` line: the "
                "probe's own closed-loop load measures throughput")
    # the values the symptom's declaration says it needs (a verdict value the report sized
    # is kept; a probe value the symptom needs replaces the tool's default)
    for dotted, value, why in info.triage_defaults:
        section_name, key = dotted.split(".", 1)
        section = probe if section_name == "probe" else verdict
        if section is verdict and key in verdict:
            continue
        put(section, key, value, why)


def spec_and_choices(t: Triage, repo_path: str = ".") -> tuple[dict[str, Any], list[Read]]:
    """The spec triage writes, and every value in it the report did not literally say, each
    with why (issue 42): defaults the tool chose, values derived from the report's numbers,
    and values rewritten from what it wrote."""
    chose: list[Read] = [
        Read("probe.endpoint", "completions", None, "the tool's probe: a streaming completion"),
        Read("probe.requests", "3", None, "the tool's default: 3 requests per commit")]
    probe: dict[str, Any] = {"endpoint": "completions", "requests": 3}
    symptom = (t.symptom if t.symptom and t.symptom in Symptom._value2member_map_
               else Symptom.ANY.value)
    if symptom == "mtp-speedup" and not t.speculative:
        symptom = "any"
    if symptom != t.symptom or len(t.symptoms) > 1:
        chose.append(Read("verdict.symptom", symptom, None,
                          f"the report names {', '.join(t.symptoms) or 'no metric'}; one "
                          "search follows one symptom (`any`: output length or ITL)"))
    verdict: dict[str, Any] = {"symptom": symptom}
    if t.cap_tokens:
        probe["max_tokens"] = max(1024, 4 * t.cap_tokens)
        chose.append(Read("probe.max_tokens", str(probe["max_tokens"]), None,
                          f"room past the reported cap of {t.cap_tokens} tokens "
                          "(4x it, at least 1024)"))
    _verdict_choices(t, symptom, probe, verdict, chose)
    args = list(t.serve_args)
    tp = t.hardware.get("tensor_parallel", 1)
    if tp > 1 and "--tensor-parallel-size" not in args and "-tp" not in args:
        args += ["--tensor-parallel-size", str(tp)]
        chose.append(Read("serve.args", f"--tensor-parallel-size {tp}", None,
                          f"the report ran tensor parallel {tp} (not on its `vllm serve` "
                          "line)"))
    parallel: dict[str, Any] = {}
    if tp > 1:   # the servers need as many GPUs as the tensor parallelism
        parallel["gpus_per_probe"] = tp
        chose.append(Read("parallel.gpus_per_probe", str(tp), None,
                          f"tensor parallel {tp}: each server needs {tp} GPUs"))
    images = [i for i in t.images if ("vllm-openai" in i or "vllm-release-repo" in i)
              and "rocm" not in i]
    rocm = t.hardware.get("platform") == "rocm"
    kind = ("source" if rocm else
            "image" if t.hardware.get("arch") == "aarch64" or images else "wheel")
    chose.append(Read("build.kind", kind, None, (
        f"{t.hardware.get('gpu') or 'ROCm'}: an AMD GPU; the per-commit wheels and the default "
        "per-commit images are CUDA builds, so each commit is built from source (on a machine "
        "with ROCm's toolchain)") if rocm else "the report runs a vLLM image" if images else
        "aarch64: per-commit images exist for it, wheels not for every commit"
        if kind == "image" else "per-commit wheels (wheels.vllm.ai): no build"))
    build: dict[str, Any] = {"kind": kind}
    if t.hardware.get("variant") and not rocm:
        build["variant"] = t.hardware["variant"]
        chose.append(Read("build.variant", build["variant"], None,
                          "the report runs CUDA 13 (the cu130 build)"))
    if t.hardware.get("docker_platform") and kind == "image":
        build["platform"] = t.hardware["docker_platform"]
        chose.append(Read("build.platform", build["platform"], None,
                          f"{t.hardware.get('gpu') or 'the GPU'} is an aarch64 machine"))
    serve: dict[str, Any] = {"args": args, "env": t.env}
    if t.local_model:  # the path the reporter served (t.model is then only its folder's name)
        serve["model"] = t.local_model
    elif t.model:
        serve["model"] = t.model
    if t.speculative:
        serve["speculative"] = t.speculative
        if t.speculative_method_said and t.speculative_method_said != t.speculative["method"]:
            chose.append(Read("serve.speculative.method", str(t.speculative["method"]), None,
                              f"the report says {t.speculative_method_said!r}; vLLM runs every "
                              "*_mtp method as 'mtp'"))
    rng: dict[str, Any] = {"repo": repo_path}
    if repo_path == ".":
        chose.append(Read("range.repo", ".", None, "no --repo given: the vLLM checkout `run` "
                          "is started in (pass --repo to resolve the refs now)"))
    if t.search is SearchKind.FIX:
        rng["search"] = "fix"
    if t.good:
        rng["good"] = t.good
    if t.bad:
        rng["bad"] = t.bad
    doc = {"range": rng, "build": build, "serve": serve, "probe": probe, "verdict": verdict}
    if parallel:
        doc["parallel"] = parallel
    return doc, chose


def validated_spec(t: Triage, repo_path: str = ".") -> BisectSpec:
    return parse_spec(spec_from_triage(t, repo_path), source="triage")


def spec_toml(t: Triage, repo_path: str = ".", report: str = "the report") -> str:
    """The spec file ``triage --write`` writes: only the keys triage set (validated first),
    each value the report did not say under a ``# chose`` comment with why; every other key
    takes its default."""
    from vllm_bisect.spec.load import _toml_value

    validated_spec(t, repo_path)   # a spec `run` refuses is never written
    doc, chose = spec_and_choices(t, repo_path)
    why: dict[str, list[str]] = {}
    for c in chose:
        section, _, key = c.what.partition(".")
        why.setdefault(f"{section}.{key.split('.')[0]}", []).append(
            f"# chose {c.what} = {c.value}: {c.why}")
    out = [f"# Written by `vllm-bisect triage {report}`. A key not written here takes its "
           "default", "# (`vllm-bisect spec --keys`); a value the report did not say is "
           "marked `# chose`, with why.", ""]
    for section, values in doc.items():
        out.append(f"[{section}]")
        for key, value in values.items():
            out += why.get(f"{section}.{key}", [])
            out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    return "\n".join(out)


def triage_json(t: Triage, repo_path: str = ".") -> dict[str, Any]:
    doc = asdict(t)
    doc["search"] = t.search.value
    doc["spec"], chose = spec_and_choices(t, repo_path)
    doc["chose"] = [asdict(c) for c in chose]
    doc["compare_command"] = compare_command(t)
    return doc
