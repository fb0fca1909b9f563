"""Sessions that are not ours: ``vllm-bisect run --session DIR`` never adopts a directory that
is not a session (its files would be overwritten), and never resumes a session with another
spec (directly or through a symlink) unless ``--force``. Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from tests.test_cli import cli
from vllm_bisect.bisect.state.session import MARKER, session_key


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_an_existing_directory_that_is_not_a_session_is_refused(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    mine = tmp_path / "my-notes"
    mine.mkdir()
    (mine / "report.md").write_text("my own report\n")
    (mine / "result.json").write_text('{"mine": true}\n')
    before = _files(mine)
    r = cli("run", "--spec", str(spec), "--session", str(mine), "--cache-dir",
            str(tmp_path / "cache"))
    assert r.returncode == 2, r.stderr
    said = " ".join(r.stderr.split())
    assert "is not a vllm-bisect session" in said and "hint:" in said, r.stderr
    assert "Traceback" not in r.stderr
    assert _files(mine) == before   # nothing written, nothing overwritten


def test_a_file_as_session_is_refused(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    f = tmp_path / "file"
    f.write_text("x")
    r = cli("run", "--spec", str(spec), "--session", str(f))
    assert r.returncode == 2 and "is a file" in r.stderr, r.stderr
    assert f.read_text() == "x"


def test_a_session_resumed_with_another_spec_is_refused_unless_forced(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=2)
    spec_a = make_spec(h)
    a = write_spec(tmp_path / "a.toml", spec_a)
    b = write_spec(tmp_path / "b.toml", make_spec(h, probe={"max_tokens": 150}))
    session, cache = tmp_path / "sess", tmp_path / "cache"
    r = cli("run", "--spec", str(a), "--session", str(session), "--cache-dir", str(cache))
    assert r.returncode == 0, r.stderr
    marker = json.loads((session / MARKER).read_text())
    assert marker["tool"] == "vllm-bisect" and marker["spec_key"] == session_key(spec_a)
    before = _files(session)

    link = tmp_path / "link"
    link.symlink_to(session)
    for target in (session, link):
        r = cli("run", "--spec", str(b), "--session", str(target), "--cache-dir", str(cache))
        assert r.returncode == 2, r.stderr
        said = " ".join(r.stderr.split())
        assert "was started with another spec" in said and "probe.max_tokens (160 -> 150)" in said
        assert "--force" in said and "Traceback" not in r.stderr
        assert _files(session) == before

    # the same spec resumes (the finished session is reported again)
    r = cli("run", "--spec", str(a), "--session", str(link), "--cache-dir", str(cache))
    assert r.returncode == 0, r.stderr
    report_a = (session / "report.md").read_bytes()

    r = cli("run", "--spec", str(b), "--session", str(link), "--cache-dir", str(cache),
            "--force")
    assert r.returncode == 0, r.stderr
    aside = [p for p in session.iterdir() if p.name.startswith("replaced-")]
    assert len(aside) == 1 and (aside[0] / "report.md").read_bytes() == report_a
    assert json.loads((session / MARKER).read_text())["spec_key"] != marker["spec_key"]


def test_an_empty_directory_becomes_a_session(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("run", "--spec", str(spec), "--session", str(empty), "--cache-dir",
            str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert (empty / MARKER).exists() and (empty / "report.md").exists()
