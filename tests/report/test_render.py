"""Reports from real sessions: Markdown for GitHub, self-contained HTML with plots."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.helpers import history, make_spec, write_spec
from tests.report import browser


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("report")
    env = {**os.environ, "VLLM_BISECT_CACHE_DIR": str(tmp / "cache")}  # module scope: own cache
    h = history(tmp, n_commits=12, cap_at=8, unbuildable=(6,))
    out = {}
    spec = write_spec(tmp / "spec.toml", make_spec(h))
    r = cli("run", "--spec", str(spec), "--session", str(tmp / "found"), env=env)
    assert r.returncode == 0, r.stderr
    out["found"] = tmp / "found"
    h2 = history(tmp / "h2", n_commits=8, cap_at=5, unbuildable=(3, 4))
    spec2 = write_spec(tmp / "spec2.toml", make_spec(h2))
    r = cli("run", "--spec", str(spec2), "--session", str(tmp / "inconclusive"), env=env)
    assert r.returncode == 0, r.stderr
    out["inconclusive"] = tmp / "inconclusive"
    return out


def test_run_writes_both_reports(sessions: dict[str, Path]) -> None:
    for s in sessions.values():
        assert (s / "report.md").exists() and (s / "report.html").exists()


def test_markdown_names_culprit_pr_table_env_and_reproduction(sessions: dict[str, Path]) -> None:
    md = cli("report", str(sessions["found"]), "--format", "md").stdout
    m = re.search(r"\*\*First bad commit:\*\* \[`([0-9a-f]{12})`\]\("
                  r"https://github.com/vllm-project/vllm/commit/([0-9a-f]{40})\) (.+)", md)
    assert m and m.group(2).startswith(m.group(1))
    assert "Merge generation-config defaults" in m.group(3)
    assert re.search(r"\(\[#\d+\]\(https://github.com/vllm-project/vllm/pull/\d+\)\)", m.group(3))
    assert "| # | commit | subject | output tokens |" in md
    assert "**(first bad)**" in md and "| 128 |" in md and "| 160 |" in md
    assert "Skipped (never judged):" in md and "build of" in md
    assert '"machine"' in md and "vllm-bisect run --spec spec.toml --good" in md
    assert "[verdict]" in md  # the spec travels with the report
    assert "Effect at the first bad commit vs its parent: output tokens 160 -> 128" in md


def test_inconclusive_report_blames_nobody(sessions: dict[str, Path]) -> None:
    md = cli("report", str(sessions["inconclusive"])).stdout
    assert "**Inconclusive:**" in md and "First bad commit" not in md
    assert md.count("https://github.com/vllm-project/vllm/commit/") == 3  # the candidates


def test_html_has_a_plot_per_symptom_with_culprit(sessions: dict[str, Path]) -> None:
    page = (sessions["found"] / "report.html").read_text()
    assert page.count("<svg") == 3 and "http" not in page.split("<body>")[0].replace(
        "http://www.w3.org", "")  # self-contained: no external resources in the head
    assert 'class="point good"' in page and 'class="point bad"' in page
    assert 'class="no-value skip"' in page and page.count('class="culprit"') == 3


def test_report_of_unfinished_session_is_clear(tmp_path: Path) -> None:
    from vllm_bisect.bisect.state.journal import SessionJournal

    SessionJournal(tmp_path).close()  # a session that has not finished
    r = cli("report", str(tmp_path))
    assert r.returncode == 2 and "has no result.json" in r.stderr


def test_html_renders_in_headless_chromium(sessions: dict[str, Path], tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    browser.run(f"--screenshot={shot}", "--window-size=900,1100",
                (sessions["found"] / "report.html").as_uri(), profile=tmp_path / "profile")
    assert shot.exists() and shot.stat().st_size > 20_000
    keep = Path("/tmp/vllm-bisect-report.png")
    shutil.copy(shot, keep)  # for a person to look at


def test_in_a_browser_skips_are_no_values_and_logs_are_links(sessions: dict[str, Path],
                                                               tmp_path: Path) -> None:
    # issue 42: a skipped commit was a cross on the x axis (it read as a measurement of 0),
    # and a skip's log path was text
    session = sessions["found"]
    doc = json.loads((session / "result.json").read_text())
    skipped = {p["index"] for p in doc["probed"] if p["verdict"] == "skip"}
    measured = {p["index"] for p in doc["probed"] if p["verdict"] != "skip"}
    assert skipped and measured
    found = browser.probe(session / "report.html", browser.LAYOUT, tmp_path / "profile")
    assert len(found["plots"]) == 3
    for plot in found["plots"]:
        assert plot["width"] > 500, plot["title"]   # laid out at the page's width
        height = plot["y0"] - plot["top"]
        assert not plot["skipmarks"] or all(m["tag"] == "rect" for m in plot["skipmarks"])
        drawn = {pt["i"] for pt in plot["points"]}
        assert not drawn & skipped, (plot["title"], drawn & skipped)
        for pt in plot["points"]:   # a measurement sits inside the plot area
            assert plot["top"] <= pt["cy"] <= plot["y0"], (plot["title"], pt)
        bands = {m["i"]: m for m in plot["novalue"]}
        assert skipped <= set(bands), (plot["title"], bands)
        for m in bands.values():   # a band over the whole height: no value, not a 0
            assert m["tag"] == "rect" and m["box"]["h"] >= 0.99 * height, m
    logs = found["links"]
    assert logs and all(ln["w"] > 0 for ln in logs)
    for ln in logs:
        assert ln["href"].startswith("file://"), ln
        target = Path(unquote(urlparse(ln["href"]).path))
        assert target.is_file() and target.resolve().is_relative_to(session.resolve()), ln
        assert ln["text"] == str(target.relative_to(session.resolve()))
    # the browser opens the link: the log's own text
    page = browser.dump_dom(logs[0]["href"], tmp_path / "profile")
    target = Path(unquote(urlparse(logs[0]["href"]).path))
    words = re.findall(r"[A-Za-z0-9_]{4,}", target.read_text())[-5:]
    assert words and all(w in page for w in words), (words, page[-500:])


def test_html_tables_are_html_and_nothing_is_markdown(sessions: dict[str, Path]) -> None:
    page = (sessions["found"] / "report.html").read_text()
    assert "<table" in page and "<th>output tokens</th>" in page
    assert page.count('<tr class="first-bad">') == 1
    for pre in re.findall(r"<pre>(.*?)</pre>", page, re.S):
        assert "| # |" not in pre and "**" not in pre  # no Markdown source in a <pre>
    assert "|---|" not in page and "**First" not in page
    assert 'viewBox="0 0 1000 260"' in page and 'width: 100%' in page  # stretches to the page


def test_plot_ticks_are_round_and_x_labels_do_not_overlap() -> None:
    from vllm_bisect.report.plot import X_LABEL_PX, make_plot, nice_ticks

    assert nice_ticks(0, 1296) == [0, 500, 1000, 1500]
    assert nice_ticks(0, 0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    for n in (3, 12, 64, 200, 1000):
        pts = [(i, 10.0 + (i % 7) * 1.37, "good" if i < n // 2 else "bad", i == n // 2)
               for i in range(0, n + 1, max(1, n // 40))]
        p = make_plot("t", "ms", pts)
        assert p is not None and p.x_ticks and p.y_ticks
        gaps = [b.pos - a.pos for a, b in zip(p.x_ticks, p.x_ticks[1:], strict=False)]
        assert min(gaps, default=X_LABEL_PX) >= X_LABEL_PX, (n, gaps)
        steps = {int(b.label) - int(a.label)
                 for a, b in zip(p.x_ticks, p.x_ticks[1:], strict=False)}
        assert len(steps) <= 1 and all(str(s)[0] in "125" for s in steps), steps
        for t in p.y_ticks:  # 1, 2 or 5 times a power of ten apart, printed without noise
            assert len(t.label.replace(",", "").rstrip("0").rstrip(".")) <= 4, t.label
    assert make_plot("t", "ms", [(0, None, "skip", False)]) is None


def test_studies_render_as_html_tables() -> None:
    from tests.isolate.test_report_section import STUDIES
    from vllm_bisect.report.render import SessionReport, html_report, markdown
    from vllm_bisect.report.result import BisectReport

    res = BisectReport.model_validate({"first_bad": "c" * 40, "candidates": ["c" * 40],
                                       "good": "a" * 40, "bad": "c" * 40, "n_commits": 1,
                                       "probed": [], **STUDIES})
    assert BisectReport.model_validate_json(res.model_dump_json()) == res  # they round-trip
    r = SessionReport(Path("."), res, "")
    assert "### Which part of the culprit" in markdown(r)
    page = html_report(r)
    assert "<h2>Which part of the culprit" in page and "<h2>Dependency or vLLM code</h2>" in page
    assert "<td>ServeError: x|y</td>" in page and "<td><code>A</code></td>" in page
    assert "|---|" not in page and "<details>" not in page
