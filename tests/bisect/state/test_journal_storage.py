"""A full disk is a full disk (issue 49, item 5): ENOSPC and EFBIG are named as such; a
database is moved aside only when its integrity check fails, never on a write error; the
journal is never discarded. Through ``vllm-bisect run`` and the hook under a real ``git
bisect`` (subprocesses): a real small tmpfs where this machine lets root mount one (CI runs
as root), and ``ulimit -f`` in a subprocess shell everywhere."""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.sim.history import History

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(fs: Path) -> Path:
    """Fill the filesystem to the last byte; the file to remove to free it."""
    filler = fs / "filler"
    subprocess.run(f"dd if=/dev/zero of={shlex.quote(str(filler))} bs=64k 2>/dev/null",
                   shell=True, check=False)
    return filler


def run(spec: Path, session: Path, cache: Path, limit: str = "unlimited"
        ) -> subprocess.CompletedProcess[str]:
    cmd = [*CLI, "run", "--spec", str(spec), "--session", str(session), "--cache-dir",
           str(cache), "--json"]
    return subprocess.run(["bash", "-c", f"ulimit -f {limit}; exec {shlex.join(cmd)}"],
                          capture_output=True, text=True, timeout=600)


def setup(tmp: Path) -> tuple[History, Path]:
    h = history(tmp, n_commits=3, cap_at=2)
    return h, write_spec(tmp / "spec.toml", make_spec(h, verdict={"verify_samples": 0}))


def assert_named(r: subprocess.CompletedProcess[str], *words: str) -> None:
    flat = " ".join(r.stderr.split())
    assert r.returncode not in (0, 1), r.stderr[-3000:]
    assert "damaged" not in flat and "move it away" not in flat, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in flat, r.stderr[-3000:]


def test_a_full_cache_disk_keeps_the_result_cache(tmp_path: Path) -> None:
    h, spec = setup(tmp_path)
    with tmpfs(tmp_path / "fs", "16m") as fs:
        cache = fs / "cache"
        first = run(spec, tmp_path / "s1", cache)
        assert first.returncode == 0, first.stderr[-3000:]
        filler = fill(fs)
        full = run(spec, tmp_path / "s2", cache)
        assert_named(full, "no space left on the device", "results.sqlite")
        assert not list(cache.glob("results.sqlite.damaged-*"))
        filler.unlink()  # space freed: every measurement of the first run is reused
        again = run(spec, tmp_path / "s2", cache)
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["first_bad"] == h.planted["length"]
        assert "starting server" not in again.stderr, again.stderr[-3000:]


def test_a_full_hook_journal_directory_is_a_full_disk(tmp_path: Path) -> None:
    h, spec = setup(tmp_path)
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        with tmpfs(h.path / ".git" / "vllm-bisect-hook", "1m") as fs:
            fill(fs)
            r = subprocess.run([*HOOK, "--spec", str(spec), "--cache-dir",
                                str(tmp_path / "cache")], cwd=h.path, capture_output=True,
                               text=True, timeout=300)
            assert r.returncode == 128, r.stderr[-3000:]
            assert_named(r, "no space left on the device", ".git/vllm-bisect-hook/")
    finally:
        git(h.path, "bisect", "reset")


def test_a_file_size_limit_is_named_and_moves_nothing(tmp_path: Path) -> None:
    _, spec = setup(tmp_path)
    cache = tmp_path / "cache"
    first = run(spec, tmp_path / "s1", cache)
    assert first.returncode == 0, first.stderr[-3000:]
    limited = run(spec, tmp_path / "s2", cache, limit="64")
    assert_named(limited, "file size limit of 65536 bytes (ulimit -f)")
    assert not list(cache.glob("*.damaged-*")) and not list(tmp_path.glob("s2/*.damaged-*"))
    shutil.rmtree(tmp_path / "s2")  # (its journal never got a row: a new session)
    again = run(spec, tmp_path / "s2", cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "starting server" not in again.stderr  # the cache kept every measurement


def test_the_hook_under_a_file_size_limit_keeps_its_cache(tmp_path: Path) -> None:
    h, spec = setup(tmp_path)
    cache = tmp_path / "cache"
    first = run(spec, tmp_path / "s1", cache)
    assert first.returncode == 0, first.stderr[-3000:]
    before = (cache / "results.sqlite").read_bytes()
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        cmd = shlex.join([*HOOK, "--spec", str(spec), "--cache-dir", str(cache)])
        r = subprocess.run(["bash", "-c", f"ulimit -f 1; exec {cmd}"], cwd=h.path,
                           capture_output=True, text=True, timeout=300)
    finally:
        git(h.path, "bisect", "reset")
    assert r.returncode == 128, r.stderr[-3000:]
    assert_named(r, "file size limit of 1024 bytes (ulimit -f)")
    assert not list(cache.glob("*.damaged-*"))
    assert (cache / "results.sqlite").read_bytes()[:100] == before[:100]
