"""A local precompiled wheel for ``source`` builds: made cheap to reuse, and its version.

vLLM's setup.py (``VLLM_USE_PRECOMPILED=1`` with ``VLLM_PRECOMPILED_WHEEL_LOCATION=<file>``)
opens the wheel and copies its compiled members into the checkout on every build. The
release wheel is deflate-compressed (250 MB for 0.25.1, ~550 MB unpacked), so every commit
would pay the decompression again. :func:`slim_wheel` makes, once per wheel, a copy that holds
only what setup.py extracts (shared objects, the Rust frontend binary, the vendored
flash-attention / third_party trees) stored without compression; each build then copies bytes.

A generated history has no release tags, so setuptools-scm would call every commit
``0.1.devN``: :func:`pretend_version` gives it the wheel's release plus the commit
(``0.25.1.dev7+g1a2b3c4d5``), handed to setup.py through ``SETUPTOOLS_SCM_PRETEND_VERSION``.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import git

from vllm_bisect.errors import ArtifactUnavailable

logger = logging.getLogger(__name__)

# what vLLM's setup.py takes from a precompiled wheel (its extract_precompiled_and_patch_package)
COMPILED_MEMBER = re.compile(
    r"^vllm/(?:[^/]+\.so|vllm-rs|vllm_flash_attn/.+|third_party/.+)$")
WHEEL_VERSION = re.compile(r"^vllm-(?P<version>[^-]+)-")
# vLLM's setup.py calls setuptools_scm.get_version() without a dist name, so the
# per-project SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM is not read: only the generic name is
PRETEND_ENV = "SETUPTOOLS_SCM_PRETEND_VERSION"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def slim_wheel(wheel: Path, cache_dir: Path) -> Path:
    """The compiled members of ``wheel``, stored uncompressed, made once under cache_dir."""
    if not wheel.is_file():
        raise ArtifactUnavailable(f"the precompiled wheel {wheel} does not exist",
                                  hint="set build.wheel_location to a local vLLM wheel file")
    stat = wheel.stat()
    key = hashlib.sha256(f"{wheel.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    folder = cache_dir / "precompiled" / key.hexdigest()[:16]
    out = folder / wheel.name
    if out.is_file():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    # one writer makes it, the others wait and reuse it (bisects sharing a cache otherwise
    # each make the copy at once and slow each other's first build: docs/design-notes.md).
    # A flock: the kernel drops it if the writer dies (kill -9).
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if out.is_file():  # made while this one waited
                return out
            _make(wheel, folder, out)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def _make(wheel: Path, folder: Path, out: Path) -> None:
    # a temporary file, replaced atomically: a reader never sees a half-written copy (and a
    # writer killed half-way leaves only a .part file)
    fd, name = tempfile.mkstemp(prefix=wheel.name + ".", suffix=".part", dir=folder)
    os.close(fd)
    tmp = Path(name)
    kept = 0
    try:
        kept = _copy_compiled(wheel, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    (folder / "source.txt").write_text(f"{wheel}\nsha256={_digest(wheel)}\nmembers={kept}\n")
    logger.info("slim precompiled wheel %s: %d members", out, kept)


def _copy_compiled(wheel: Path, tmp: Path) -> int:
    kept = 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.is_dir() or not (COMPILED_MEMBER.match(info.filename)
                                     or ".dist-info/" in info.filename):
                continue
            copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            copy.external_attr = info.external_attr
            copy.compress_type = zipfile.ZIP_STORED
            with src.open(info) as i, dst.open(copy, "w") as o:
                shutil.copyfileobj(i, o, 1 << 20)
            kept += 1
    return kept


def wheel_release(wheel_location: str) -> str | None:
    """The release of a wheel file name (``vllm-0.25.1-cp38-...whl`` -> ``0.25.1``)."""
    m = WHEEL_VERSION.match(wheel_location.rsplit("/", 1)[-1])
    if m is None:
        return None
    return m["version"].split("+", 1)[0]


def pretend_version(repo: git.Repo, commit: str, release: str | None) -> str | None:
    """A version for a commit of a repository without tags (None when it has tags: then
    setuptools-scm's own version is right)."""
    if release is None or repo.tags:
        return None
    count = int(repo.git.rev_list("--count", "--first-parent", commit)) - 1
    base = release.split(".dev", 1)[0]
    return f"{base}.dev{count}+g{commit[:9]}" if count else base
