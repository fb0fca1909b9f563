"""Decide how to build a commit from source: reuse a wheel's compiled parts, or compile.

``VLLM_USE_PRECOMPILED=1`` with ``VLLM_PRECOMPILED_WHEEL_COMMIT=<base>`` installs the Python
of commit C over the compiled extensions of base's wheel (seconds instead of an hour). That
is exact only when no compiled source changed between base and C, so base is the nearest
first-parent ancestor of C (C included) that has a wheel, and the diff base..C is checked
for compiled paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import git

COMPILED_PREFIXES = ("csrc/", "cmake/")
COMPILED_FILES = ("CMakeLists.txt", "setup.py")


class BuildMode(StrEnum):
    PRECOMPILED = "precompiled"
    FULL = "full"
    SKIP = "skip"


@dataclass(frozen=True)
class SourcePlan:
    mode: BuildMode
    base: str | None
    compiled_changes: tuple[str, ...]
    reason: str


def is_compiled(path: str) -> bool:
    return path.startswith(COMPILED_PREFIXES) or path in COMPILED_FILES


def compiled_changes(repo: git.Repo, base: str, commit: str) -> tuple[str, ...]:
    if base == commit:
        return ()
    names = repo.git.diff("--name-only", base, commit).split()
    return tuple(sorted(p for p in names if is_compiled(p)))


def nearest_wheel_commit(repo: git.Repo, commit: str, has_wheel: Callable[[str], bool],
                         max_back: int = 64) -> str | None:
    for c in repo.iter_commits(commit, first_parent=True, max_count=max_back):
        if has_wheel(c.hexsha):
            return c.hexsha
    return None


def plan_source_build(repo: git.Repo, commit: str, has_wheel: Callable[[str], bool],
                      full_build: bool, max_back: int = 64) -> SourcePlan:
    base = nearest_wheel_commit(repo, commit, has_wheel, max_back)
    if base is None:
        reason = f"no wheel within {max_back} first-parent commits of {commit[:12]}"
        return (SourcePlan(BuildMode.FULL, None, (), reason + ": full build") if full_build
                else SourcePlan(BuildMode.SKIP, None, (), reason + " and full_build = false"))
    changed = compiled_changes(repo, base, commit)
    if not changed:
        return SourcePlan(BuildMode.PRECOMPILED, base, (),
                          f"no compiled source changed since {base[:12]}: precompiled")
    shown = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
    if full_build:
        return SourcePlan(BuildMode.FULL, base, changed,
                          f"compiled sources changed since {base[:12]} ({shown}): full build")
    return SourcePlan(BuildMode.SKIP, base, changed,
                      f"compiled sources changed since {base[:12]} ({shown}) and full_build = false")
