"""`cache ls` and `cache prune` see everything the cache holds (issue 42): after a source
bisect it held a venv and a worktree per commit while `cache ls` said "total 0 B in 0
entries"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.builders.cache import dir_size


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_cache_ls_lists_and_prune_reaches_source_venvs_and_worktrees(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=4)
    spec = write_spec(tmp_path / "spec.toml", make_spec(h))
    cache = tmp_path / "cache"
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(cache)}
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "s"), env=env)
    assert r.returncode == 0, r.stderr
    ls = cli("cache", "ls", "--json", "--cache-dir", str(cache))
    assert ls.returncode == 0, ls.stderr
    doc = json.loads(ls.stdout)
    kinds = {e["kind"] for e in doc["entries"]}
    assert {"source venv", "worktree", "measurements"} <= kinds, kinds
    venvs = [e for e in doc["entries"] if e["kind"] == "source venv"]
    trees = [e for e in doc["entries"] if e["kind"] == "worktree"]
    judged = {p["commit"] for p in json.loads((tmp_path / "s" / "result.json").read_text())[
        "probed"]}
    assert {e["commit"] for e in venvs} == judged and {e["commit"] for e in trees} == judged
    # the sizes are the directories' own, and the total is everything there is
    assert all(e["size"] == dir_size(Path(e["location"])) > 0 for e in venvs + trees)
    everything = dir_size(cache) - sum(f.stat().st_size for f in cache.glob("artifacts.sqlite*"))
    locks = sum(f.stat().st_size for f in cache.rglob("*.lock") if f.parent.name in (
        "locks",) or f.parent.parent.name in ("worktrees",))
    assert doc["total_bytes"] == everything - locks > 0
    text = cli("cache", "ls", "--cache-dir", str(cache)).stdout
    assert "total 0 B" not in text and "source venv" in text and "worktree" in text
    # prune reaches them all, keeps one commit when asked, and never the measurements
    keep = h.bad
    pr = cli("cache", "prune", "--max-size", "0", "--keep", keep, "--cache-dir", str(cache))
    assert pr.returncode == 0, pr.stderr
    assert "the measurements" in pr.stdout and "never pruned" in pr.stdout
    left = json.loads(cli("cache", "ls", "--json", "--cache-dir", str(cache)).stdout)
    assert {(e["kind"], e["commit"]) for e in left["entries"]} == {
        ("source venv", keep), ("worktree", keep), ("measurements", None)}
    for e in venvs + trees:
        assert Path(e["location"]).exists() is (e["commit"] == keep)
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=h.path,
                            capture_output=True, text=True, check=True).stdout
    assert sum(ln.startswith("worktree ") for ln in listed.splitlines()) == 2  # repo + kept
    # a bisect after the prune builds what it needs again, and reuses the measurements
    again = cli("run", "--spec", str(spec), "--session", str(tmp_path / "s2"), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["first_bad"] == h.planted["length"]
