"""Dependency or vLLM code? When the culprit changes pins: the parent built with the
culprit's pin files and the culprit with the parent's (swap tests); then, for a Python
package pinned exactly on both sides, a bisect over the versions the package index offers
between the two pins, on whichever side flips with the pin, to its first bad version (with
several packages bumped at once, first which one alone flips it).

The Dockerfile's base versions (``ARG CUDA_VERSION=``, ``FROM image:tag``, FlashInfer's git
ref, ...) are reported as dependency changes of their own, but they are not pip-installable:
they are neither swapped nor bisected (the study's builds do not use the Dockerfile)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import git
from packaging.version import Version

from vllm_bisect.bisect.search.steps import next_step
from vllm_bisect.isolate import pkgindex
from vllm_bisect.isolate.adapter import StudyBench, StudyTrial
from vllm_bisect.isolate.patches import FileChange, Scratch, diff_changes, invert
from vllm_bisect.isolate.pins import (
    Pin,
    PinChange,
    PinKind,
    is_dockerfile,
    is_pin_file,
    pin_changes,
    rewrite,
)
from vllm_bisect.models import Verdict
from vllm_bisect.spec import BisectSpec

logger = logging.getLogger(__name__)
STUDY = "deps"


class Conclusion:
    NO_PINS = "no dependency pins changed"
    BASE = "base versions"         # only the Dockerfile's base versions changed
    DEPENDENCY = "dependency"      # the new pins alone reproduce; the old pins alone cure
    CODE = "vllm code"             # the pins do not matter
    EITHER = "either"              # the new pins reproduce, and so does the code change
    BOTH = "both"                  # only the new pins and the code change together
    UNDETERMINED = "undetermined"  # a swap could not be tested (not installable)


@dataclass
class PackageBisect:
    name: str
    old: str
    new: str
    base: str = ""                 # "culprit" or "parent": where the pin was varied
    single_verdict: str | None = None  # only this package's pin flipped (several changed)
    tested: list[dict[str, str]] = field(default_factory=list)
    first_bad_version: str | None = None
    candidates: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DepsResult:
    culprit: str
    parent: str
    changes: list[str] = field(default_factory=list)        # pip-installable pins
    base_changes: list[str] = field(default_factory=list)   # the Dockerfile's base versions
    base_note: str = ""
    parent_with_new_pins: str | None = None
    culprit_with_old_pins: str | None = None
    conclusion: str = Conclusion.NO_PINS
    packages: list[PackageBisect] = field(default_factory=list)
    index_url: str | None = None
    fresh_builds: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "packages"}
        d["packages"] = [p.to_dict() for p in self.packages]
        return d


def exact(spec: str | None) -> Version | None:
    """The version of an exact ``==`` specifier (None for ranges, wildcards, no pin)."""
    return Pin("", "", spec).exact if spec else None


def conclude(parent_new: Verdict, culprit_old: Verdict) -> str:
    if Verdict.SKIP in (parent_new, culprit_old):
        return Conclusion.UNDETERMINED
    return {(Verdict.BAD, Verdict.GOOD): Conclusion.DEPENDENCY,
            (Verdict.GOOD, Verdict.BAD): Conclusion.CODE,
            (Verdict.BAD, Verdict.BAD): Conclusion.EITHER,
            (Verdict.GOOD, Verdict.GOOD): Conclusion.BOTH}[(parent_new, culprit_old)]


class DependencyStudy:
    def __init__(self, bench: StudyBench, spec: BisectSpec, repo: git.Repo, culprit: str,
                 parent: str, index_url: str | None) -> None:
        self.bench, self.spec = bench, spec
        self.culprit, self.parent = culprit, parent
        self.changes = diff_changes(repo, parent, culprit)
        self.scratch = Scratch(repo, parent, self.changes)
        self.index_url = (index_url
                          or pkgindex.index_from_args(getattr(spec.build, "install_args", []))
                          or pkgindex.PYPI)
        self.result = DepsResult(culprit, parent, index_url=self.index_url)
        self.pins: list[PinChange] = []

    def _trial(self, base: str, sel: dict[str, frozenset[int] | None], label: str,
               files: dict[str, bytes | None] | None = None) -> StudyTrial:
        sha = self.scratch.commit(base, sel, f"vllm-bisect deps: {label}\n", files)
        return self.bench.trial(self.spec, sha, study=STUDY, label=label, retries=0)

    def pin_files(self) -> list[FileChange]:
        return [c for c in self.changes if is_pin_file(c.path) or is_dockerfile(c.path)]

    def run(self) -> DepsResult:
        fresh0 = self.bench.fresh
        files = self.pin_files()
        text = {c.path: (c.before or b"").decode("utf-8", "replace") for c in files
                if c.before is not None}
        after = {c.path: (c.after or b"").decode("utf-8", "replace") for c in files
                 if c.after is not None}
        changed = pin_changes(text, after)
        base = [c for c in changed if c.kind is PinKind.DOCKER]
        self.pins = [c for c in changed if c.kind is PinKind.PYTHON]
        self.result.changes = [c.label for c in self.pins]
        self.result.base_changes = [c.label for c in base]
        if base:
            self.result.base_note = (
                "the Dockerfile's base versions are not pip-installable: they cannot be "
                "swapped or bisected by version here; the builds of this study "
                f'(build.kind = "{self.spec.build.kind}") do not use the Dockerfile, so the '
                "symptom they reproduce does not come from it (to test a base version, bisect "
                "per-commit images built with each base)")
            logger.info("base version changes (not bisectable): %s",
                        "; ".join(self.result.base_changes))
        if not self.pins:
            self.result.conclusion = Conclusion.BASE if base else Conclusion.NO_PINS
            return self.result
        pip_files = {c.file for c in self.pins}
        self.bench.settle(self.spec, self.parent, self.culprit, 4 + 3 * len(self.pins))
        pins_sel: dict[str, frozenset[int] | None] = {p: None for p in sorted(pip_files)}
        if pip_files == {c.path for c in self.changes}:  # only pins: the code is the parent's
            pn, co = Verdict.BAD, Verdict.GOOD
            self.result.parent_with_new_pins = "bad (the culprit itself: it changes only pins)"
            self.result.culprit_with_old_pins = "good (the parent itself)"
        else:
            t1 = self._trial(self.parent, pins_sel, "parent with the culprit's pins")
            t2 = self._trial(self.culprit, invert(self.changes, pins_sel),
                             "culprit with the parent's pins")
            pn, co = t1.verdict, t2.verdict
            self.result.parent_with_new_pins = f"{pn.value}: {t1.reason}"
            self.result.culprit_with_old_pins = f"{co.value}: {t2.reason}"
        self.result.conclusion = conclude(pn, co)
        if co is Verdict.GOOD:
            side = "culprit"
        elif pn is Verdict.BAD:
            side = "parent"
        else:
            self.result.fresh_builds = self.bench.fresh - fresh0
            return self.result
        names = sorted({c.name for c in self.pins})
        for name in names:
            self.result.packages.append(self._package(name, self._mine(name), side,
                                                      several=len(names) > 1))
        self.result.fresh_builds = self.bench.fresh - fresh0
        return self.result

    def _pinned(self, base: str, name: str, version: str, label: str) -> StudyTrial:
        """``base`` (the culprit or its parent) with every pin of ``name`` set to version."""
        sel: dict[str, frozenset[int] | None] = (invert(self.changes, {}) if base == "culprit"
                                                 else {})
        by_path = {c.path: c for c in self.changes}
        files: dict[str, bytes | None] = {}
        for path in {c.file for c in self._mine(name)}:
            ch = by_path.get(path)
            src = (ch.after if base == "culprit" else ch.before) if ch else None
            if src is not None:
                files[path] = rewrite(path, src.decode(), name, version).encode()
        return self._trial(self.culprit if base == "culprit" else self.parent, sel, label, files)

    def _mine(self, name: str) -> list[PinChange]:
        return [c for c in self.pins if c.name == name]

    def _package(self, name: str, mine: list[PinChange], base: str, several: bool
                 ) -> PackageBisect:
        olds = {v for c in mine if (v := exact(c.old)) is not None}
        news = {v for c in mine if (v := exact(c.new)) is not None}
        pb = PackageBisect(name, ",".join(sorted({c.old or "" for c in mine})),
                           ",".join(sorted({c.new or "" for c in mine})), base)
        if len(olds) != 1 or len(news) != 1:
            pb.note = "not pinned exactly (==) on both sides: versions not bisected"
            return pb
        old, new = olds.pop(), news.pop()
        if several:  # does this package alone flip it?
            flip_to = old if base == "culprit" else new
            t = self._pinned(base, name, str(flip_to), f"{base} with only {name}=={flip_to}")
            pb.single_verdict = t.verdict.value
            want = Verdict.GOOD if base == "culprit" else Verdict.BAD
            if t.verdict is not want:
                pb.note = f"{name} alone does not flip the symptom: versions not bisected"
                return pb
        cands = pkgindex.between(pkgindex.versions(self.index_url, name), old, new)
        if not cands or cands[-1] != new:
            cands = [*cands, new]
        verdicts: dict[int, Verdict] = {len(cands) - 1: Verdict.BAD}
        while True:
            step = next_step(len(cands), verdicts)
            if step.done:
                break
            assert step.test is not None
            ver = str(cands[step.test])
            t = self._pinned(base, name, ver, f"{base} with {name}=={ver}")
            verdicts[step.test] = t.verdict
            pb.tested.append({"version": ver, "verdict": t.verdict.value, "reason": t.reason})
        if step.culprit is not None:
            pb.first_bad_version = str(cands[step.culprit])
        pb.candidates = [str(cands[i]) for i in step.candidates]
        return pb
