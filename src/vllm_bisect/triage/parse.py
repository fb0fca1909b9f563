"""Turn a regression (or fix) report, GitHub issue Markdown in English or Chinese, into what a
bisect needs: the range and which kind of search, the symptoms, how the reporter served and
measured, and what could not be read. Every value remembers the line it was read from.

Input is capped (MAX_CHARS, MAX_LINE per line) and every pattern is linear-time.
"""

from __future__ import annotations

import math
import re
from typing import Any

from vllm_bisect.symptoms import Symptom
from vllm_bisect.triage.failure_words import failure_symptoms
from vllm_bisect.triage.fix_words import listed_fix_prs
from vllm_bisect.triage.fixes import as_fix, drop_advised_old, fix_cues
from vllm_bisect.triage.measured import measured_roles
from vllm_bisect.triage.names import path_name
from vllm_bisect.triage.nightly import NIGHTLY_REF, nightly_unknown
from vllm_bisect.triage.pins import main_pin
from vllm_bisect.triage.refs import MAX_LINE, find_mentions
from vllm_bisect.triage.roles import (
    Point,
    SearchKind,
    choose,
    merge_points,
)
from vllm_bisect.triage.rules import (
    between_range,
    by_date,
    drop_other_columns,
    drop_side_remarks,
    drop_suggestions,
    environment_bad,
    fixed_on,
    improvement,
    leading_label,
    pr_culprit,
    refine,
    title_yields,
)
from vllm_bisect.triage.serving import find_serving
from vllm_bisect.triage.symptom_words import word_symptoms
from vllm_bisect.triage.symptoms import READ, Found, Prose, find_symptoms, found_of
from vllm_bisect.triage.values import Read, Triage
from vllm_bisect.triage.versions import respell, title_index
from vllm_bisect.triage.votes import assign_votes

MAX_CHARS = 200_000


def _point_doc(p: Point, role: str | None) -> dict[str, Any]:
    return {"ref": p.ref, "version": p.version, "sha": p.sha, "role": role,
            "lines": sorted({m.line for m in p.mentions}), "why": p.why[:4]}


def _ratio(values: list[float]) -> float | None:
    pos = [v for v in values if v > 0]
    if len(pos) < 2:
        return None
    r = max(pos) / min(pos)
    return round(max(1.05, math.sqrt(r)), 2) if r > 1.05 else None  # the geometric midpoint


def _range(t: Triage, lines: list[str]) -> None:
    mentions = find_mentions(lines)
    t.images = sorted({m.image for m in mentions if m.image})
    concrete = {m.version for m in mentions if m.version and m.how != "family"}
    if len(concrete) >= 2:  # "v0.11.x" stands in for its first release only when the report
        mentions = [m for m in mentions if m.how != "family"]  # names no versions of its own
    asked = drop_suggestions(lines, mentions)
    kept = {m.label for m in asked}
    for m in mentions:
        if m not in asked and m.label not in kept:
            t.warnings.append(f"line {m.line}: {m.label} is only suggested in a question (nobody "
                              "ran it yet): not an end")
            kept.add(m.label)
    mentions = drop_other_columns(lines, drop_side_remarks(lines, asked))
    points = merge_points(mentions)
    arrows = assign_votes(lines, mentions, points)
    between_range(lines, mentions, points)
    leading_label(lines, points)
    measured_roles(lines, mentions, points)
    title = title_index(lines)
    t.warnings += title_yields(points, title)
    pairs: list[list[Point]] = []
    for n in sorted({m.line for m in mentions}):
        on_line: list[Point] = []
        for p in points:
            if p.key is not None and any(m.line == n for m in p.mentions) and p not in on_line:
                on_line.append(p)
        pairs.append(on_line)
    roles = refine(choose(points, arrows, pairs), points, title, lines[title - 1] if lines else "")
    roles = as_fix(roles, points, lines, fixed_on(points, lines)) or roles
    roles = drop_advised_old(roles, lines)
    roles = by_date(roles, points, lines) or roles
    roles = environment_bad(roles, points, lines) or roles
    t.search = roles.search
    role_of = {id(p): "old" for p in roles.goods} | {id(p): "new" for p in roles.bads}
    t.points = [_point_doc(p, role_of.get(id(p))) for p in points]
    t.candidates = {"old": [p.ref for p in roles.goods], "new": [p.ref for p in roles.bads]}
    t.warnings += roles.notes
    for attr, end in (("good", roles.old), ("bad", roles.new)):
        if end is None:
            continue
        setattr(t, attr, end.ref)
        setattr(t, attr + "_label", end.label)
        term = t.old_term if attr == "good" else t.new_term
        role = end.role()
        line = end.role_lines.get(role, end.line) if role else end.line
        t.read.append(Read(f"range.{attr} ({term})", end.label, line,
                           "; ".join(end.why[:2]) or "named in the report"))
    if roles.search is SearchKind.FIX:
        t.read.append(Read("search", "find the fix", None,
                           "the report is about a fix: the range runs from a commit with the "
                           "problem to a fixed one, and the bisect looks for the first fixed "
                           "commit"))
    pin = main_pin(lines) if "main" in (t.good, t.bad) else None
    if pin is not None:  # round 7: "main commit <sha>" is the main that was measured
        attr = "bad" if t.bad == "main" else "good"
        setattr(t, attr, pin[0])
        setattr(t, attr + "_label", pin[0])
        t.read.append(Read(f"range.{attr} ({t.new_term if attr == 'bad' else t.old_term})",
                           pin[0], pin[1], "the report labels this sha as main's commit: the "
                           "main that was measured (main's head has moved on since)"))
    # round 7: a culprit PR beats a bad end read only from version order (no word marks it: a
    # template's "vLLM version: X" is what the PR was tested with, not where it broke)
    weak = (roles.new is not None and not roles.new.votes and t.bad == roles.new.ref
            and any(n.startswith("no good/bad marker") for n in roles.notes))
    culprit = (pr_culprit(lines) if (t.bad is None or weak) and t.search is SearchKind.REGRESSION
               else None)
    if t.search is SearchKind.FIX and t.good is None and (problem := pr_culprit(lines)):
        # in a fix search the culprit PR is the end that has the problem
        t.good, t.good_label = problem[0], problem[0]
        t.read.append(Read("range.good (has the problem)", problem[0], problem[1],
                           f"{problem[2]!r}: a PR named as the culprit (its merge commit has the "
                           "problem)"))
    if culprit is not None:
        t.read = [r for r in t.read if not r.what.startswith("range.bad")]
        t.bad, t.bad_label = culprit[0], culprit[0]
        t.read.append(Read("range.bad (bad)", culprit[0], culprit[1],
                           f"{culprit[2]!r}: a PR named as the culprit (its merge commit, found "
                           "with git log --grep; its parent is the good end)"))
    range_unknowns(t)


