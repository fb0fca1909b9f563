"""Every git command of a repository the tool opens has a deadline (issue 41: "every child
process the tool starts has a deadline"): a git hook that hangs ends as a named error within
``VLLM_BISECT_GIT_TIMEOUT_S``, through the real `vllm-bisect run` on a generated history."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import restore_sigint
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


CHILD = """
import sys
from vllm_bisect.gitrepo import open_bounded
try:
    open_bounded(sys.argv[1]).git.worktree("add", "--detach", sys.argv[2], "HEAD")
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_a_git_command_interrupted_by_ctrl_c_exits_at_once(tmp_path: Path) -> None:
    # GitPython's deadline is a non-daemon Timer left running when its wait is interrupted:
    # the interpreter's exit joined it, so Ctrl-C during a git command hung the CLI for the
    # whole deadline (CI: `explain` interrupted while it read a commit's source, > 120 s)
    h = history(tmp_path, n_commits=2)
    mark = tmp_path / "hook-started"
    hook = h.path / ".git" / "hooks" / "post-checkout"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch '{mark}'\nsleep 3600\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "VLLM_BISECT_GIT_TIMEOUT_S": "3000"}
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(h.path), str(tmp_path / "wt")],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                         preexec_fn=restore_sigint)   # pytest may run with SIGINT ignored
    try:
        for _ in range(2400):  # a bounded wait for git to be inside its hook
            if mark.exists() or p.poll() is not None:
                break
            time.sleep(0.05)
        assert mark.exists(), p.communicate(timeout=60)
        p.send_signal(signal.SIGINT)
        # the timeout only guards the suite: before, the exit waited for the 3000 s deadline
        _, err = p.communicate(timeout=300)
        assert p.returncode == 130, err[-2000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the hook's sleep, which outlives the child
        p.wait(timeout=60)


READER = """
import sys
import git
from vllm_bisect.gitrepo import open_bounded
repo = open_bounded(sys.argv[1])
try:
    repo.commit("HEAD").message
except git.GitCommandError as err:
    print("error:", err)
"""


def test_a_cat_file_reader_that_hangs_ends_at_the_deadline(tmp_path: Path) -> None:
    # GitPython reads commit objects through a long-lived `git cat-file --batch`; one that
    # never answers (a lock, a stalled filesystem: here a git whose cat-file sleeps) held
    # every read of a commit for ever
    h = history(tmp_path, n_commits=2)
    real = shutil.which("git")
    assert real is not None
    wrapper = tmp_path / "git"
    wrapper.write_text("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = cat-file ] && exec sleep 3600; "
                       f"done\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "GIT_PYTHON_GIT_EXECUTABLE": str(wrapper),
           "VLLM_BISECT_GIT_TIMEOUT_S": "2"}
    # the timeout only guards the suite: before, the read waited on the sleep's hour
    r = subprocess.run([sys.executable, "-c", READER, str(h.path)], capture_output=True,
                       text=True, env=env, timeout=300, start_new_session=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Timeout: git cat-file did not answer within 2 secs" in r.stdout, r.stdout


def test_the_deadline_setting_is_validated() -> None:
    for raw, want in (("5", 5.0), ("", DEFAULT_TIMEOUT_S), ("inf", DEFAULT_TIMEOUT_S),
                      ("-1", DEFAULT_TIMEOUT_S), ("x", DEFAULT_TIMEOUT_S)):
        env = {**os.environ, "VLLM_BISECT_GIT_TIMEOUT_S": raw}
        out = subprocess.run([sys.executable, "-c", "from vllm_bisect.gitrepo import "
                              "timeout_s; print(timeout_s())"], capture_output=True,
                             text=True, env=env, timeout=60)
        assert float(out.stdout) == want, (raw, out.stderr)
    assert timeout_s() > 0
