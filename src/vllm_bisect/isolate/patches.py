"""A culprit's diff as files and hunks, and scratch commits holding any subset of it.

``diff_changes(repo, parent, culprit)`` lists the changed files (renames as delete + add)
with their line-level hunks (difflib opcodes over lines kept with their endings, so applying
every hunk reproduces the culprit's file byte for byte). ``Scratch.commit(base, selection)``
writes a commit whose tree is the parent's with the selected hunks applied (content from the
culprit for whole files) and whose parent is ``base`` (the culprit's parent to apply a
subset, the culprit itself to revert one). The commit is deterministic (fixed author, date and
message), so its sha identifies (base, subset): the measurement cache keyed by commit caches
subsets for free. Each scratch commit is kept alive by a ref under ``refs/vllm-bisect/``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import git

from vllm_bisect.builders.precompiled import is_compiled
from vllm_bisect.errors import FatalError

REF_PREFIX = "refs/vllm-bisect/isolate/"
BOT = "vllm-bisect <isolate@vllm-bisect.invalid>"

GIT_S = 300.0  # one git plumbing command (a blob, a tree, a commit object)


@dataclass(frozen=True)
class Hunk:
    path: str
    index: int          # within its file
    old: tuple[int, int]  # [start, end) line range in the parent's file
    new: tuple[int, int]  # [start, end) in the culprit's file
    preview: str        # the first changed line

    @property
    def label(self) -> str:
        (a, b), (c, d) = self.old, self.new
        return f"{self.path} @@ -{a + 1},{b - a} +{c + 1},{d - c} @@ {self.preview}".rstrip()


@dataclass(frozen=True)
class FileChange:
    path: str
    before: bytes | None  # None: added by the culprit
    after: bytes | None   # None: deleted by the culprit
    mode: str             # the culprit's mode (the parent's when deleted)
    hunks: tuple[Hunk, ...]  # empty: changed as a whole (binary, added, deleted)

    @property
    def status(self) -> str:
        return "A" if self.before is None else "D" if self.after is None else "M"


# a selection: path -> None (the whole file as in the culprit) or the hunk indices applied
Selection = Mapping[str, frozenset[int] | None]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _opcodes(before: bytes, after: bytes) -> list[tuple[int, int, int, int]]:
    sm = difflib.SequenceMatcher(None, _lines(before), _lines(after), autojunk=False)
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]


def _text(data: bytes | None) -> bool:
    return data is not None and b"\0" not in data[:8192]


def _blob(repo: git.Repo, commit: str, path: str) -> tuple[bytes | None, str]:
    try:
        out = repo.git.ls_tree(commit, "--", path)
    except git.GitCommandError:
        return None, "100644"
    if not out:
        return None, "100644"
    mode, _type, sha = out.split("\t", 1)[0].split()
    try:
        data = subprocess.run(["git", "cat-file", "blob", sha], cwd=repo.working_dir,
                              capture_output=True, check=True, timeout=GIT_S).stdout
    except subprocess.TimeoutExpired:
        raise FatalError(f"git cat-file of {path} did not finish within {GIT_S:.0f} s",
                         hint="is the repository on a hung disk?") from None
    return data, mode


def diff_changes(repo: git.Repo, parent: str, culprit: str) -> list[FileChange]:
    names = repo.git.diff("--no-renames", "--name-only", "-z", parent, culprit).split("\0")
    out = []
    for path in sorted(p for p in names if p):
        before, mode_b = _blob(repo, parent, path)
        after, mode_a = _blob(repo, culprit, path)
        hunks: tuple[Hunk, ...] = ()
        if _text(before) and _text(after) and mode_a == mode_b:
            assert before is not None and after is not None
            new_lines = _lines(after) or [b""]
            old_lines = _lines(before) or [b""]
            hunks = tuple(
                Hunk(path, k, (i1, i2), (j1, j2), _preview(new_lines[j1:j2] or old_lines[i1:i2]))
                for k, (i1, i2, j1, j2) in enumerate(_opcodes(before, after)))
        out.append(FileChange(path, before, after, mode_a if after is not None else mode_b,
                              hunks))
    return out


def _preview(lines: list[bytes]) -> str:
    for raw in lines:
        s = raw.decode("utf-8", "replace").strip()
        if s:
            return s[:60]
    return ""


def apply_hunks(before: bytes, after: bytes, chosen: Iterable[int]) -> bytes:
    """The parent's file with the chosen hunks (opcode indices) of parent -> culprit applied."""
    pick = set(chosen)
    a, b = _lines(before), _lines(after)
    out: list[bytes] = []
    pos = 0
    for k, (i1, i2, j1, j2) in enumerate(_opcodes(before, after)):
        out += a[pos:i1]
        out += b[j1:j2] if k in pick else a[i1:i2]
        pos = i2
    out += a[pos:]
    return b"".join(out)