RANGE_UNKNOWN = ("good", "bad", "the commit with the problem", "the fixed commit")


def range_unknowns(t: Triage) -> None:
    """What the range still lacks (an end, a dev version's commit), said again from scratch."""
    t.unknowns = [u for u in t.unknowns if not u.startswith(RANGE_UNKNOWN)]
    what = "the commit with the problem" if t.search is SearchKind.FIX else "good"
    if t.good is None and not (t.bad or "").startswith("#"):
        t.unknowns.append(f"{what}: no ref named as {t.old_term} (pass --good)")
    if t.bad is None:
        t.unknowns.append(f"{'the fixed commit' if t.search is SearchKind.FIX else 'bad'}: no ref "
                          f"named as {t.new_term} (pass --bad)")
    for label in ("good", "bad"):
        ref = getattr(t, label)
        if ref and NIGHTLY_REF.fullmatch(ref):
            t.unknowns.append(nightly_unknown(label, ref))
        elif ref and not ref.startswith("v") and any(c == "." for c in ref):
            t.unknowns.append(f"{label} {ref} is a dev/nightly version without its commit: pass "
                              "the commit sha (vllm --version prints it as +g<sha>)")


PERF = re.compile(r"性能|\bperf(?:ormance)?\b|\bslow(?:er|down)?\b|\bfaster\b|变慢|不如|"
                  r"\bspeed\b|速度", re.IGNORECASE)


# the symptoms a spec can follow, in the registry's order of preference
SPEC_ORDER: tuple[Found, ...] = READ


def settle_symptoms(t: Triage) -> None:
    """From ``t.symptoms`` (and the numbers read): the one the spec follows, the factors to
    size it, and an unknown for a symptom no probe judges."""
    found = {found_of(f) for f in t.symptoms}
    t.unknowns = [u for u in t.unknowns if not u.startswith("symptom ")]
    both = next((s for s in Symptom if s.info.covers and set(s.info.covers) <= found), None)
    if both is not None:   # ("any": length and ITL at once)
        t.symptom = both.value
    else:
        t.symptom = next((f.value for f in SPEC_ORDER if f in found), None)
    itl_ms, tok_s = t.numbers.get("itl_ms", []), t.numbers.get("tok_s", [])
    t.itl_factor = _ratio(itl_ms) if Symptom.ITL in found else None
    if t.itl_factor is None and Symptom.ITL in found:
        t.itl_factor = _ratio(tok_s)
    t.throughput_factor = (_ratio(tok_s) or 1.1) if Symptom.THROUGHPUT in found else None
    unsupported = [f.value for f in Prose if f in found]
    if unsupported:
        t.unknowns.append(f"symptom {', '.join(unsupported)}: no probe judges it yet; the spec "
                          f"follows {t.symptom or 'nothing'}")


