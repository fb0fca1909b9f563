"""The model of the range (``strategy = "changepoint"``) through the real CLI on a generated
history served by the simulator: the culprit with its P in the terminal, report.md,
report.html and result.json; every start counted; a session killed with SIGKILL mid-run and
resumed measures again only what had no finished server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import history, make_spec, write_spec


def run_cmd(spec: Path, session: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--session",
            str(session), "--cache-dir", str(cache)]


def clean_step(tmp: Path) -> tuple[Path, str]:
    h = history(tmp, n_commits=24, slow_at=13, slow_factor=2.0, noise_cv=0.02,
                server_cv=0.02, step_ms=5.0)
    spec = write_spec(tmp / "s.toml", make_spec(h, verdict={"symptom": "itl", "strategy": "changepoint"},
                                                probe={"requests": 2}))
    return spec, h.planted["itl"]


def test_run_names_the_culprit_with_its_probability(tmp_path: Path) -> None:
    spec, planted = clean_step(tmp_path)
    session = tmp_path / "sess"
    r = subprocess.run(run_cmd(spec, session, tmp_path / "cache"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == planted
    assert doc["strategy_chosen"] == "changepoint"
    model = doc["model"]
    assert model["p"] >= 0.99 and doc["confidence"] == model["p"]
    # the step (a 2x engine step; the measured ITL also holds the server's fixed costs, and a
    # loaded machine stretches both sides: a ratio a little under 2) with its interval
    assert model["effect_lo"] < model["effect"] < model["effect_hi"], model
    assert 1.5 < model["effect"] < 2.5, model
    assert set(doc["starts_by_phase"]) <= {"endpoints", "search", "rest"}
    assert sum(doc["starts_by_phase"].values()) == r.stderr.count("starting server")
    line = f"Model of the range: P(first bad is {planted[:12]}) = {model['p']:.4f}"
    assert line in r.stdout, r.stdout[-3000:]
    assert line in (session / "report.md").read_text()
    html = (session / "report.html").read_text()
    assert "P(first bad commit), along the range" in html and "<rect" in html


def test_a_run_killed_mid_search_resumes_from_its_servers(tmp_path: Path) -> None:
    spec, planted = clean_step(tmp_path)
    session, cache = tmp_path / "sess", tmp_path / "cache"
    p = subprocess.Popen(run_cmd(spec, session, cache), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    journal = session / "journal.sqlite"
    deadline = time.monotonic() + 600
    import sqlite3
    servers_before = 0
    while time.monotonic() < deadline and p.poll() is None:
        if journal.exists():
            try:
                with sqlite3.connect(journal) as con:
                    servers_before = con.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]
            except sqlite3.Error:
                servers_before = 0
            if servers_before >= 3:      # both ends and one commit inside
                break
        time.sleep(0.05)
    assert p.poll() is None, "the run ended before it could be killed"
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    r = subprocess.run(run_cmd(spec, session, cache), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == planted
    # the servers journaled before the kill stay in the model: the ends are not run again as
    # ends (a rest check may still measure one as a sub-range's end: phase "rest")
    assert "starting server" in r.stderr
    assert doc["starts_by_phase"].get("endpoints") == 2, doc["starts_by_phase"]
    with sqlite3.connect(journal) as con:
        rows = con.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]
    assert rows >= servers_before


def test_a_run_killed_while_a_measured_server_shuts_down_keeps_its_measurement(
        tmp_path: Path) -> None:
    """Killed after a server's probe ended, while it was torn down (the simulator takes 4 s
    to exit, as real vLLM takes seconds): the resumed run takes that measurement from the
    journal and does not start the commit's server again."""
    import sqlite3
    spec, planted = clean_step(tmp_path)
    session, cache = tmp_path / "sess", tmp_path / "cache"
    env = {**os.environ, "VLLM_SIM_SHUTDOWN_S": "4"}
    p = subprocess.Popen(run_cmd(spec, session, cache), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    logs = session / "logs"
    deadline = time.monotonic() + 600
    shutting: list[Path] = []
    while time.monotonic() < deadline and p.poll() is None and not shutting:
        shutting = [f for f in logs.glob("serve-*.log") if "Shutting down" in f.read_text()] \
            if logs.is_dir() else []
        time.sleep(0.05)
    assert p.poll() is None and len(shutting) == 1, "no server was seen shutting down"
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    first = shutting[0].name.removeprefix("serve-").removesuffix(".log")
    journal = session / "journal.sqlite"
    with sqlite3.connect(journal) as con:
        assert con.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0] == 0
    r = subprocess.run(run_cmd(spec, session, cache), capture_output=True, text=True,
                       timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == planted
    with sqlite3.connect(journal) as con:
        judged = con.execute("SELECT COUNT(*) FROM outcomes WHERE commit_sha LIKE ?",
                             (first + "%",)).fetchone()[0]
    assert judged >= 1                    # the kept measurement, judged by the resumed call
    # the endpoint whose server was shutting down is not started again: two endpoint starts
    assert doc["starts_by_phase"].get("endpoints") == 2, doc["starts_by_phase"]
    # ... and its one endpoint server is the killed call's (a later server of that commit may
    # come from a rest check: its lone end in doubt on a loaded machine's noisier timings)
    with sqlite3.connect(journal) as con:
        starts = con.execute("SELECT COUNT(*) FROM starts WHERE commit_sha LIKE ? AND phase = ?",
                             (first + "%", "endpoints")).fetchone()[0]
        kept = con.execute("SELECT COUNT(*) FROM unrecorded").fetchone()[0]
    assert starts == 1, f"{first}: {starts} endpoint starts"
    assert kept == 0


def test_a_cache_the_two_level_policy_filled_is_read_on_its_scale(tmp_path: Path) -> None:
    """Found on an H100 (docs/validation.md (o)): a changepoint run whose result cache a
    two-level run had filled read the cached servers' samples (natural scale, ms) as logs and
    its own fresh servers' as ms: every fresh commit came out "good" beside the cached ends
    (a "step" of 230x) and the run named a wrong commit. The same cache now gives the planted
    commit and a step near the planted 2x."""
    h = history(tmp_path, n_commits=24, slow_at=13, slow_factor=2.0, noise_cv=0.02,
                server_cv=0.02, step_ms=5.0)
    cache = tmp_path / "cache"
    # (the model takes a cached server with the requests it wants, 3 or more: 6 leave room
    # for a loaded machine's noisier timings)
    common = dict(probe={"requests": 6})
    before = write_spec(tmp_path / "twolevel.toml", make_spec(
        h, verdict={"symptom": "itl", "strategy": "twolevel"}, **common))
    r = subprocess.run(run_cmd(before, tmp_path / "s1", cache), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    spec = write_spec(tmp_path / "cp.toml", make_spec(
        h, verdict={"symptom": "itl", "strategy": "changepoint"}, **common))
    r = subprocess.run(run_cmd(spec, tmp_path / "s2", cache), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "s2" / "result.json").read_text())
    assert any(p.get("from_cache") for p in doc["probed"]), "nothing came from the cache"
    assert doc["first_bad"] == h.planted["itl"], doc["model"]
    assert 1.5 < doc["model"]["effect"] < 2.5, doc["model"]
