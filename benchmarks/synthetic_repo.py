"""Large linear git histories in seconds, through `git fast-import`."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_linear_repo(path: Path, n_commits: int) -> list[str]:
    """A repository with n_commits + 1 commits on main; returns their shas, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    lines: list[str] = []
    for i in range(n_commits + 1):
        msg = f"[Misc] synthetic change {i} (#{40000 + i})".encode()
        body = f"revision {i}\n".encode()
        lines.append("commit refs/heads/main")
        lines.append(f"mark :{i + 1}")
        lines.append(f"committer Bench <bench@vllm.invalid> {1790000000 + 60 * i} +0000")
        lines.append(f"data {len(msg)}")
        lines.append(msg.decode())
        if i:
            lines.append(f"from :{i}")
        lines.append("M 100644 inline REVISION")
        lines.append(f"data {len(body)}")
        lines.append(body.decode())
    stream = ("\n".join(lines) + "\n").encode()
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=stream, check=True)
    out = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=path, check=True,
                         capture_output=True, text=True).stdout.split()
    assert len(out) == n_commits + 1
    return out
