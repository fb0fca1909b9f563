"""Resolve refs and list the commits of a range with GitPython."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from vllm_bisect.bisect.release import candidates, main_branch, map_ref
from vllm_bisect.errors import RangeError, printable
from vllm_bisect.gitrepo import open_bounded


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str
    date: str


@dataclass(frozen=True)
class CommitRange:
    good: CommitInfo
    bad: CommitInfo
    commits: tuple[CommitInfo, ...]  # (good, bad], oldest first; commits[-1] is bad
    notes: tuple[str, ...] = ()  # e.g. a release tag mapped to its branch point on main

    def index(self, sha: str) -> int:
        for i, c in enumerate(self.commits):
            if c.sha == sha:
                return i
        if sha == self.good.sha:
            return -1
        raise KeyError(sha)

    def sha(self, index: int) -> str:
        return self.good.sha if index == -1 else self.commits[index].sha

    def after(self, sha: str) -> CommitRange | None:
        """sha..bad, what is left after a culprit (None when it is the bad end)."""
        i = self.index(sha)
        if i >= len(self.commits) - 1:
            return None
        return CommitRange(good=self.commits[i], bad=self.bad, commits=self.commits[i + 1:])

    def before(self, sha: str) -> CommitRange | None:
        """good..sha's parent (None when the parent is the good end)."""
        i = self.index(sha)
        if i <= 0:
            return None
        return CommitRange(good=self.good, bad=self.commits[i - 1], commits=self.commits[:i])


def open_repo(path: str | Path) -> git.Repo:
    try:
        return open_bounded(path, search_parent_directories=True)
    except git.NoSuchPathError:
        raise RangeError(f"repository path does not exist: {path}",
                         hint="set range.repo (or --repo) to a git checkout of vLLM") from None
    except git.InvalidGitRepositoryError:
        raise RangeError(f"not a git repository: {path}",
                         hint="set range.repo (or --repo) to a git checkout of vLLM") from None


def info(c: git.Commit) -> CommitInfo:
    # (a subject is shown on terminals and in reports: no control sequences)
    subject = printable(str(c.message).strip().splitlines()[0]) if c.message else ""
    return CommitInfo(sha=c.hexsha, subject=subject, author=str(c.author.name),
                      date=c.committed_datetime.isoformat())


def resolve_ref(repo: git.Repo, ref: str, what: str) -> git.Commit:
    for candidate in candidates(ref):  # 0.10.2 names the tag v0.10.2
        try:
            return repo.commit(candidate)
        except (git.BadName, ValueError, git.GitCommandError, IndexError, KeyError):
            continue  # (GitPython's own parser: IndexError for '@{-1}' with no reflog)
    try:  # git's own parser, for what GitPython's does not know ('@{-1}', 'main@{1}')
        return repo.commit(repo.git.rev_parse("--verify", "--quiet", "--end-of-options",
                                              f"{ref}^{{commit}}").strip())
    except (git.BadName, ValueError, git.GitCommandError, IndexError, KeyError):
        pass
    raise RangeError(f"unknown {what} ref: {ref!r}",
                     hint="use a commit sha, tag or branch that exists in the repository "
                          "(try `git fetch` if it is a newer commit)")


def commit_range(repo: git.Repo, good_ref: str | None, bad_ref: str | None,
                 first_parent: bool = True) -> CommitRange:
    if not good_ref or not bad_ref:
        missing = "good" if not good_ref else "bad"
        raise RangeError(f"no {missing} ref given", hint=f"pass --{missing} or set range.{missing}")
    good, bad = resolve_ref(repo, good_ref, "good"), resolve_ref(repo, bad_ref, "bad")
    main = main_branch(repo)
    notes: list[str] = []
    for what, ref, c in (("good", good_ref, good), ("bad", bad_ref, bad)):
        mapped = map_ref(repo, ref, c, main)
        if mapped.note:
            notes.append(mapped.note + "".join(f"\n    {p}" for p in mapped.cherry_picks[:20]))
        if mapped.sha != c.hexsha:
            if what == "good":
                good = repo.commit(mapped.sha)
            else:
                bad = repo.commit(mapped.sha)
    if good == bad:
        raise RangeError(f"good and bad are the same commit ({good.hexsha[:12]})",
                         hint="pass a good commit older than the bad one")
    if not repo.is_ancestor(good, bad):
        hint = ("they look swapped: pass the older commit as good" if repo.is_ancestor(bad, good)
                else "pick a good commit on the bad commit's history (e.g. its merge base)")
        raise RangeError(f"good {good.hexsha[:12]} is not an ancestor of bad {bad.hexsha[:12]}",
                         hint=hint)
    args = ["--first-parent"] if first_parent else []
    shas = repo.git.rev_list(*args, "--reverse", f"{good.hexsha}..{bad.hexsha}").split()
    if first_parent and bad.hexsha not in shas:
        raise RangeError("bad is not reachable from good along first parents",
                         hint="set range.first_parent = false")
    by_sha = {c.hexsha: c for c in repo.iter_commits(f"{good.hexsha}..{bad.hexsha}",
                                                     first_parent=first_parent)}
    commits = tuple(info(by_sha[s]) for s in shas)
    return CommitRange(good=info(good), bad=info(bad), commits=commits, notes=tuple(notes))
