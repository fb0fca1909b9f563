"""report.md (through the CLI) neutralises mentions and remote images from commit subjects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.report.sanitize import neutralise
from vllm_bisect.sim.history import History

HOSTILE = ("[Core] cc @vllm-project/maintainers ![x](https://evil.invalid/p.png) "
           "<img src=https://evil.invalid/q.png>")


def assert_neutral(text: str) -> None:
    assert "@vllm-project/maintainers" in text
    assert " @vllm-project/maintainers" not in text          # only as `@...` (a code span)
    assert "![x](https://evil.invalid" not in text and "<img" not in text


def run_session(h: History, tmp: Path) -> Path:
    """``vllm-bisect run`` over ``h`` with its default spec: the session."""
    spec = write_spec(tmp / "s.toml", make_spec(h))
    session = tmp / "sess"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(session), "--cache-dir", str(tmp / "c")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return session


def test_report_md_of_a_hostile_subject(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3, subjects=((3, HOSTILE),))
    session = run_session(h, tmp_path)
    md = (session / "report.md").read_text()
    assert h.planted["length"][:12] in md and "evil.invalid" in md
    assert_neutral(md)
    shown = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "report", str(session)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert_neutral(shown.stdout)


def test_neutralise_keeps_code_and_is_idempotent() -> None:
    text = ("hi @team/x `@kept` ![a](http://h/i.png)\n```\n@inside <img>\n```\n"
            "<details><summary>E</summary>")
    once = neutralise(text)
    assert neutralise(once) == once
    assert "`@team/x`" in once and "`@kept`" in once and "!\\[a]" in once
    assert "@inside <img>" in once and "<details><summary>E</summary>" in once


ESCAPED = (r"[Core] fix \`@vllm-project/maintainers\` \`![x](https://evil.invalid/p.png)\` "
           "```x` @org/team")


def test_report_md_of_a_subject_with_escaped_backticks(tmp_path: Path) -> None:
    """The issue's way through: backslash-escaped backticks around a mention and an image
    (a regex took them for a code span; CommonMark renders them live)."""
    from tests.report.test_sanitize_renderer import live

    h = history(tmp_path, n_commits=6, cap_at=3, subjects=((3, ESCAPED),))
    session = run_session(h, tmp_path)
    md = (session / "report.md").read_text()
    assert "vllm-project/maintainers" in md and "evil.invalid" in md
    assert live(md) == ([], 0), md
