"""`vllm-bisect sim history` (issue 42): it writes PATH-spec.toml and says so (its help said it
printed a spec), and `--study isolate|deps|knobs` makes the studies' histories (only
scripts/isolate_demo.py had them) whose printed commands run the study as written."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(cwd / "cache"), "COLUMNS": "250"}
    return subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def printed_commands(stdout: str) -> list[list[str]]:
    """The `next:` / `then:` commands, as a user would paste them (vllm-bisect -> the CLI)."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(("next: ", "then: ")):
            words = shlex.split(line.split(": ", 1)[1])
            assert words[0] == "vllm-bisect", line
            out.append([*CLI, *words[1:]])
    return out


def says_each_server(stderr: str, tmp_path: Path, study: str) -> None:
    """Issue 50 (no long silence): the study says each subject it tests and each server it
    starts (its builds and servers said nothing; only each judged subject's line came, after
    all its servers: 4 servers to calibrate the ends, 4 minutes on real vLLM). One
    'starting server' line per start its journal counts."""
    session = tmp_path / f"{study}-session"
    if study == "knobs":   # a session of its own, named on stderr
        found = re.search(r"^session (\S+)", stderr, re.M)
        assert found, stderr
        session = tmp_path / found.group(1)   # (relative to the command's directory)
    con = sqlite3.connect(session / "studies" / "journal.sqlite")
    started = con.execute("SELECT COUNT(*) FROM starts WHERE done = 1").fetchone()[0]
    con.close()
    assert started > 0 and stderr.count("starting server") == started, stderr
    assert " testing " in stderr, stderr   # what is tested next, before its servers


def test_history_says_where_it_wrote_the_spec(tmp_path: Path) -> None:
    r = run([*CLI, "sim", "history", str(tmp_path / "h"), "--commits", "6", "--cap-at", "3"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    spec = tmp_path / "h-spec.toml"
    assert f"spec written to {spec}" in r.stdout and spec.exists()
    help_text = " ".join(run([*CLI, "sim", "history", "--help"], tmp_path).stdout.split())
    assert "write a spec for it to PATH-spec.toml" in help_text and "print a spec" not in help_text
    assert "--study" in help_text


@pytest.mark.parametrize(("study", "expect"), [
    ("deps", ["conclusion: dependency", "first bad tinydep version: 1.3"]),
    ("isolate", ["smallest reproducing set", "vllm/spec_decode/config.py @@",
                 "reverting exactly that set on the culprit: removes the symptom"]),
    ("knobs", ["flips the symptom: --attention-backend=TRITON_ATTN"]),
])
def test_a_study_history_and_its_commands_as_printed(tmp_path: Path, study: str,
                                                      expect: list[str]) -> None:
    r = run([*CLI, "sim", "history", str(tmp_path / study), "--study", study], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / f"{study}-spec.toml").exists()
    commands = printed_commands(r.stdout)
    assert commands, r.stdout
    text = ""
    for cmd in commands:
        done = run(cmd, tmp_path)
        assert done.returncode == 0, (cmd, done.stderr[-3000:])
        text += done.stdout + done.stderr
        if cmd[3] == study:
            says_each_server(done.stderr, tmp_path, study)
    flat = " ".join(text.split())
    for e in expect:
        assert e in flat, (e, text[-3000:])


def test_an_unknown_study_is_a_clear_error(tmp_path: Path) -> None:
    r = run([*CLI, "sim", "history", str(tmp_path / "x"), "--study", "nope"], tmp_path)
    assert r.returncode == 2 and "--study 'nope' is not a study history" in r.stderr
    assert "isolate, deps, knobs" in r.stderr and "Traceback" not in r.stderr
