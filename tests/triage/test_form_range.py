"""A range read exactly is still only what the reporter believed: the endpoint check proves
it before any search (issue 44). A form-filed report whose "first bad" is in fact good is
refused with the numbers measured at both ends; the corrected form finds the culprit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from tests.triage.test_form import FORMS


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=600)


def filed(tmp_path: Path, good: str, bad: str) -> Path:
    """The #9527 form report (an ITL regression) with these two ends."""
    body = (FORMS / "vllm-09527-attention-time-060-063-opt125m" / "report.md").read_text()
    report = tmp_path / f"report-{bad[:7]}.md"
    report.write_text(body.replace("\n0.6.0\n", f"\n{good}\n").replace("\n0.6.3\n", f"\n{bad}\n"))
    return report


def test_a_wrong_range_from_the_form_is_refused_with_the_measured_numbers(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, slow_at=4)   # commits 4.. decode 7x slower
    spec = write_spec(tmp_path / "spec.toml", make_spec(h, verdict={
        "symptom": "itl", "strategy": "threshold", "itl_factor": 2.0}))
    report = filed(tmp_path, h.good[:10], h.shas[3][:10])   # the reporter's "first bad" is good
    r = cli("triage", str(report), "--repo", str(h.path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rng = doc["spec"]["range"]
    assert (rng["good"], rng["bad"], doc["spec"]["verdict"]["symptom"]) == (h.good, h.shas[3], "itl")
    assert {x["what"]: x["source"] for x in doc["read"]}["range.bad (bad)"] == "read"
    run = cli("run", "--spec", str(spec), "--good", rng["good"], "--bad", rng["bad"],
              "--session", str(tmp_path / "s1"), "--cache-dir", str(tmp_path / "cache"))
    assert run.returncode == 3, run.stdout + run.stderr
    err = " ".join(run.stderr.split())
    m = re.search(rf"did not reproduce: bad endpoint {h.shas[3][:12]} judged good \(expected "
                  r"bad\): ITL (?P<itl>[\d.]+) ms <= (?P<limit>[\d.]+) ms", err)
    assert m, err
    # the good end was measured first: its ITL, shown, sizes the limit (itl_factor 2)
    ref = re.search(rf"-> {h.good[:12]} good: ITL (?P<itl>[\d.]+) ms <= (?P<limit>[\d.]+) ms",
                    run.stdout + run.stderr)
    assert ref and ref["limit"] == m["limit"], run.stdout + run.stderr
    assert abs(float(m["limit"]) - 2.0 * float(ref["itl"])) <= 0.02
    assert "first bad commit" not in run.stdout
    # the same form with the right "first bad": the search runs and blames the planted commit
    report = filed(tmp_path, h.good[:10], h.bad[:10])
    rng = json.loads(cli("triage", str(report), "--repo", str(h.path), "--json").stdout)["spec"]["range"]
    run = cli("run", "--spec", str(spec), "--good", rng["good"], "--bad", rng["bad"],
              "--session", str(tmp_path / "s2"), "--cache-dir", str(tmp_path / "cache"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"first bad commit: {h.planted['itl']}" in run.stdout
