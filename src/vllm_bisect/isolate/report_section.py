"""The sections of result.json and report.md/html that the studies after the culprit own:
``isolate`` (:data:`ISOLATE`), ``deps`` (:data:`DEPS`) and ``knobs`` (:data:`KNOBS`), each its
document's model and its render (Markdown; the HTML report embeds the Markdown), pure
functions of the document. Registered by dotted path in
:data:`vllm_bisect.report.sections.STUDY_SECTIONS`: the report imports this module only when
a result.json has one of these keys. Field order of the models is the order the studies
write them in."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vllm_bisect.report.section import SectionDoc, StudySection
from vllm_bisect.text import plural


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _judged_by(d: dict[str, Any]) -> list[str]:
    """Which verdict strategy judged (the bisect's policy, settled on the two endpoints)."""
    if not d.get("strategy"):
        return []
    return [f"Judged by the bisect's verdict policy: **{d['strategy']}** "
            f"({_cell(d.get('strategy_reason', ''))}).", ""]


def isolate_lines(d: dict[str, Any]) -> list[str]:
    out = ["", "### Which part of the culprit (delta debugging over its diff)", "",
           *_judged_by(d)]
    files = d.get("minimal_files") or []
    out.append(f"The culprit changes {plural(len(d['files']), 'file')}; applied on its parent "
               f"`{d['parent'][:12]}`, the smallest set that reproduces the symptom is "
               f"**{len(files)} file{'s' if len(files) != 1 else ''}**: "
               + ", ".join(f"`{f}`" for f in files) + f" ({plural(d['file_tests'], 'build')}).")
    if d.get("minimal_hunks") and d.get("hunk_tests"):
        out.append(f"Within {'it' if len(files) == 1 else 'them'}, {len(d['minimal_hunks'])} of "
                   f"{plural(len(d['hunks']), 'hunk')} reproduce it "
                   f"({plural(d['hunk_tests'], 'build')}):")
        out += [f"- `{h}`" for h in d["minimal_hunks"]]
    removes = d.get("revert_removes")
    if removes is not None:
        out.append("Reverting exactly that set on the culprit **"
                   + ("removes the symptom" if removes else "does not remove the symptom")
                   + f"** ({d['revert_verdict']}: {d['revert_reason']}).")
    elif d.get("revert_verdict"):
        out.append(f"Reverting that set on the culprit could not be tested: {d['revert_reason']}")
    skips = [t for t in d.get("trials", []) if t["verdict"] == "skip"]
    out.append(f"{plural(d['fresh_builds'], 'build')} this run; "
               f"{plural(len(skips), 'subset')} did not build or "
               "serve (skips, not verdicts).")
    out += ["", "<details><summary>Subsets tested</summary>", "", "| subset | verdict | why |",
            "|---|---|---|"]
    out += [f"| {_cell(t['label'])[:160]} | {t['verdict']} | {_cell(t['reason'])[:100]} |"
            for t in d.get("trials", [])]
    out += ["", "</details>"]
    return out


def deps_lines(d: dict[str, Any]) -> list[str]:
    out = ["", "### Dependency or vLLM code", "", *_judged_by(d)]
    base = d.get("base_changes") or []
    if base:
        out += ["Base versions the culprit changes (Dockerfile):", ""]
        out += [f"- {c}" for c in base]
        out += ["", f"These cannot be bisected: {d.get('base_note', '')}.", ""]
    if not d.get("changes"):
        return [*out, "The culprit changes no pip-installable dependency pins."]
    out += ["Pins the culprit changes:", ""] + [f"- {c}" for c in d["changes"]] + [""]
    out.append(f"- parent with the culprit's pins: {d.get('parent_with_new_pins') or '-'}")
    out.append(f"- culprit with the parent's pins: {d.get('culprit_with_old_pins') or '-'}")
    out.append(f"- conclusion: **{d['conclusion']}**")
    for p in d.get("packages", []):
        if p.get("first_bad_version"):
            out.append(f"- `{p['name']}` {p['old']} -> {p['new']}: first bad version "
                       f"**{p['first_bad_version']}** (on the {p['base']}, index "
                       f"{d.get('index_url')}; {plural(len(p['tested']), 'version')} built)")
        elif p.get("candidates"):
            out.append(f"- `{p['name']}`: the first bad version is one of "
                       + ", ".join(p["candidates"]) + " (the others could not be installed)")
        if p.get("note"):
            out.append(f"- `{p['name']}`: {p['note']}")
        if p.get("tested"):
            out += ["", "| version | verdict | why |", "|---|---|---|"]
            out += [f"| {t['version']} | {t['verdict']} | {_cell(t['reason'])[:100]} |"
                    for t in p["tested"]]
    return out


def knobs_lines(d: dict[str, Any]) -> list[str]:
    out = ["", "### Which knob flips the symptom", "", *_judged_by(d)]
    for t in d.get("tables", []):
        out.append(f"At `{t['commit'][:12]}`, baseline ({t['baseline']}): "
                   f"**{t['baseline_verdict']}** ({t['baseline_reason']}).")
        out += ["", "| knob | value | verdict | flips |", "|---|---|---|---|"]
        mark = {True: "**yes**", False: "no", None: "untestable"}
        out += [f"| `{r['knob']}` | `{r['value']}` | {r['verdict']} | {mark[r['flips']]} |"
                for r in t["rows"]]
        if t.get("minimal"):
            out.append("")
            out.append("Smallest change that flips it: " + ", ".join(f"`{m}`"
                                                                   for m in t["minimal"]))
        elif t.get("all_changed_verdict") is not None:
            out += ["", f"Every knob changed at once: {t['all_changed_verdict']} (no flip)."]
        out.append("")
    return out


class IsolateDoc(SectionDoc):
    """``isolate``: ddmin over the culprit's files and hunks (isolate/culprit.py)."""

    culprit: str | None = None
    parent: str
    files: list[str]
    python_only: bool | None = None
    minimal_files: list[str] = Field(default_factory=list)
    file_tests: int
    hunks: list[str] = Field(default_factory=list)
    minimal_hunks: list[str] = Field(default_factory=list)
    hunk_tests: int = 0
    tests: int | None = None
    revert_verdict: str | None = None
    revert_reason: str | None = None
    revert_removes: bool | None = None
    fresh_builds: int
    trials: list[dict[str, Any]] = Field(default_factory=list)
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


class DepsDoc(SectionDoc):
    """``deps``: the culprit's dependency pins and versions (isolate/deps.py)."""

    culprit: str | None = None
    parent: str | None = None
    changes: list[str] = Field(default_factory=list)
    base_changes: list[str] = Field(default_factory=list)
    base_note: str = ""
    parent_with_new_pins: str | None = None
    culprit_with_old_pins: str | None = None
    conclusion: str | None = None
    index_url: str | None = None
    fresh_builds: int | None = None
    packages: list[dict[str, Any]] = Field(default_factory=list)
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


class KnobsDoc(SectionDoc):
    """``knobs``: which config knob flips the symptom (isolate/knobs.py)."""

    knobs: list[dict[str, Any]] = Field(default_factory=list)
    tables: list[dict[str, Any]] = Field(default_factory=list)
    settled_on: dict[str, str] | None = None
    fresh_builds: int | None = None
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


ISOLATE = StudySection("isolate", IsolateDoc, isolate_lines)
DEPS = StudySection("deps", DepsDoc, deps_lines)
KNOBS = StudySection("knobs", KnobsDoc, knobs_lines)