def content(change: FileChange, chosen: frozenset[int] | None) -> bytes | None:
    """The file's content with ``chosen`` hunks applied (None: the whole culprit version)."""
    if chosen is None or not change.hunks:
        return change.after
    if change.before is None or change.after is None:
        return change.after
    if chosen == frozenset(range(len(change.hunks))):
        return change.after
    return apply_hunks(change.before, change.after, chosen)


def invert(changes: list[FileChange], selection: Selection) -> dict[str, frozenset[int] | None]:
    """Every change of the culprit except ``selection``: the culprit with it reverted."""
    out: dict[str, frozenset[int] | None] = {}
    for c in changes:
        sel = selection.get(c.path, frozenset())
        if sel is None:
            continue
        every = frozenset(range(len(c.hunks)))
        if not c.hunks and not sel:
            out[c.path] = None
        elif c.hunks and sel != every:
            out[c.path] = every - sel
    return out


def python_only(changes: list[FileChange]) -> bool:
    """No compiled source (csrc/, cmake/, CMakeLists.txt, setup.py) in the diff."""
    return not any(is_compiled(c.path) for c in changes)


def describe(selection: Selection) -> str:
    parts = []
    for path in sorted(selection):
        hunks = selection[path]
        parts.append(path if hunks is None else f"{path}#{','.join(map(str, sorted(hunks)))}")
    return "; ".join(parts) or "(nothing)"


class Scratch:
    """Writes scratch commits into ``repo`` (objects and a ref; the work tree is untouched)."""

    def __init__(self, repo: git.Repo, parent: str, changes: list[FileChange]) -> None:
        self.repo = repo
        self.parent = parent
        self.changes = {c.path: c for c in changes}
        self._made: dict[tuple[str, str], str] = {}

    def _git(self, *args: str, env: dict[str, str] | None = None, data: bytes | None = None
             ) -> str:
        try:
            return subprocess.run(["git", *args], cwd=self.repo.working_dir, input=data,
                                  env={**os.environ, **(env or {})}, capture_output=True,
                                  check=True, timeout=GIT_S).stdout.decode().strip()
        except subprocess.CalledProcessError as err:
            raise FatalError(f"git {args[0]} failed writing a scratch commit: "
                             f"{err.stderr.decode(errors='replace').strip()}",
                             hint="is the repository writable?") from None
        except subprocess.TimeoutExpired:
            raise FatalError(f"git {args[0]} did not finish within {GIT_S:.0f} s writing a "
                             "scratch commit", hint="is the repository on a hung disk?") from None

    def commit(self, base: str, selection: Selection, message: str,
               files: Mapping[str, bytes | None] | None = None) -> str:
        """A commit on ``base`` whose tree is the parent's plus ``selection``, then ``files``
        (path -> content, None: deleted) written over it."""
        extra = dict(files or {})
        digest = hashlib.sha256(repr(sorted(extra.items())).encode()).hexdigest()[:16]
        key = (base, describe(selection) + digest)
        if key in self._made:
            return self._made[key]
        with tempfile.TemporaryDirectory(prefix="vllm-bisect-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self._git("read-tree", self.parent, env=env)
            lines = []
            blobs = {p: (content(self.changes[p], c), self.changes[p].mode)
                     for p, c in selection.items()}
            for path, data in extra.items():
                old = self.changes.get(path)
                blobs[path] = (data, old.mode if old is not None else "100644")
            for path, (data, mode) in sorted(blobs.items()):
                if data is None:
                    lines.append(f"0 {'0' * 40}\t{path}")
                else:
                    sha = self._git("hash-object", "-w", "--stdin", data=data)
                    lines.append(f"{mode} {sha}\t{path}")
            if lines:
                self._git("update-index", "--index-info", env=env,
                          data=("\n".join(lines) + "\n").encode())
            tree = self._git("write-tree", env=env)
        stamp = "2000-01-01T00:00:00+00:00"
        name, _, email = BOT.partition(" <")
        ident = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"),
                 "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email.rstrip(">"),
                 "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        sha = self._git("commit-tree", tree, "-p", base, "-m", message, env=ident)
        self._git("update-ref", REF_PREFIX + sha, sha)
        self._made[key] = sha
        return sha
