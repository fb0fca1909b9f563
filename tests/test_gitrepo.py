"""Every git command of a repository the tool opens has a deadline (issue 41: "every child
process the tool starts has a deadline"): a git hook that hangs ends as a named error within
``VLLM_BISECT_GIT_TIMEOUT_S``, through the real `vllm-bisect run` on a generated history."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.gitrepo import DEFAULT_TIMEOUT_S, timeout_s


def test_a_hanging_git_hook_ends_the_checkout_at_the_deadline(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    hook = h.path / ".git" / "hooks" / "post-checkout"   # runs on `git worktree add`
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\nsleep 3600\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    env = {**os.environ, "VLLM_BISECT_GIT_TIMEOUT_S": "2"}
    # the subprocess timeout only guards the suite: before, the run waited on the hook's hour
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(tmp_path / "sess"), "--cache-dir",
                        str(tmp_path / "cache")], capture_output=True, text=True, env=env,
                       timeout=600)
    out = " ".join(r.stderr.split())
    assert r.returncode not in (0, 1), out[-2000:]
    assert "cannot check out" in out and "Timeout" in out, out[-2000:]
    assert "Traceback" not in r.stderr


def test_the_deadline_setting_is_validated() -> None:
    for raw, want in (("5", 5.0), ("", DEFAULT_TIMEOUT_S), ("inf", DEFAULT_TIMEOUT_S),
                      ("-1", DEFAULT_TIMEOUT_S), ("x", DEFAULT_TIMEOUT_S)):
        env = {**os.environ, "VLLM_BISECT_GIT_TIMEOUT_S": raw}
        out = subprocess.run([sys.executable, "-c", "from vllm_bisect.gitrepo import "
                              "timeout_s; print(timeout_s())"], capture_output=True,
                             text=True, env=env, timeout=60)
        assert float(out.stdout) == want, (raw, out.stderr)
    assert timeout_s() > 0
