"""Release tags live on release branches: map them to their branch point on main.

vLLM tags a release (v0.12.0) on ``releases/v0.12.0``, a branch cut from main plus
cherry-picks, so the tagged commit is not on main and has no per-commit wheel. A bisect
over main therefore starts from the tag's branch point (``git merge-base <tag> main``); the
cherry-picks the release carries and its branch point lacks are listed, since a symptom that
came or went with one of them is not on main's history at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import git

MAIN_CANDIDATES = ("main", "origin/main", "upstream/main", "master", "origin/master")
RELEASE_VERSION = re.compile(r"^v?\d+\.\d+(?:\.\d+){0,2}(?:(?:a|b|rc)\d+)?(?:\.post\d+)?$")


@dataclass(frozen=True)
class MappedRef:
    ref: str                   # as given
    sha: str                   # what the bisect uses
    tag_sha: str | None = None  # the release commit, when the ref was mapped off a branch
    note: str | None = None
    cherry_picks: tuple[str, ...] = ()  # "<sha12> <subject>" on the release, not at the branch point


def main_branch(repo: git.Repo) -> str | None:
    for name in MAIN_CANDIDATES:
        try:
            repo.commit(name)
            return name
        except (git.BadName, ValueError, git.GitCommandError):
            continue
    return None


def candidates(ref: str) -> list[str]:
    """A version as users write it (0.10.2, v0.10.2) and the tag it names."""
    if RELEASE_VERSION.match(ref) and not ref.startswith("v"):
        return [ref, f"v{ref}"]
    return [ref]


def is_tag(repo: git.Repo, ref: str) -> bool:
    names = {t.name for t in repo.tags}
    return any(c in names or c.removeprefix("refs/tags/") in names for c in candidates(ref))


def map_ref(repo: git.Repo, ref: str, commit: git.Commit, main: str | None) -> MappedRef:
    """``commit`` (resolved from the tag ``ref``) itself if it is on main, else its branch
    point. A ref that is not a tag (a sha, a branch) is used as it is."""
    if main is None or not is_tag(repo, ref):
        return MappedRef(ref, commit.hexsha)
    head = repo.commit(main)
    if repo.is_ancestor(commit, head):
        return MappedRef(ref, commit.hexsha)
    bases = repo.merge_base(commit, head)
    if not bases:
        return MappedRef(ref, commit.hexsha, note=f"{ref} shares no history with {main}")
    base = bases[0]
    picks = []
    for c in repo.iter_commits(f"{base.hexsha}..{commit.hexsha}", max_count=200):
        subject = str(c.message).strip().splitlines()[0] if c.message else ""
        picks.append(f"{c.hexsha[:12]} {subject}")
    note = (f"{ref} ({commit.hexsha[:12]}) is on a release branch, not on {main}: using its "
            f"branch point {base.hexsha[:12]} (git merge-base {ref} {main}); the release has "
            f"{len(picks)} commit(s) the branch point lacks")
    return MappedRef(ref, base.hexsha, commit.hexsha, note, tuple(reversed(picks)))
