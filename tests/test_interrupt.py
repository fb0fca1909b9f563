"""A Ctrl-C is never lost (vllm_bisect/interrupt.py). Python runs a signal's handler at the
next bytecode, and when that is inside a fork hook (logging's, run while a server or a git
command is forked) the KeyboardInterrupt is printed as "Exception ignored" and dropped: seen
in the suite, a SIGINT sent while a rest check's server was being started was swallowed and
the run went on to its end with exit 0. Here the SIGINT is delivered inside a fork hook on
purpose (a sitecustomize in the run's environment), through the real `vllm-bisect run`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.bisect.test_run_session import spawned
from tests.helpers import history, make_spec, write_spec

HOOK = """
import os, signal, threading
_trigger = os.environ.get("VLLM_BISECT_TEST_SIGINT_IN_FORK")
_fired = []

def _after_fork_in_parent():
    # the main thread's fork only: a handler runs in the main thread, here inside the hook
    if threading.current_thread() is not threading.main_thread():
        return
    if _trigger and not _fired and os.path.exists(_trigger):
        _fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):   # the handler runs here, inside the hook: swallowed
            pass

os.register_at_fork(after_in_parent=_after_fork_in_parent)
"""


def test_a_ctrl_c_that_lands_in_a_fork_hook_still_stops_the_run(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=16, cap_at=9)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOOK)
    trigger = tmp_path / "now"
    env = {**os.environ, "VLLM_BISECT_TEST_SIGINT_IN_FORK": str(trigger),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    session, cache = tmp_path / "sess", tmp_path / "cache"
    cmd = [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--session",
           str(session), "--cache-dir", str(cache)]
    with (tmp_path / "err").open("w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 300
        while spawned(session) < 2 and p.poll() is None:   # both ends' servers
            assert time.monotonic() < deadline
            time.sleep(0.05)
        trigger.touch()   # the next fork (a git command, a server) gets the SIGINT
        rc = p.wait(timeout=300)
    text = (tmp_path / "err").read_text()
    assert "Exception ignored" in text and "KeyboardInterrupt" in text, text[-3000:]  # lost
    assert rc == 130, text[-3000:]   # and still obeyed: before, the run went on, exit 0
    assert "interrupted; nothing recorded is lost" in " ".join(text.split())
    r = subprocess.run([*cmd[:3], "run", "--session", str(session), "--cache-dir", str(cache)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and f"first bad commit: {h.planted['length']}" in r.stdout + r.stderr
