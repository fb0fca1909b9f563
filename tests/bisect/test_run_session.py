"""A session is reported whole (issue 50 item 1): a run cut by a real Ctrl-C and resumed with
``vllm-bisect run --session S`` reports, row for row, what the same session run without
interruption reports: the same commits judged (the bad endpoint judged in the first call
too), the same phases, the "Environments" section, every call and every start of both calls,
``server_starts`` == the sum of ``starts_by_phase``. Through the CLI on a ``vllm-bisect sim
history`` repository (a planted 128-token cap: deterministic verdicts, so the two sessions
must judge the same commits)."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (args, r.stderr[-3000:])
    return r


def rows(session: Path) -> list[str]:
    """The report's section headings and table rows: each judged commit with its verdict
    (what was measured left out: it differs from one run to the next), then the symptoms
    at each."""
    out = []
    for ln in (session / "report.md").read_text().splitlines():
        cells = [c.strip() for c in ln.split("|")[1:-1]]
        if ln.startswith("#"):
            out.append(ln)
        elif re.match(r"^\| \d", ln):
            out.append(" | ".join((cells[0], cells[1], cells[-1]) if "`" in cells[1]
                                  else cells))
    return out


def interrupted(spec: Path, session: Path, cache: Path, err: Path,
                cmd: tuple[list[str], dict[str, str] | None] = (CLI, None)) -> None:
    """``vllm-bisect run`` stopped by SIGINT while the first search step's server starts
    (the bad endpoint already judged), as a Ctrl-C does. ``cmd``: the CLI and the environment
    it runs in (default: this interpreter's, this environment)."""
    with err.open("w") as f:
        p = subprocess.Popen([*cmd[0], "run", "--spec", str(spec), "--session", str(session),
                              "--cache-dir", str(cache)], stdout=subprocess.DEVNULL, stderr=f,
                             text=True, env=cmd[1])
        deadline = time.monotonic() + 600
        while p.poll() is None:
            text = err.read_text()
            step = text.find(" bisect ")
            # the step's server process spawned (journaled), not only its line printed: a
            # SIGINT between the line and the spawn cuts an attempt that started no server
            if step >= 0 and "starting server" in text[step:] \
                    and spawned(session) >= text.count("starting server"):
                break
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=120) == 130, err.read_text()[-3000:]


def spawned(session: Path) -> int:
    """How many server processes the session's journal holds (0 before it exists)."""
    try:
        con = sqlite3.connect(f"{(session / 'journal.sqlite').absolute().as_uri()}?mode=ro",
                              uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM servers").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def doc(session: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((session / "result.json").read_text())
    return out


def test_a_resumed_session_reports_what_an_uninterrupted_one_does(tmp_path: Path) -> None:
    made = cli("sim", "history", str(tmp_path / "h"), "--commits", "30", "--cap-at", "17")
    assert "spec written" in made.stdout + made.stderr
    spec = tmp_path / "h-spec.toml"
    whole = tmp_path / "whole"
    cli("run", "--spec", str(spec), "--session", str(whole), "--cache-dir",
        str(tmp_path / "c1"))
    cut, cache = tmp_path / "cut", tmp_path / "c2"
    interrupted(spec, cut, cache, tmp_path / "first.err")
    first = (tmp_path / "first.err").read_text()
    bad = doc(whole)["bad"]
    assert f"-> {bad[:12]} bad" in first   # the bad endpoint was judged in the first call
    again = cli("run", "--session", str(cut), "--cache-dir", str(cache))
    assert f"-> {bad[:12]} bad" not in again.stderr   # ... and not measured again

    assert rows(cut) == rows(whole)
    assert any(h.startswith("### Environments") for h in rows(cut)), rows(cut)
    a, b = doc(whole), doc(cut)
    assert [(p["commit"], p["verdict"]) for p in b["probed"]] == \
        [(p["commit"], p["verdict"]) for p in a["probed"]]
    assert bad in {p["commit"] for p in b["probed"]}
    for d in (a, b):
        assert d["server_starts"] == sum(d["starts_by_phase"].values())
    assert (a["calls"], b["calls"]) == (1, 2)
    # every start of both calls, each under the phase its progress line named (the bad
    # endpoint's: endpoints; the culprit's parent again: re-check)
    started = first.count("starting server") + again.stderr.count("starting server")
    assert b["server_starts"] == started, (b["starts_by_phase"], started)
    pa, pb = a["starts_by_phase"], b["starts_by_phase"]
    assert set(pa) == set(pb) == {"endpoints", "search", "re-check"}, (pa, pb)
    assert pa["endpoints"] == pb["endpoints"] == 1 and pa["re-check"] == pb["re-check"] == 2
    assert pb["search"] - pa["search"] in (0, 1)   # the step the Ctrl-C cut, started again
    md = (cut / "report.md").read_text()
    assert f"{started} server starts over 2 calls" in md, md
    # the effect rests on every run of the parent (the search's and its two re-checks, 2
    # requests each), not its last server's (issue 50: "2 vs 2 requests", 3 servers); a cap,
    # the same on every request, is its own evidence (item 3: it said "no CI")
    for session in (whole, cut):
        text = (session / "report.md").read_text()
        assert re.search(r"the same on every request: \d+ on each of the parent's 6 requests "
                         r"on 3 servers, 128 on each of the culprit's 2 requests", text), text
    assert doc(whole)["effects"][0]["text"] == doc(cut)["effects"][0]["text"]
    # the time of both calls: the cut one's up to its last verdict at least
    con = sqlite3.connect(cut / "journal.sqlite")
    runs = con.execute("SELECT started, seen FROM runs ORDER BY seq").fetchall()
    last = con.execute("SELECT MAX(created) FROM outcomes WHERE created < ?",
                       (runs[1][0],)).fetchone()[0]
    con.close()
    assert runs[0][1] >= last
    first_s, both_s = runs[0][1] - runs[0][0], sum(s - t for t, s in runs)
    assert first_s + 0.001 < b["wall_s"] <= both_s + 0.001   # the cut call's time in it
