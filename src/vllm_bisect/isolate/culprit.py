"""Which part of the culprit: ddmin over its changed files, then over those files' hunks,
each subset applied on the culprit's parent, built, served and judged; then the minimal set
reverted on the culprit. Subsets that do not build, import or serve are UNRESOLVED (skips)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import git

from vllm_bisect.errors import FatalError
from vllm_bisect.isolate.adapter import StudyBench, StudyTrial
from vllm_bisect.isolate.ddmin import Result, Subset, minimize
from vllm_bisect.isolate.patches import (
    FileChange,
    Scratch,
    Selection,
    describe,
    diff_changes,
    invert,
    python_only,
)
from vllm_bisect.models import Verdict
from vllm_bisect.spec import BisectSpec

logger = logging.getLogger(__name__)
STUDY = "isolate"
RESULT_OF = {Verdict.BAD: Result.FAIL, Verdict.GOOD: Result.PASS, Verdict.SKIP: Result.UNRESOLVED}


@dataclass
class IsolateResult:
    culprit: str
    parent: str
    files: list[str]
    python_only: bool
    minimal_files: list[str] = field(default_factory=list)
    file_tests: int = 0
    hunks: list[str] = field(default_factory=list)          # labels of the minimal files' hunks
    minimal_hunks: list[str] = field(default_factory=list)
    hunk_tests: int = 0
    revert_verdict: str | None = None   # the culprit with exactly the minimal set reverted
    revert_reason: str = ""
    trials: list[dict[str, Any]] = field(default_factory=list)
    fresh_builds: int = 0

    @property
    def revert_removes(self) -> bool | None:
        if self.revert_verdict in (None, Verdict.SKIP.value):
            return None
        return self.revert_verdict == Verdict.GOOD.value

    def to_dict(self) -> dict[str, Any]:
        return {"culprit": self.culprit, "parent": self.parent, "files": self.files,
                "python_only": self.python_only, "minimal_files": self.minimal_files,
                "file_tests": self.file_tests, "hunks": self.hunks,
                "minimal_hunks": self.minimal_hunks, "hunk_tests": self.hunk_tests,
                "tests": self.file_tests + self.hunk_tests + (1 if self.revert_verdict else 0),
                "revert_verdict": self.revert_verdict, "revert_reason": self.revert_reason,
                "revert_removes": self.revert_removes, "fresh_builds": self.fresh_builds,
                "trials": self.trials}


def _short(what: str, names: list[str]) -> str:
    """A subset's label: every name when there are few, else the count and the ends."""
    if len(names) <= 2:
        return f"{what} " + "; ".join(names)
    return f"{len(names)} {what}: {names[0]} ... {names[-1]}"


class Isolation:
    def __init__(self, bench: StudyBench, spec: BisectSpec, repo: git.Repo, culprit: str,
                 parent: str) -> None:
        self.bench, self.spec = bench, spec
        self.culprit, self.parent = culprit, parent
        self.changes = diff_changes(repo, parent, culprit)
        if not self.changes:
            raise FatalError(f"{culprit[:12]} changes no files: nothing to isolate",
                             hint="is it an empty or a merge commit? pass --culprit REF")
        self.scratch = Scratch(repo, parent, self.changes)
        self.result = IsolateResult(culprit, parent, [c.path for c in self.changes],
                                    python_only(self.changes))

    def _judge(self, base: str, selection: Selection, label: str) -> StudyTrial:
        sha = self.scratch.commit(base, selection, f"vllm-bisect isolate: {label}\n\n"
                                  f"{describe(selection)}\n")
        t = self.bench.trial(self.spec, sha, study=STUDY, label=label, retries=0)
        self.result.trials.append({"label": label, "commit": sha, "verdict": t.verdict.value,
                                   "reason": t.reason, "fresh": t.fresh})
        return t

    def run(self, hunks: bool = True, revert: bool = True) -> IsolateResult:
        fresh0 = self.bench.fresh
        files = self.changes
        # ddmin's tests: about 2 log2(n) on one guilty file, the hunks', the revert
        self.bench.settle(self.spec, self.parent, self.culprit,
                          4 * max(1, len(files).bit_length()) + 4)

        def test_files(s: Subset) -> Result:
            sel: dict[str, frozenset[int] | None] = {files[i].path: None for i in s}
            return RESULT_OF[self._judge(self.parent, sel,
                                         _short("files", [files[i].path for i in s])).verdict]

        found = minimize(len(files), test_files)
        self.result.file_tests = found.tests
        chosen = [files[i] for i in found.minimal]
        self.result.minimal_files = [c.path for c in chosen]
        selection: dict[str, frozenset[int] | None] = {c.path: None for c in chosen}
        if hunks:
            selection = self._hunks(chosen)
        if revert:
            t = self._judge(self.culprit, invert(self.changes, selection),
                            f"culprit with {describe(selection)} reverted")
            self.result.revert_verdict, self.result.revert_reason = t.verdict.value, t.reason
        self.result.fresh_builds = self.bench.fresh - fresh0
        return self.result

    def _hunks(self, chosen: list[FileChange]) -> dict[str, frozenset[int] | None]:
        items: list[tuple[FileChange, int | None]] = []
        for c in chosen:
            items += [(c, h.index) for h in c.hunks] if c.hunks else [(c, None)]
        labels = [c.hunks[k].label if k is not None else f"{c.path} (whole file, {c.status})"
                  for c, k in items]
        self.result.hunks = labels

        def sel_of(s: Subset) -> dict[str, frozenset[int] | None]:
            sel: dict[str, frozenset[int] | None] = {}
            for i in s:
                c, k = items[i]
                if k is None:
                    sel[c.path] = None
                else:
                    prev = sel.get(c.path) or frozenset()
                    sel[c.path] = prev | {k}
            return sel

        if len(items) == len(chosen):  # one item per file: the files are the answer
            self.result.minimal_hunks = labels
            return sel_of(tuple(range(len(items))))

        def test_hunks(s: Subset) -> Result:
            label = _short("hunks", [labels[i] for i in s])
            return RESULT_OF[self._judge(self.parent, sel_of(s), label).verdict]

        found = minimize(len(items), test_hunks)
        self.result.hunk_tests = found.tests
        self.result.minimal_hunks = [labels[i] for i in found.minimal]
        return sel_of(found.minimal)
