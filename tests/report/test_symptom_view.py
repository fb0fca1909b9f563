"""The symptoms table names a cause only from verdicts (issue 50 item 2): a screen column
(one measurement a commit, e.g. acceptance, or ITL in a bisect that followed a cap) flipping
elsewhere, or a single judged symptom, says nothing of one cause or separate ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.report.session_docs import judged, write_session
from vllm_bisect.report.result import JudgedCommit

ITL_SPEC = ('[serve]\nmodel = "m"\n\n[probe]\nmax_tokens = 160\nrequests = 2\n\n'
            '[verdict]\nsymptom = "itl"\n')
LENGTH_SPEC = ('[serve]\nmodel = "m"\n\n[probe]\nmax_tokens = 160\nrequests = 2\n\n'
               '[verdict]\nsymptom = "length"\n')


def report(session: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "report", str(session)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def symptoms_part(md: str) -> str:
    return md[md.index("Symptoms at each judged commit"):].split("\n\n###", 1)[0]


def accepting(p: JudgedCommit, acceptance: float) -> JudgedCommit:
    assert p.measurement is not None
    return p.model_copy(update={"measurement": p.measurement.model_copy(
        update={"acceptance_length": acceptance})})


def test_one_noisy_acceptance_sample_names_no_separate_cause(tmp_path: Path) -> None:
    # the report: ITL judged (two-level) at #17; one acceptance sample low at #16
    probed = [judged(0, "good", [160, 160], [3.3, 3.4]),
              accepting(judged(16, "good", [160, 160], [3.7, 3.8]), 2.6),
              judged(17, "bad", [160, 160], [4.9, 5.0]), judged(30, "bad", [160, 160], [5.1, 5.2])]
    md = report(write_session(tmp_path / "s", probed, 17, 30, ITL_SPEC,
                              strategy_chosen="twolevel"))
    part = symptoms_part(md)
    assert "- `itl` flips at commit #17" in part, part
    assert "`acceptance` flips between #0 and #16 (a screen, one measurement a commit: not a " \
           "verdict)" in part, part
    assert "cause" not in part, part


def test_a_single_judged_symptom_names_no_root_cause(tmp_path: Path) -> None:
    # a cap followed, the good endpoint never run (lazy): the ITL screen has no reference
    probed = [judged(30, "bad", [128, 128], [5.7, 5.8]), judged(15, "good", [160, 160], [3.3, 3.4]),
              judged(16, "good", [160, 160], [3.35, 3.4]), judged(17, "bad", [128, 128], [5.7, 5.8])]
    md = report(write_session(tmp_path / "s", probed, 17, 30, LENGTH_SPEC,
                              strategy_chosen="threshold"))
    part = symptoms_part(md)
    assert "- `length` flips at commit #17" in part, part
    assert "| 17 | yes | - |" in part, part
    assert "cause" not in part, part
