"""Text from elsewhere never drives the terminal: escape sequences in a commit subject or a
server's body are stripped from what the CLI prints and from report.md / report.html; a ref
GitPython cannot parse (`--good '@{-1}'`) is a clear error, not a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.bisect.test_hook_parity import git
from tests.helpers import history, make_spec, write_spec
from tests.probes.hostile_sse import ESCAPES, HostileServer
from tests.test_cli import cli

CONTROL = ("\x1b", "\x07", "\x9b", "\u202e")
SUBJECT = "[Core] Fix \x1b]0;pwned\x07\x1b[2J\x1b[31mthe\x1b[0m cache \x9b1m\u202eevil (#1)"


def _clean(text: str, where: str) -> None:
    found = [repr(c) for c in CONTROL if c in text]
    assert not found, f"{where} holds {found}"


def test_a_commit_subject_with_escapes_is_stripped(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    git(h.path, "commit", "-q", "--allow-empty", "-m", SUBJECT)
    bad = git(h.path, "rev-parse", "HEAD").strip()
    spec = write_spec(tmp_path / "s.toml", make_spec(h, range={"bad": bad}))
    session = tmp_path / "sess"
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir",
            str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert "[Core] Fix" in r.stderr and "cache" in r.stderr   # the subject, cleaned
    _clean(r.stdout, "stdout")
    _clean(r.stderr, "stderr")
    for name in ("report.md", "report.html", "result.json"):
        _clean((session / name).read_text(), name)
    md = cli("report", str(session))
    assert md.returncode == 0 and "[Core] Fix" in (session / "report.md").read_text()
    _clean(md.stdout, "report's stdout")


def test_a_server_body_with_escapes_is_stripped() -> None:
    with HostileServer("error-escape") as url:
        r = cli("probe", "--url", url, "--model", "m", "--requests", "1", "--warmup", "0")
    assert r.returncode == 1, r.stderr
    assert "HTTP 500" in r.stderr and "boom" in r.stderr
    _clean(r.stderr, "stderr")
    assert ESCAPES.startswith("boom \x1b")


def test_good_at_minus_one_is_a_clear_error(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "s"), "--good", "@{-1}")
    assert r.returncode == 2, r.stderr
    assert "unknown good ref: '@{-1}'" in r.stderr and "Traceback" not in r.stderr


def test_good_at_minus_one_names_the_branch_checked_out_before(tmp_path: Path) -> None:
    """Where the reflog has it, '@{-1}' is what git says it is."""
    h = history(tmp_path, n_commits=3, cap_at=2)
    git(h.path, "checkout", "-q", h.good)
    git(h.path, "checkout", "-q", "-")
    want = subprocess.run(["git", "rev-parse", "@{-1}"], cwd=h.path, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert want == h.good
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "s"), "--good", "@{-1}",
            "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert h.good[:12] in r.stderr
