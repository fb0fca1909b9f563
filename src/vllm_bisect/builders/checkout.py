"""Cached, detached git worktrees: one per commit, reused across runs."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import git

from vllm_bisect.errors import ArtifactUnavailable

logger = logging.getLogger(__name__)


class Checkouts:
    def __init__(self, repo: git.Repo, cache_dir: Path) -> None:
        self.repo = repo
        tag = hashlib.sha256(str(Path(repo.working_dir).resolve()).encode()).hexdigest()[:12]
        self.root = cache_dir / "worktrees" / tag

    def get(self, commit: str) -> Path:
        path = self.root / commit
        if (path / ".git").exists():
            try:
                if git.Repo(path).head.commit.hexsha == commit:
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
