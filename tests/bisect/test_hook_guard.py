"""The hook's guard: under a real `git bisect run`, an error that is not a verdict (an
unreadable spec, a cache dir that cannot be a directory, a damaged journal, any exception the
hook did not expect) stops the bisect (exit >= 128, the cause and a hint on stderr). Exit 1
would read as "bad" and git would name a wrong first bad commit with exit 0."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git, sim_serve, spec_for
from tests.helpers import history, write_spec
from vllm_bisect.sim.history import History
from vllm_bisect.spec import dump_spec


def bisect_run(h: History, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], str]:
    """`git bisect run ARGV` over the whole history; what it printed and the part of git's
    log after the start (the commits it judged)."""
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        r = subprocess.run(["git", "bisect", "run", *argv], cwd=h.path, capture_output=True,
                           text=True, timeout=300)
        log = git(h.path, "bisect", "log")
    finally:
        git(h.path, "bisect", "reset")
    return r, log.split("git bisect start")[-1].split("\n", 2)[-1]


def assert_aborted(r: subprocess.CompletedProcess[str], judged: str, *cause: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "is the first bad commit" not in r.stdout, out
    assert "exit code 128" in r.stderr, out
    assert "# bad:" not in judged and "# good:" not in judged, judged
    assert "Traceback" not in r.stderr, out
    assert "hint:" in r.stderr, out
    for c in cause:
        assert c in " ".join(r.stderr.split()), out


def test_utf16_spec_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    path = tmp_path / "spec.toml"
    path.write_bytes(dump_spec(spec_for(h, sim_serve())).encode("utf-16"))  # BOM + UTF-16
    r, judged = bisect_run(h, [*HOOK, "--spec", str(path)])
    assert_aborted(r, judged, "UTF-16", str(path))


def test_binary_spec_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    path = tmp_path / "spec.toml"
    path.write_bytes(bytes(range(256)) * 8)
    r, judged = bisect_run(h, [*HOOK, "--spec", str(path)])
    assert_aborted(r, judged, "not UTF-8", str(path))


def test_cache_dir_that_is_a_file_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    blocker = tmp_path / "cache"
    blocker.write_text("a file, not a directory\n")
    r, judged = bisect_run(h, [*HOOK, "--spec", str(spec), "--cache-dir", str(blocker)])
    assert_aborted(r, judged, "--cache-dir", str(blocker))
    assert blocker.read_text() == "a file, not a directory\n"


def test_cache_dir_under_a_file_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    (tmp_path / "f").write_text("x")
    r, judged = bisect_run(h, [*HOOK, "--spec", str(spec), "--cache-dir",
                               str(tmp_path / "f" / "cache")])
    assert_aborted(r, judged, "--cache-dir")


def _hook_journal(h: History) -> Path:
    found = list((h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite"))
    assert len(found) == 1, found
    return found[0]


def test_unreadable_journal_row_aborts(tmp_path: Path) -> None:
    """A journal row this version cannot read (garbage in the evaluation column) is a
    damaged journal: the bisect stops, naming the journal; it is never a "bad" verdict."""
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    git(h.path, "bisect", "start", h.bad, h.good)
    try:  # one hook call records its verdict in the journal
        first = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                               text=True, timeout=120)
        assert first.returncode in (0, 1), first.stderr
    finally:
        git(h.path, "bisect", "reset")
    journal = _hook_journal(h)
    with sqlite3.connect(journal) as con:
        con.execute("UPDATE outcomes SET evaluation = ?", ('{"commit": 12, "status": [}',))
    r, judged = bisect_run(h, [*HOOK, "--spec", str(spec)])
    assert_aborted(r, judged, str(journal))


BROKEN_ENTRY = """
import sys
from pathlib import Path

import pytest
from vllm_bisect.cli.hook_cmds import judge_head
# a cache dir that is not a path: whatever breaks inside the guard must stop the bisect
sys.exit(judge_head(spec_path=Path(sys.argv[1]), cache_dir=12345, verbose=False))
"""


def test_an_unexpected_exception_inside_the_guard_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    r, judged = bisect_run(h, [sys.executable, "-c", BROKEN_ENTRY, str(spec)])
    assert_aborted(r, judged, "unexpected AttributeError", "no verdict")


def test_a_measured_verdict_still_exits_0_or_1(tmp_path: Path) -> None:
    """The guard lets verdicts through: the bisect ends on the planted cap."""
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    r, _ = bisect_run(h, [*HOOK, "--spec", str(spec)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{h.planted['length']} is the first bad commit" in r.stdout


def test_a_journal_row_with_nan_written_as_null_reads_as_unavailable(tmp_path: Path) -> None:
    """An earlier version wrote a NaN acceptance per position into the journal (pydantic
    writes it as null): every later hook call crashed on it (exit 1 = bad). Read now as
    "not available", and the bisect ends on the planted cap."""
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        first = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                               text=True, timeout=120)
        assert first.returncode in (0, 1), first.stderr
    finally:
        git(h.path, "bisect", "reset")
    with sqlite3.connect(_hook_journal(h)) as con:  # (HEAD's row, and git's two ends')
        for seq, text in con.execute("SELECT seq, evaluation FROM outcomes").fetchall():
            ev = json.loads(text)
            ev["measurement"].update(acceptance_length=None,
                                     acceptance_per_position=[None, 0.5])
            con.execute("UPDATE outcomes SET evaluation = ? WHERE seq = ?",
                        (json.dumps(ev), seq))
    r, _ = bisect_run(h, [*HOOK, "--spec", str(spec)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{h.planted['length']} is the first bad commit" in r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("key", "value", "said"), [
    ("request_deadline_s", "inf", "finite number"),
    ("startup_timeout_s", "1e308", "less than or equal to 604800"),
    ("download_deadline_s", "nan", "finite number"),
    ("index_deadline_s", "-inf", "finite number"),
])
def test_a_duration_that_is_not_finite_and_bounded_aborts_at_load(
        tmp_path: Path, key: str, value: str, said: str) -> None:
    """inf or 1e308 in a deadline killed the watchdog thread (OverflowError) and the hook
    hung on a server that hangs: every duration is validated finite and bounded at load."""
    h = history(tmp_path, n_commits=4)
    text = dump_spec(spec_for(h, sim_serve()))
    ops = text.index("[ops]\n")
    body = text[ops:]
    body = (re.sub(rf"^{key} = .*$", f"{key} = {value}", body, count=1, flags=re.M)
            if re.search(rf"^{key} = ", body, re.M) else
            body.replace("[ops]\n", f"[ops]\n{key} = {value}\n", 1))
    path = tmp_path / "spec.toml"
    path.write_text(text[:ops] + body)
    r, judged = bisect_run(h, [*HOOK, "--spec", str(path)])
    assert_aborted(r, judged, f"ops.{key}", said)
