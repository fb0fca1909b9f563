"""Which studies are worth offering for a culprit (``isolate``: it changes only Python, in
more than one file; ``deps``: it changes a dependency pin), worked out once from the
repository when the bisect's result is written, and kept in result.json as
``next_questions`` (study -> the line to show). The report renders them as data and drops
the offer of a study that has run; it never opens the repository itself."""

from __future__ import annotations

from typing import Any

import git

from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.precompiled import is_compiled
from vllm_bisect.errors import BisectError
from vllm_bisect.isolate.pins import is_pin_file, pin_changes
from vllm_bisect.spec.build import ArtifactKind

# the kinds isolate can build a variant of the culprit with
BUILDS_FROM_SOURCE = (ArtifactKind.SOURCE, ArtifactKind.COMMAND, ArtifactKind.WHEEL)

ISOLATE_LINE = ("Which of its {n} files? The culprit changes only Python: `vllm-bisect isolate "
                "SESSION` finds the smallest set of files and hunks that reproduces the symptom.")
DEPS_LINE = ("The culprit changes dependency pins: `vllm-bisect deps SESSION` tells a "
             "dependency from vLLM code and bisects the package's versions.")


def next_questions(first_bad: str | None, repo_path: str, build: ArtifactKind
                   ) -> dict[str, str]:
    """study -> the offer's line, for the culprit ``first_bad`` of the repository at
    ``repo_path`` built as ``build`` (the spec's ``range.repo`` and ``build.kind``)."""
    if not first_bad:
        return {}
    try:
        repo = open_repo(repo_path)
        commit = repo.commit(first_bad)
        paths = repo.git.diff("--no-renames", "--name-only", commit.parents[0].hexsha,
                              first_bad).split()
    except (BisectError, git.GitError, ValueError, IndexError, OSError):
        return {}  # the offer is a courtesy: no repository (or no such commit), no offer
    out: dict[str, str] = {}
    if build in BUILDS_FROM_SOURCE and not any(is_compiled(p) for p in paths) \
            and len(paths) > 1:
        out["isolate"] = ISOLATE_LINE.format(n=len(paths))
    if _pins_change(commit, [p for p in paths if is_pin_file(p)]):
        out["deps"] = DEPS_LINE
    return out


def _pins_change(commit: Any, files: list[str]) -> bool:
    """Whether ``commit`` changes a pin in ``files`` (not only, say, the version string)."""

    def texts(c: Any) -> dict[str, str]:
        out = {}
        for path in files:
            try:
                out[path] = c.tree[path].data_stream.read().decode("utf-8", "replace")
            except KeyError:
                continue
        return out

    return bool(files) and bool(pin_changes(texts(commit.parents[0]), texts(commit)))
