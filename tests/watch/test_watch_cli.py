"""`vllm-bisect watch` through the real CLI: a seeded series, and the whole loop on the
simulator (a series with one planted step -> watch -> the bisect of its window names the
planted commit, in one command); a series made from the simulator's own bisect session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers import history, make_spec, write_spec
from tests.watch.test_series import bench_dir


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=900)


def test_seeded_series_table_json_and_report(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    itl = 10 * (1 + 0.02 * rng.standard_normal(50))
    itl[30:] *= 1.06
    tput = 900 * (1 + 0.02 * rng.standard_normal(50))
    with (tmp_path / "s.jsonl").open("w") as fh:
        for i in range(50):
            fh.write(json.dumps({"commit": f"n{i}", "mean_itl_ms": itl[i],
                                 "output_throughput": tput[i]}) + "\n")
    r = cli("watch", "s.jsonl", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rep = [c for c in doc["change_points"] if c["reported"]]
    assert [c["metric"] for c in rep] == ["mean_itl_ms"]          # pure-noise metric: quiet
    c = rep[0]
    assert c["direction"] == "regression" and 0.04 < c["change"] < 0.08
    idx = {f"n{i}": i for i in range(50)}
    assert idx[c["last_before"]] < 30 <= idx[c["first_after"]]
    # no base spec: no window spec (it would serve no real model from no checkout), said so
    assert c["spec"] is None and "--spec BASE.toml" in doc["spec_note"]
    assert not list((tmp_path / "watch").glob("*.toml"))
    assert (tmp_path / "watch" / "watch.html").read_text().count("<svg") == 1
    md = (tmp_path / "watch" / "watch.md").read_text()
    assert "mean_itl_ms" in md and "regression" in md
    plain = cli("watch", "s.jsonl", cwd=tmp_path)
    assert plain.returncode == 0 and "mean_itl_ms" in plain.stdout and "report" in plain.stdout
    assert "vllm-bisect run --spec" not in plain.stdout   # no command that cannot run
    assert "no bisect specs written" in " ".join(plain.stdout.split())


def test_two_steps_a_recovery_and_noise_through_the_cli(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    n = 80
    two = 10 * (1 + 0.02 * rng.standard_normal(n))
    two[25:] *= 1.08
    two[55:] *= 1.08
    back = 10 * (1 + 0.02 * rng.standard_normal(n))
    back[30:50] *= 1.10
    noise = 10 * (1 + 0.02 * rng.standard_normal(n))
    lines = [json.dumps({"commit": f"n{i}", "time": f"2026-11-01T00:{i:02d}:00",
                         "two_itl_ms": two[i], "back_itl_ms": back[i], "noise_itl_ms": noise[i]})
             for i in range(n)]
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    r = cli("watch", "s.jsonl", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = [c for c in json.loads(r.stdout)["change_points"] if c["reported"]]

    def windows(metric: str) -> list[tuple[int, int, str]]:
        return [(int(c["last_before"][1:]), int(c["first_after"][1:]), c["direction"])
                for c in rep if c["metric"] == metric]

    two_w = windows("two_itl_ms")
    assert len(two_w) == 2 and all(d == "regression" for _, _, d in two_w)
    assert two_w[0][0] < 25 <= two_w[0][1] and two_w[1][0] < 55 <= two_w[1][1]
    back_w = windows("back_itl_ms")
    assert [d for _, _, d in back_w] == ["regression", "improvement"]
    assert back_w[0][0] < 30 <= back_w[0][1] and back_w[1][0] < 50 <= back_w[1][1]
    assert windows("noise_itl_ms") == []


def test_an_improvement_is_a_fix_search(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=39)
    rng = np.random.default_rng(8)
    itl = 10 * (1 + 0.02 * rng.standard_normal(40))
    itl[22:] /= 1.10
    (tmp_path / "s.jsonl").write_text("".join(json.dumps({"commit": h.shas[i], "itl_ms": v})
                                              + "\n" for i, v in enumerate(itl)))
    base = write_spec(tmp_path / "base.toml", make_spec(h))
    r = cli("watch", "s.jsonl", "--spec", str(base), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    c = next(c for c in doc["change_points"] if c["reported"]
             and h.shas.index(c["last_before"]) < 22 <= h.shas.index(c["first_after"]))
    assert c["direction"] == "improvement" and doc["spec_note"] is None
    assert 'search = "fix"' in Path(c["spec"]).read_text()


def test_the_window_column_counts_its_commits(tmp_path: Path) -> None:
    # nightlies every 4 commits: a step between two adjacent nightlies has no series point
    # inside its window ("in window 0" hid that) but 4 commits to bisect
    h = history(tmp_path, n_commits=40)
    nightly = list(range(0, 41, 4))
    itl = [4.0 * (1.5 if i >= 22 else 1.0) for i in nightly]
    results = bench_dir(tmp_path, [h.shas[i] for i in nightly], itl)
    r = cli("watch", str(results), "--metric", "mean_itl_ms", "--repo", str(h.path), "--json",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    c = next(c for c in json.loads(r.stdout)["change_points"] if c["reported"])
    assert (c["last_before"], c["first_after"]) == (h.shas[20], h.shas[24])
    assert c["points_in_window"] == 0 and c["commits_in_window"] == 4
    plain = cli("watch", str(results), "--metric", "mean_itl_ms", "--repo", str(h.path),
                cwd=tmp_path)
    assert "points between" in plain.stdout and "commits" in plain.stdout
    row = next(ln for ln in plain.stdout.splitlines() if h.shas[20][:12] in ln)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[4:6] == ["0", "4"], cells


def test_bisect_without_a_spec_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "s.csv").write_text("commit,itl_ms\n" + "".join(f"c{i},{i}\n" for i in range(5)))
    r = cli("watch", "s.csv", "--bisect", cwd=tmp_path)
    assert r.returncode == 2 and "--bisect needs a base spec" in r.stderr
    assert "Traceback" not in r.stderr


def test_series_to_culprit_in_one_command(tmp_path: Path) -> None:
    # nightlies of a synthetic vLLM history every 2 commits; the planted slowdown (1.5x
    # ITL) at commit 13 shows in the series between two nightlies
    h = history(tmp_path, n_commits=24, slow_at=13, slow_factor=1.5, step_ms=4.0,
                noise_cv=0.02)
    nightly = list(range(0, 25, 2))
    rng = np.random.default_rng(1)
    itl = [4.0 * (1.5 if i >= 13 else 1.0) * (1 + 0.02 * rng.standard_normal()) for i in nightly]
    results = bench_dir(tmp_path, [h.shas[i] for i in nightly], itl)
    base = write_spec(tmp_path / "base.toml", make_spec(
        h, verdict={"symptom": "itl", "itl_factor": 1.2},
        probe={"max_tokens": 48, "requests": 1, "warmup": 0}))
    r = cli("watch", str(results), "--metric", "mean_itl_ms", "--spec", str(base), "--bisect",
            "--json", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    rep = [c for c in doc["change_points"] if c["reported"]]
    assert (len(rep) == 1 and rep[0]["last_before"] == h.shas[12]) or \
        h.shas.index(rep[0]["last_before"]) < 13 <= h.shas.index(rep[0]["first_after"])
    assert rep[0]["bisect"]["culprit"] == h.planted["itl"] == h.shas[13]
    assert "culprit" in rep[0]["bisect"]["note"]
    assert h.planted["itl"][:12] in (tmp_path / "watch" / "watch.md").read_text()


def test_a_series_made_from_a_session(tmp_path: Path) -> None:
    # the simulator's own bisect results (a session's judged commits) as a series. A request
    # spans ~0.5 s (10 ms steps, 160 tokens): at 4 ms and 48 tokens it spanned ~60 ms, and a
    # server that waited that long for a core (8 workers on 2 cores; or frozen 60 ms of every
    # 200 ms) doubled a good commit's ITL, and the 6-point series showed no change point
    h = history(tmp_path, n_commits=16, slow_at=9, slow_factor=3.0, step_ms=10.0)
    spec = write_spec(tmp_path / "spec.toml", make_spec(
        h, verdict={"symptom": "itl", "itl_factor": 1.5, "strategy": "threshold",
                    "verify_samples": 0},
        probe={"max_tokens": 160, "requests": 2, "warmup": 0}))
    session = tmp_path / "session"
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir",
            str(tmp_path / "cache"), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = cli("watch", str(session), "--metric", "itl_ms", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = [c for c in json.loads(r.stdout)["change_points"] if c["reported"]]
    assert len(rep) == 1
    assert h.shas.index(rep[0]["last_before"]) < 9 <= h.shas.index(rep[0]["first_after"])
    assert rep[0]["change"] > 1.0
    # the session's own repository counts the window's commits (issue 50: "commits ?")
    assert rep[0]["commits_in_window"] == h.shas.index(rep[0]["first_after"]) - \
        h.shas.index(rep[0]["last_before"])
