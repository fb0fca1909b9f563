"""Cached, detached git worktrees: one per commit, reused across runs."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import git

from vllm_bisect.errors import ArtifactUnavailable
from vllm_bisect.gitrepo import open_bounded

logger = logging.getLogger(__name__)


class Checkouts:
    def __init__(self, repo: git.Repo, cache_dir: Path) -> None:
        self.repo = repo
        tag = hashlib.sha256(str(Path(repo.working_dir).resolve()).encode()).hexdigest()[:12]
        # absolute: `git worktree add` runs in the repository, not in the caller's cwd
        self.root = cache_dir.absolute() / "worktrees" / tag

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One process at a time adds or removes worktrees of this repository."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get(self, commit: str) -> Path:
        with self._locked():
            return self._get(commit)

    def _get(self, commit: str) -> Path:
        path = self.root / commit
        if (path / ".git").exists():
            try:
                if open_bounded(path).head.commit.hexsha == commit:
                    os.utime(path)   # its last use (`cache ls` / `cache prune` read it)
                    return path
            except (git.GitError, ValueError):
                pass
            self._remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.repo.git.worktree("prune")
            self.repo.git.worktree("add", "--detach", "--force", str(path), commit)
        except git.GitCommandError as err:
            raise ArtifactUnavailable(f"cannot check out {commit[:12]}: {err.stderr.strip()}",
                                      hint="is the repository intact? try `git fsck`") from None
        return path

    def _remove(self, path: Path) -> None:
        try:
            self.repo.git.worktree("remove", "--force", str(path))
        except git.GitCommandError:
            shutil.rmtree(path, ignore_errors=True)
            self.repo.git.worktree("prune")
