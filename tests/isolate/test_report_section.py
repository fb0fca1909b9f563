"""The isolate, deps and knobs sections the study owns (isolate/report_section.py), rendered
through the report's registry (pure functions of the result JSON)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.isolate.report_section import DEPS, ISOLATE, KNOBS, deps_lines
from vllm_bisect.report.sections import section, study_lines

STUDIES: dict[str, Any] = {
    "isolate": {"culprit": "c" * 40, "parent": "p" * 40, "files": ["a.py", "b.py"],
                "minimal_files": ["b.py"], "file_tests": 2, "hunks": ["b.py @@ -1 +1 @@ x"],
                "minimal_hunks": ["b.py @@ -1 +1 @@ x"], "hunk_tests": 0,
                "revert_verdict": "good", "revert_reason": "ok", "revert_removes": True,
                "fresh_builds": 3, "trials": [{"label": "files a.py", "verdict": "skip",
                                               "reason": "ServeError: x|y", "commit": "s",
                                               "fresh": True}]},
    "deps": {"changes": ["tinydep ==1.0 -> ==1.4 (requirements/common.txt)"],
             "base_changes": ["CUDA_VERSION 12.8.1 -> 12.9.1 (docker/Dockerfile)"],
             "base_note": "not pip-installable", "strategy": "twolevel",
             "strategy_reason": "auto: itl is noisy",
             "parent_with_new_pins": "bad", "culprit_with_old_pins": "good",
             "conclusion": "dependency", "index_url": "http://127.0.0.1:1/simple",
             "packages": [{"name": "tinydep", "old": "==1.0", "new": "==1.4",
                           "base": "culprit", "first_bad_version": "1.3",
                           "candidates": ["1.3"], "note": "",
                           "tested": [{"version": "1.3", "verdict": "bad", "reason": "r"}]}]},
    "knobs": {"tables": [{"commit": "k" * 40, "baseline": "A=1", "baseline_verdict": "good",
                          "baseline_reason": "ok", "rows": [
                              {"knob": "A", "value": "2", "verdict": "bad", "reason": "r",
                               "flips": True}], "minimal": ["A=2"],
                          "all_changed_verdict": None}]},
}


def test_sections_render_every_study() -> None:
    result = {"first_bad": None, **STUDIES}
    text = "\n".join(study_lines(result))
    assert "**1 file**: `b.py`" in text and "removes the symptom" in text
    assert "ServeError: x\\|y" in text  # table cells escaped
    assert "conclusion: **dependency**" in text and "first bad version **1.3**" in text
    assert "- CUDA_VERSION 12.8.1 -> 12.9.1 (docker/Dockerfile)" in text
    assert "cannot be bisected: not pip-installable" in text
    assert "verdict policy: **twolevel** (auto: itl is noisy)" in text
    assert "| `A` | `2` | bad | **yes** |" in text and "`A=2`" in text
    assert text.index("### Which part") < text.index("### Dependency") \
        < text.index("### Which knob")
    assert study_lines({"first_bad": None}) == []


def test_the_report_finds_the_studys_own_sections() -> None:
    assert section("isolate") is ISOLATE and section("deps") is DEPS
    assert section("knobs") is KNOBS
    assert DEPS.render(DEPS.model.model_validate(STUDIES["deps"])) == deps_lines(STUDIES["deps"])
