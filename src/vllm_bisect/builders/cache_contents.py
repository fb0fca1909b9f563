"""Everything a cache directory holds, for ``vllm-bisect cache ls`` and ``cache prune``
(issue 42: they saw only the artifact index, while most of a source bisect's disk is
elsewhere).

Under ``<cache>``: ``artifacts/`` (the index: wheels, wheel venvs, images by reference),
``venvs/<build key>/<commit>`` (the source builder's venvs), ``worktrees/<repo>/<commit>``
(a detached git worktree per commit, the source and command builders' checkouts),
``precompiled/<key>/`` (slim copies of a local wheel), ``uv-cache/`` (uv's download cache)
and ``results.sqlite`` (the measurements: listed, never pruned, since a measurement costs a
server start to make again). Pruning removes least-recently-used holdings until the whole
fits; a worktree goes with ``git worktree prune`` in its repository, and a holding another
run is making or using (its lock held, or a build still under way) is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.builders.cache import ArtifactCache, CacheEntry, dir_size
from vllm_bisect.builders.source import DONE_MARK  # a venv made to the end

logger = logging.getLogger(__name__)

BUILDING_S = 3600.0                   # an unfinished venv touched this recently is being made


@dataclass(frozen=True)
class Holding:
    """One thing the cache holds."""

    kind: str            # venv, wheel, image (indexed), source venv, worktree, ...
    commit: str | None
    size: int
    last_used: float
    location: str
    prunable: bool = True
    entry: CacheEntry | None = None   # an indexed artifact's record


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _per_commit(root: Path, kind: str, mark: str | None) -> Iterator[Holding]:
    """``root/<group>/<commit>`` directories (source venvs, worktrees)."""
    if not root.is_dir():
        return
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        for d in sorted(p for p in group.iterdir() if p.is_dir()):
            used = _mtime(d / mark) if mark and (d / mark).exists() else _mtime(d)
            yield Holding(kind, d.name, dir_size(d), used, str(d))


def holdings(cache: ArtifactCache) -> list[Holding]:
    """Everything under the cache directory, least recently used first."""
    root = cache.root
    out = [Holding(e.kind, e.commit, e.size, e.last_used, e.location, entry=e)
           for e in cache.entries()]
    out += _per_commit(root / "venvs", "source venv", DONE_MARK)
    out += _per_commit(root / "worktrees", "worktree", None)
    pre = root / "precompiled"
    if pre.is_dir():
        out += [Holding("precompiled wheel", None, dir_size(d), _mtime(d), str(d))
                for d in sorted(pre.iterdir()) if d.is_dir()]
    uv = root / "uv-cache"
    if uv.is_dir():
        out.append(Holding("uv cache", None, dir_size(uv), _mtime(uv), str(uv)))
    results = root / "results.sqlite"
    if results.exists():
        size = sum(f.stat().st_size for f in root.glob("results.sqlite*") if f.is_file())
        out.append(Holding("measurements", None, size, _mtime(results), str(results),
                           prunable=False))
    return sorted(out, key=lambda h: h.last_used)


def prune_all(cache: ArtifactCache, max_bytes: int, keep: Iterable[str] = (),
              remove_image: Callable[[str], None] | None = None) -> list[Holding]:
    """Evict least-recently-used holdings until the cache's whole size is at most
    ``max_bytes``; never a commit in ``keep`` nor the measurements. Returns what went."""
    protected = set(keep)
    found = holdings(cache)
    total = sum(h.size for h in found)
    evicted = []
    for h in found:
        if total <= max_bytes:
            break
        if not h.prunable or (h.commit is not None and h.commit in protected):
            continue
        if _evict(cache, h, remove_image):
            total -= h.size
            evicted.append(h)
    return evicted


def _evict(cache: ArtifactCache, h: Holding,
           remove_image: Callable[[str], None] | None) -> bool:
    if h.entry is not None:
        return cache.evict(h.entry, remove_image)
    path = Path(h.location)
    if not path.resolve().is_relative_to(cache.root.resolve()):
        return False
    if h.kind == "source venv" and not (path / DONE_MARK).exists() \
            and time.time() - h.last_used < BUILDING_S:
        return False   # being built (or just failed): its run owns it
    if h.kind == "worktree":
        return _remove_worktree(path)
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _remove_worktree(path: Path) -> bool:
    """Remove a cached worktree under its repository's checkout lock (``Checkouts``), then
    let its repository forget it."""
    gitfile = path / ".git"
    common: Path | None = None
    with contextlib.suppress(OSError, ValueError):
        text = gitfile.read_text().strip()
        if text.startswith("gitdir:"):
            common = Path(text.removeprefix("gitdir:").strip()).parent.parent
    with open(path.parent / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False   # a run is adding or removing worktrees of this repository
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if common is not None and common.is_dir():
        subprocess.run(["git", "--git-dir", str(common), "worktree", "prune"],
                       capture_output=True, check=False, timeout=60)
    return not path.exists()
