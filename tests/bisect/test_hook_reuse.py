"""The hook says what it reused (issue 42): earlier verdicts come back from the bisect's
journal under .git/vllm-bisect-hook/, which a fresh --cache-dir does not reach; the line
names the journal and how to start clean, and following it does start clean."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.bisect.test_hook_parity import HOOK, git, sim_serve, spec_for
from tests.helpers import history, write_spec


def hook(repo: Path, spec: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HOOK, "--spec", str(spec), "--cache-dir", str(cache)], cwd=repo,
                          capture_output=True, text=True, timeout=120)


def test_the_hook_names_the_verdicts_it_reused_and_how_to_start_clean(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    git(h.path, "checkout", "-q", h.shas[4])
    first = hook(h.path, spec, tmp_path / "cache-1")
    assert first.returncode == 1, first.stderr
    assert "reused" not in first.stderr   # nothing to reuse yet
    # a fresh cache: the verdict still comes from the journal, and the hook says so
    again = hook(h.path, spec, tmp_path / "cache-2")
    assert again.returncode == 1, again.stderr
    text = " ".join(again.stderr.split())
    m = re.search(r"reused 1 verdict from (\S+) \(this bisect's earlier hook calls, HEAD's "
                  r"among them; to start clean: (rm -r \S+)\)", text)
    assert m, again.stderr
    journal = Path(m.group(1))
    assert journal.is_dir() and journal.parent == h.path / ".git" / "vllm-bisect-hook"
    subprocess.run(shlex.split(m.group(2)), check=True)   # the command as printed
    clean = hook(h.path, spec, tmp_path / "cache-3")
    assert clean.returncode == 1, clean.stderr
    assert "reused" not in clean.stderr and journal.is_dir()   # measured again, journaled anew
    # another commit of the same bisect: the earlier verdict is replayed, HEAD is new
    git(h.path, "checkout", "-q", h.shas[2])
    other = hook(h.path, spec, tmp_path / "cache-3")
    assert other.returncode == 0, other.stderr
    assert "reused 1 verdict from" in other.stderr and "HEAD's among them" not in other.stderr
