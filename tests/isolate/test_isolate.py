"""isolate on a 20-file culprit: the bisect, then ddmin over files and hunks, real builds
(command builder: compile + serve the checkout) and real simulator servers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import git
import pytest

from tests.isolate.helpers import bisect, command_spec
from vllm_bisect.isolate.adapter import StudyTrial
from vllm_bisect.isolate.studies import run_studies
from vllm_bisect.sim.synth import wide_culprit_history


def test_names_the_guilty_file_and_hunk_of_twenty(tmp_path: Path) -> None:
    w = wide_culprit_history(tmp_path / "vllm", n_files=20, before=1, after=1)
    session = bisect(command_spec(w.history), tmp_path)
    assert json.loads((session / "result.json").read_text())["first_bad"] == w.culprit
    assert "vllm-bisect isolate SESSION" in (session / "report.md").read_text()  # offered

    seen: list[StudyTrial] = []

    def interrupt(t: StudyTrial) -> None:  # Ctrl-C after the third subset built and journaled
        seen.append(t)
        if sum(x.fresh for x in seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_studies(session, tmp_path / "cache", deps=False, on_trial=interrupt)
    res = run_studies(session, tmp_path / "cache", deps=False)["isolate"]  # resumes
    assert res["fresh_builds"] + 3 == res["tests"]  # nothing journaled was built again
    assert res["minimal_files"] == [w.guilty_file]
    assert len(res["files"]) == 20
    assert res["file_tests"] <= math.ceil(math.log2(20)) + 4  # the bound: 9
    assert [h.split("@@ ")[-1] for h in res["minimal_hunks"]] == [w.guilty_hunk]
    assert len(res["hunks"]) == 2 and res["hunk_tests"] >= 1
    assert res["revert_removes"] is True
    # the helper-less import of vllm/__init__.py cannot serve: a skip, never a verdict
    assert any(t["verdict"] == "skip" and "ServeError" in t["reason"] for t in res["trials"])
    repo = git.Repo(w.history.path)
    for t in res["trials"]:  # every bad subset holds the guilty line, every good one lacks it
        guilty = w.guilty_hunk in repo.git.show(f"{t['commit']}:{w.guilty_file}")
        assert guilty == (t["verdict"] == "bad") or t["verdict"] == "skip", t

    report = (session / "report.md").read_text()
    assert "Which part of the culprit" in report and w.guilty_file in report
    assert "removes the symptom" in report
    assert json.loads((session / "result.json").read_text())["isolate"]["minimal_files"] == [
        w.guilty_file]

    again = run_studies(session, tmp_path / "cache", deps=False)["isolate"]
    assert again["fresh_builds"] == 0 and again["minimal_hunks"] == res["minimal_hunks"]
    print("file builds", res["file_tests"], "hunk builds", res["hunk_tests"],
          "fresh", res["fresh_builds"])


def test_noisy_slowdown_under_the_default_strategy(tmp_path: Path) -> None:
    # an ITL regression with 5% per-request and 5% per-server-start noise, 3x slower steps in
    # one hunk of one of 7 files; no strategy written: auto picks the two-level test, settled
    # (calibrated) on the culprit's parent and the culprit, the same policy `run` uses
    w = wide_culprit_history(tmp_path / "vllm", n_files=7, before=0, after=0, slowdown=3.0)
    spec = command_spec(w.history, verdict={"symptom": "itl", "itl_factor": 1.3},
                        probe={"max_tokens": 48})
    assert spec.verdict.strategy == "auto"
    res = run_studies(tmp_path / "session", tmp_path / "cache", deps=False, spec=spec,
                      culprit=w.culprit)["isolate"]
    assert res["strategy"] == "twolevel"
    assert res["minimal_files"] == [w.guilty_file]
    assert res["revert_removes"] is True
    judged = [t for t in res["trials"] if t["verdict"] != "skip"]
    assert judged and all(t["reason"].startswith("two-level") for t in judged)
    print("noisy: file builds", res["file_tests"], "fresh", res["fresh_builds"])
