"""What `vllm-bisect run` prints reads as written (issue 42): no "about 0.0 h in all", no
"(~1 steps left)", and a commit's subject is cut before its PR number, never inside it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.text import duration_h, plural, seconds, short_subject


def test_a_short_run_says_its_time_in_seconds_and_keeps_pr_numbers_whole(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12, cap_at=8, unbuildable=(6,))
    spec = write_spec(tmp_path / "spec.toml", make_spec(h))
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "160"}
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(tmp_path / "s")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    text = " ".join((r.stderr + r.stdout).split())   # (rich wraps long lines)
    forecast = re.search(r"forecast: .*?\)", text)
    assert forecast, text
    assert "0.0 h" not in forecast.group(0)
    # issue 50: "0 s a server start" for 0.4 s (not after a digit or a dot: "1.0 s a build",
    # a build of 1.0 s under load, failed a full run's `\b0 s a` in session 29)
    assert not ZERO_S_A.search(forecast.group(0)), forecast
    assert "1 more requests" not in text
    assert not re.search(r"\b1 commits\b", text)
    assert re.search(r"about \d+ s in all", forecast.group(0)), forecast.group(0)
    assert not re.search(r"~1 steps left", text)
    # the culprit's subject is longer than the progress line's 70 characters
    doc = json.loads((tmp_path / "s" / "result.json").read_text())
    culprit = doc["first_bad_subject"]
    assert len(culprit) > 70 and culprit.endswith(")"), culprit
    pr = culprit[culprit.rindex("(#"):]
    for line in (r.stderr + r.stdout).splitlines():
        for m in re.finditer(r"\(#[^)\s]*", line):
            assert re.fullmatch(r"\(#\d+", m.group(0)), line   # never "(#472…" or "(#4"
    assert re.search(re.escape(pr) + r" \(~\d+ steps? left\)", r.stderr), r.stderr


def test_the_wording_helpers() -> None:
    assert plural(1, "step") == "1 step" and plural(0, "step") == "0 steps"
    assert plural(2, "server start") == "2 server starts"
    assert duration_h(0.001) == "4 s" and duration_h(0.0) == "1 s"
    assert duration_h(0.2) == "12 min" and duration_h(2.25) == "2.2 h"
    assert seconds(0.4) == "0.4 s" and seconds(0.04) == "40 ms" and seconds(12.3) == "12 s"
    assert seconds(0.0004) == "1 ms" and seconds(0) == "0 s"   # ("0.0 s a build" read "0 s a")
    assert plural(1, "more request") == "1 more request" and plural(1, "commit") == "1 commit"
    s = "[Spec Decode] Merge generation-config defaults into MTP requests (#47230)"
    for width in (30, 48, 60, 70):
        cut = short_subject(s, width)
        assert len(cut) <= width and cut.endswith(" (#47230)") and "…" in cut, cut
    assert short_subject(s, 80) == s
    assert short_subject("no PR number in this rather long subject line", 20) == \
        "no PR number in thi…"


# a count of 1 before a plural noun ("1 commits", "1 more requests"; not a fraction "1/1
# requests", nor the last term of a sum or a comparison, "3 + 1 servers", "2 vs 1 servers"), a
# "(s)" plural, and "0 s a" for a time under a second (issue 50 item 8)
ONE_PLURAL = re.compile(
    r"(?<![\w/.,+~-])(?<!\+ )(?<!vs )1 (?:more )?(?:commits|requests|servers|server starts|"
    r"steps|runs|samples|files|hunks|calls|rounds|packages|builds|points|GPUs|variables|workers|versions|"
    r"seconds)\b")
ZERO_S_A = re.compile(r"(?<![\w.])0 s a\b")   # a time under a second printed as "0 s a ..."
MISREAD = (ONE_PLURAL, re.compile(r"\w\(s\)"), ZERO_S_A)


def misread(text: str) -> list[str]:
    """The phrases of ``text`` (its lines joined: rich wraps) that read wrong."""
    flat = " ".join(text.split())
    return [m.group(0) for pattern in MISREAD for m in pattern.finditer(flat)]


def test_misread_phrases_are_caught() -> None:
    assert misread("5 judged, 1 commits; sampling 1 more requests") == ["1 commits",
                                                                        "1 more requests"]
    assert misread("itl median 2.5 over 10 samples on 1 server(s)") == ["r(s)"]
    assert misread("over 1\n   runs; 0 s a server start") == ["1 runs", "0 s a"]
    assert not misread(
        "(1/1 requests short), 11 commits, 0.4 s a server start, 2 servers")
    # a two-level calibration of 3 + 1 servers (a loaded run printed it; the sum reads right)
    assert not misread("server-level CV ~2.1%, 3 + 1 servers; 4 vs 1 servers")
    assert misread("on 3 + 1 servers, then 1 servers") == ["1 servers"]
    # a build of 1.0 s is no "0 s a" (a full run under load printed it)
    assert not misread("about 21 s in all at 1.0 s a build, 0.3 s a server start")


def test_a_demo_and_a_two_level_run_read_as_written(tmp_path: Path) -> None:
    """What `vllm-bisect demo`, a two-level `vllm-bisect run` (one server a side in its
    verification: "on 1 server(s)" before) and the default's (auto: the model of the range)
    print and write reads as written."""
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "160"}
    demo = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "demo", "--workdir",
                           str(tmp_path / "demo")], capture_output=True, text=True,
                          timeout=600, env=env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    h = history(tmp_path, n_commits=12, slow_at=7, slow_factor=1.5, step_ms=5.0,
                noise_cv=0.05)
    spec = write_spec(tmp_path / "spec.toml", make_spec(
        h, verdict={"symptom": "itl", "strategy": "twolevel"},
        probe={"max_tokens": 60, "requests": 1}))
    run = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                          "--session", str(tmp_path / "s")], capture_output=True, text=True,
                         timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    auto = write_spec(tmp_path / "auto.toml", make_spec(
        h, verdict={"symptom": "itl"}, probe={"max_tokens": 60, "requests": 3}))
    model = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(auto),
                            "--session", str(tmp_path / "m")], capture_output=True, text=True,
                           timeout=600, env=env)
    assert model.returncode == 0, model.stderr[-3000:]
    assert "verdict strategy changepoint" in model.stderr
    reports = [p.read_text() for p in (tmp_path / "demo").rglob("report.md")]
    assert reports
    for name, text in (("demo", demo.stdout + demo.stderr), ("run", run.stdout + run.stderr),
                       ("demo report", "\n".join(reports)),
                       ("run report", (tmp_path / "s" / "report.md").read_text()),
                       ("model run", model.stdout + model.stderr),
                       ("model report", (tmp_path / "m" / "report.md").read_text())):
        assert not misread(text), (name, misread(text))
    assert "on 1 server [" in run.stderr, run.stderr[-3000:]   # the two-level reason


def test_a_session_under_a_second_says_its_tenths() -> None:
    """A session answered from the cache in 0.4 s said "0 s" in the report's summary."""
    from vllm_bisect.report.render import SessionReport, markdown
    from vllm_bisect.report.result import BisectReport

    res = BisectReport(first_bad=None, candidates=[], good="a" * 40, bad="b" * 40,
                       n_commits=1, probed=[], wall_s=0.4)
    md = markdown(SessionReport(Path("."), res, ""))
    assert "1 commit; 0 judged, 0 server starts, 0.4 s." in md, md
