"""Study sections are registered (key, model, render): write_section refuses a key no
section is registered under and a document that is not the section's, and writes a valid
one byte for byte as given (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_bisect.report.isolate_section import knobs_lines, section_lines
from vllm_bisect.report.render import write_section
from vllm_bisect.report.result import STUDIES
from vllm_bisect.report.section_docs import IsolateDoc, KnobsDoc
from vllm_bisect.report.sections import SECTIONS, section_doc, study_lines

ISOLATE: dict[str, Any] = {
    "culprit": "c" * 40, "parent": "p" * 40, "files": ["a.py", "b.py"], "python_only": True,
    "minimal_files": ["b.py"], "file_tests": 2, "hunks": ["b.py @@ -1 +1 @@ x"],
    "minimal_hunks": [], "hunk_tests": 0, "tests": 3, "revert_verdict": "good",
    "revert_reason": "ok", "revert_removes": None, "fresh_builds": 3,
    "trials": [{"label": "files a.py", "verdict": "skip", "reason": "r", "commit": "s",
                "fresh": True}], "strategy": "threshold", "strategy_reason": "the spec's"}
KNOBS: dict[str, Any] = {
    "knobs": [{"name": "A", "values": ["1", "2"], "kind": "arg"}],
    "tables": [{"commit": "k" * 40, "baseline": "A=1", "baseline_verdict": "good",
                "baseline_reason": "ok", "rows": [{"knob": "A", "value": "2", "verdict": "bad",
                                                   "reason": "r", "flips": True}],
                "all_changed_verdict": None, "minimal": ["A=2"], "combo_tests": 0,
                "flipping": ["A=2"]}],
    "settled_on": {"good": "g" * 40, "bad": "b" * 40}, "fresh_builds": 2}


def test_every_study_of_result_json_is_registered() -> None:
    assert tuple(SECTIONS) == STUDIES
    assert all(s.key == k for k, s in SECTIONS.items())


def test_a_study_document_is_written_as_given(tmp_path: Path) -> None:
    """The model adds no key and moves none: result.json reads as before the models."""
    for key, doc in (("isolate", ISOLATE), ("knobs", KNOBS)):
        model = SECTIONS[key].model.model_validate(doc)
        write_section(tmp_path, key, model)
        assert (tmp_path / f"{key}.json").read_text() == json.dumps(doc, indent=2)


def test_an_unregistered_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no study section 'profile' \(one of isolate, deps"):
        write_section(tmp_path, "profile", KnobsDoc.model_validate(KNOBS))
    assert not list(tmp_path.iterdir())


def test_an_invalid_document_is_refused_naming_the_field(tmp_path: Path) -> None:
    bad = {**ISOLATE, "file_tests": "two"}
    del bad["files"]
    with pytest.raises(ValueError, match=r"the 'isolate' section is not a valid IsolateDoc: "
                                         r"files: Field required; file_tests: Input should be"):
        write_section(tmp_path, "isolate", bad)
    assert not list(tmp_path.iterdir())


def test_another_sections_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the 'knobs' section takes a KnobsDoc, not a "
                                         "IsolateDoc"):
        write_section(tmp_path, "knobs", IsolateDoc.model_validate(ISOLATE))
    assert not list(tmp_path.iterdir())


def test_the_report_renders_each_section_through_its_render() -> None:
    result = {"first_bad": None, "isolate": ISOLATE, "knobs": KNOBS}
    lines = study_lines(result)
    assert lines == section_lines(result)
    assert SECTIONS["knobs"].render(section_doc("knobs", KNOBS)) == knobs_lines(KNOBS)
    assert "| `A` | `2` | bad | **yes** |" in lines
