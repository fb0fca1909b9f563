"""What a bisect costs, phase by phase, for the whole session (issue 40), through the real
CLI on a generated history served by the simulator: every start counted by phase beside plain
bisect's figure; without rest checks a clean step pays no fresh server to verify (the
confirmation's servers are the verification); a session resumed after kill -9 counts every
start and every judged commit of both calls."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.report.result import plain_starts


def run_cmd(spec: Path, session: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--session",
            str(session), "--cache-dir", str(cache)]


def run_clean_step(tmp: Path, rest_check: bool = True
                   ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path, str]:
    """``vllm-bisect run`` over :func:`clean_step`'s history: the call, its result.json, the
    session and the planted commit."""
    spec, planted = clean_step(tmp, rest_check)
    session = tmp / "sess"
    r = subprocess.run(run_cmd(spec, session, tmp / "cache"), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads((session / "result.json").read_text()), session, planted


def clean_step(tmp: Path, rest_check: bool = True) -> tuple[Path, str]:
    h = history(tmp, n_commits=24, slow_at=13, slow_factor=2.0, noise_cv=0.02,
                server_cv=0.02, step_ms=5.0)
    spec = write_spec(tmp / "s.toml", make_spec(h, verdict={"symptom": "itl",
                                                            "strategy": "twolevel",
                                                            "rest_check": rest_check},
                                                probe={"requests": 2}))
    return spec, h.planted["itl"]


def test_every_start_is_counted_by_phase_beside_plain_bisects(tmp_path: Path) -> None:
    r, doc, session, planted = run_clean_step(tmp_path)
    assert doc["first_bad"] == planted
    phases = doc["starts_by_phase"]
    started = r.stderr.count("starting server")
    assert sum(phases.values()) == started == doc["server_starts"]   # verification included
    assert phases["verify"] == doc["verify_server_starts"] == 2, phases  # the rest checks'
    assert doc["verification"]["source"] == "fresh"
    # verify_samples (10 by default) honoured by the two-level default, so the effect has its
    # interval by default (issue 50: "2 requests each", no CI)
    v = doc["verification"]
    assert v["samples"] == 10 and len(v["culprit_per_request"]["itl_ms"]) >= 10
    assert len(v["parent_per_request"]["itl_ms"]) >= 10
    plain = plain_starts(doc["n_commits"])
    assert doc["plain_bisect_starts"] == plain
    md = (session / "report.md").read_text()
    assert f"plain git bisect run: ~{plain}, one a step" in md, md
    # the effect's interval and what it rests on, in result.json, report.md and the terminal
    # (issue 50 item 3): one fresh server a side, 10 requests each, so the interval counts
    # the server level estimated from every server of the session (not 10 + 10 samples)
    (e, *_) = doc["effects"]
    assert e["metric"] == "ITL" and e["interval"] == "servers" and e["ci_low"] is not None
    assert (e["servers_before"], e["servers_after"]) == (1, 1) and e["requests_before"] >= 10
    assert re.search(r"\], 95% t interval over the servers' means: \d+ (vs \d+ )?requests( a "
                     r"side)? on one server each; server level ~[\d.]+%, request noise "
                     r"~[\d.]+%, from \d+ servers of \d+ commits\); re-measured on fresh "
                     r"servers \(verify_samples = 10\)", e["text"]), e
    assert f"Effect at the first bad commit vs its parent: {e['text']}" in md, md
    assert "effect: ITL" in r.stdout, r.stdout
    # the rest notes are one short line each, with the session's own spec path
    # (the line is measured without that path: pytest's own tmp path's length varies)
    for c in doc.get("culprits") or []:
        for note in c["note"].splitlines():
            assert len(note.replace(str(session), "SESSION")) < 400, note
    assert "SESSION/spec.toml" not in md


def test_without_rest_checks_a_clean_step_pays_no_fresh_server_to_verify(
        tmp_path: Path) -> None:
    r, doc, session, planted = run_clean_step(tmp_path, rest_check=False)
    assert "effect: ITL" in r.stdout, r.stdout
    assert doc["first_bad"] == planted
    assert doc["starts_by_phase"].get("verify", 0) == 0 == doc["verify_server_starts"]
    assert doc["verification"]["source"] == "confirmation"
    assert doc["verification"]["confirmed"]
    md = (session / "report.md").read_text()
    assert "Verified at the whole-bisect bound by the search's confirmation" in md, md
    # the effect's interval from the final pair's servers (before: "no CI from 2 requests a
    # side"): over the servers' means, with the noise of every server of the session
    (e, *_) = doc["effects"]
    assert e["metric"] == "ITL" and e["source"].startswith("the final pair's servers"), e
    assert e["interval"] == "servers" and e["ci_low"] is not None, e
    assert "95% t interval over the servers' means" in e["text"], e
    assert f"Effect at the first bad commit vs its parent: {e['text']}" in md, md

def test_a_resumed_session_counts_every_start_and_commit_of_both_calls(tmp_path: Path) -> None:
    """kill -9 in the middle of the search, then the same command: result.json counts the
    first call's starts too (before: only the resumed call's), and both endpoints' rows."""
    spec, planted = clean_step(tmp_path)
    session, cache = tmp_path / "sess", tmp_path / "cache"
    log = tmp_path / "first.log"
    with log.open("w") as err:
        p = subprocess.Popen(run_cmd(spec, session, cache), stdout=subprocess.DEVNULL,
                             stderr=err, text=True, start_new_session=True)
        deadline = time.monotonic() + 600
        while log.read_text().count("probing") < 4 and p.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    first = log.read_text().count("starting server")
    assert first >= 4
    r = subprocess.run(run_cmd(spec, session, cache), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == planted
    total = first + r.stderr.count("starting server")
    assert doc["server_starts"] == total
    assert sum(doc["starts_by_phase"].values()) == total
    assert doc["calls"] == 2
    judged = {p["commit"] for p in doc["probed"]}
    assert {doc["good"], doc["bad"], planted} <= judged
    md = (session / "report.md").read_text()
    assert f"{total} server starts over 2 calls" in md, md


def test_an_attempt_interrupted_before_its_server_is_not_counted_twice(tmp_path: Path) -> None:
    """Found on an H100 (docs/validation.md (o)): Ctrl-C while a commit's start was journaled
    but its server not yet running (its build ran); the resumed call started that commit's
    server itself. The interrupted attempt counted too (a server of its commit had started
    after it: the next call's), so 3 server processes were reported as 4 starts. Every start
    counted is one server process of the session."""
    import sqlite3
    spec, planted = clean_step(tmp_path)
    session, cache = tmp_path / "sess", tmp_path / "cache"
    journal = session / "journal.sqlite"
    p = subprocess.Popen(run_cmd(spec, session, cache), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    pending = None
    while pending is None and p.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
        if not journal.exists():
            continue
        try:
            with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as con:
                done = con.execute("SELECT COUNT(*) FROM starts WHERE done = 1").fetchone()[0]
                pending = con.execute(
                    "SELECT commit_sha FROM starts WHERE done = 0 AND NOT EXISTS (SELECT 1 "
                    "FROM servers WHERE servers.commit_sha = starts.commit_sha AND "
                    "servers.started >= starts.created)").fetchone() if done >= 3 else None
        except sqlite3.Error:
            pending = None
    assert pending is not None, "the run ended before an attempt could be interrupted"
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(timeout=120) != 0
    r = subprocess.run(run_cmd(spec, session, cache), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == planted
    with sqlite3.connect(journal) as con:
        processes = con.execute("SELECT COUNT(*) FROM servers").fetchone()[0]
    assert sum(doc["starts_by_phase"].values()) == processes, (doc["starts_by_phase"],
                                                               processes)
    assert doc["calls"] == 2