def _symptoms(t: Triage, lines: list[str]) -> None:
    count: dict[int, int] = {}
    for p in t.points:
        for n in set(p["lines"]):
            count[n] = count.get(n, 0) + 1
    sides = {n: p["role"] for p in t.points if p["role"] for n in p["lines"] if count[n] == 1}
    s = find_symptoms(lines, bench_throughput=t.bench is not None and t.bench["kind"] == "throughput",
                      sides=sides)
    for f, n, why in word_symptoms(lines):
        s.add(f, n, why)
    for f, n, why in failure_symptoms(lines, set(s.found)):  # round 7
        s.add(f, n, why)
    t.symptoms = [f.value for f in s.found]
    t.numbers = {"cap_tokens": [float(c) for c in s.caps], "itl_ms": s.itl_ms, "tok_s": s.tok_s}
    for f in s.found:
        line = s.where.get(f.value) or None
        t.read.append(Read("symptom", f.value, line, s.why.get(f.value, "")))
    if s.caps:
        t.cap_tokens = max(s.caps)  # as written: a run reaching past it is good
    settle_symptoms(t)
    if not s.found and PERF.search("\n".join(lines)):
        # "性能测试结果不如 0.7.3", "4x slower" with no metric named: which one a bisect checks
        # is the reporter's call; the spec's default (`any`: output length and ITL) is said
        t.unknowns.append("symptom: a performance complaint that names no metric; the spec "
                          "checks `any` (output length and ITL): pass verdict.symptom "
                          "(throughput, ttft, itl, latency) to check what the report means")
    elif not s.found:
        t.unknowns.append("symptom: no output cap, ITL, throughput, TTFT or accuracy change "
                          "found (pass verdict.symptom)")


def _serving(t: Triage, lines: list[str]) -> None:
    s = find_serving(lines)
    t.model, t.local_model = s.model, s.local_model
    if s.model and s.model_org_less:
        t.read.append(Read("model", s.model, s.model_line, "a model named without its org (a "
                           "known family with a size or version)"))
        t.unknowns.append(f"model: {s.model!r} is named without its org: pass the Hugging Face "
                          "id (serve.model)")
    elif s.model:
        t.read.append(Read("model", s.model, s.model_line, "Hugging Face id"))
    elif s.local_model:
        t.model = path_name(s.local_model)  # the name the path gives the model, if any
        t.read.append(Read("model", s.local_model, s.model_line, "a local path" + (
            f": the model's name is its folder {t.model!r}" if t.model else "")))
        t.unknowns.append(f"model: the report serves a local path ({s.local_model}); pass the "
                          "Hugging Face id or mount that path (serve.model)")
    else:
        t.unknowns.append("model: no Hugging Face model id found (pass serve.model)")
    t.serve_args, t.env, t.env_flips = s.serve_args, s.env, s.env_flips
    if s.serve_line:
        t.read.append(Read("serve args", " ".join(s.serve_args) or "(none)", s.serve_line,
                           f"`{s.serve_how}` line (--port, --host, --model and unsafe values dropped)"))
    t.speculative, t.speculative_method_said = s.speculative, s.speculative_said
    if s.speculative_why:
        t.read.append(Read("speculative", str(s.speculative or "none"), None, s.speculative_why))
    t.hardware = s.hardware
    if s.hardware.get("gpu") is None:
        t.unknowns.append("hardware: no GPU named (the bisect runs on the machine you use)")
    if s.bench_kind:
        t.benchmark = s.bench_command
        t.bench = {"kind": s.bench_kind, "args": s.bench_args}
        t.read.append(Read("benchmark", s.bench_command or "", s.bench_line,
                           f"`vllm bench {s.bench_kind}` line"))
        if s.bench_kind == "latency":
            t.warnings.append("`vllm bench latency` has no probe here: its dataset flags are "
                              "kept in the report, the decode probe measures ITL instead")
            t.bench = None
    t.fixed_by = s.fixed_by
    if not t.fixed_by and t.search is SearchKind.FIX:
        t.fixed_by = listed_fix_prs(lines, [c.line for c in fix_cues(lines) if not c.advice])
    t.warnings += s.warnings


def _improvement(t: Triage, lines: list[str]) -> None:
    """An improvement is not a regression: no range, no symptom (said so)."""
    title = lines[title_index(lines) - 1] if lines else ""
    words = improvement(title)
    if words is None:
        return
    t.good = t.bad = t.good_label = t.bad_label = t.symptom = None
    t.symptoms, t.candidates = [], {}
    t.read.append(Read("not a regression", words, 1, f"the title reports an improvement "
                       f"({words!r}) and nothing worse: nothing to bisect"))
    t.unknowns.append("the report reads as an improvement, not a regression (pass good/bad "
                      "and verdict.symptom to bisect it anyway)")


def triage(text: str) -> Triage:
    text = text[:MAX_CHARS]
    lines = [ln[:MAX_LINE] for ln in text.splitlines()]
    t = Triage()
    lines, respelled = respell(lines)
    for r in respelled:
        t.read.append(Read("version spelling", f"{r.written!r} -> {r.read!r}", r.line, r.why))
    _range(t, lines)
    _serving(t, lines)
    _symptoms(t, lines)
    _improvement(t, lines)
    return t
