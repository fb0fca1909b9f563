"""Culprit verification and the correctness symptom, over real generated histories."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.models import Verdict
from vllm_bisect.report.render import SessionReport, markdown, write_reports
from vllm_bisect.report.result import BisectReport, VerificationDoc


def test_culprit_and_parent_are_re_measured_and_reported(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12, cap_at=7)
    spec = make_spec(h, verdict={"symptom": "length", "verify_samples": 6})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["length"]
    v = r.verification
    assert v is not None and v.confirmed
    assert v.parent == h.shas[6]  # the commit just before the culprit was judged good
    assert v.culprit_measurement is not None and len(v.culprit_measurement.requests) == 6
    assert v.parent_measurement is not None and len(v.parent_measurement.requests) == 6
    session = tmp_path / "session"
    BisectReport.of(r).write(session / "result.json")
    write_reports(session)
    md = (session / "report.md").read_text()
    assert "Verified: re-measured on fresh servers (6 requests each)" in md
    assert ("the same on every request: 160 on each of the parent's 6 requests, 128 on each "
            "of the culprit's 6 requests; no spread, so no interval to give); re-measured on "
            "fresh servers (verify_samples = 6)") in md, md
    # resumed: the verification is in the journal, not measured again
    con = sqlite3.connect(session / "journal.sqlite")
    assert con.execute("SELECT value FROM meta WHERE key = 'verification'").fetchone()
    con.close()
    again = run_driver(spec, tmp_path)
    assert again.server_starts == 0 and again.verification == v


def test_an_unconfirmed_culprit_is_said_so() -> None:
    v = VerificationDoc(culprit="a" * 40, parent="b" * 40, samples=10, confirmed=False,
                        culprit_verdict=Verdict.GOOD, culprit_reason="all outputs >= 256 tokens",
                        parent_verdict=Verdict.GOOD, parent_reason="all outputs >= 256 tokens")
    res = BisectReport(first_bad="a" * 40, candidates=["a" * 40], good="b" * 40, bad="a" * 40,
                       n_commits=1, probed=[], verification=v)
    md = markdown(SessionReport(Path("."), res, ""))
    (line,) = [ln for ln in md.splitlines() if "verified" in ln.lower()]
    assert line.startswith("**Not verified**") and "culprit judged good" in line
    assert "flaky" in line


def test_correctness_symptom_finds_the_numerics_change(tmp_path: Path) -> None:
    # from commit 9 the greedy text differs after 40 tokens; lengths and speed do not change
    h = history(tmp_path, n_commits=16, wrong_output_at=9)
    spec = make_spec(h, probe={"max_tokens": 80, "requests": 2},
                     verdict={"symptom": "correctness", "verify_samples": 3})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["correctness"]
    bad = next(o for o in r.probed if o.commit == h.bad)
    assert bad.verdict is Verdict.BAD and "greedy output differs" in bad.reason
    assert r.verification is not None and r.verification.confirmed
