"""Study sections are registered (key, model, render): write_section refuses a key no
section is registered under and a document that is not the section's, and writes a valid
one byte for byte as given (issue 43)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_bisect.isolate.report_section import IsolateDoc, KnobsDoc, knobs_lines
from vllm_bisect.report.render import write_section
from vllm_bisect.report.section import SectionDoc
from vllm_bisect.report.sections import STUDIES, STUDY_SECTIONS, section, section_doc, study_lines

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


def test_every_registered_study_resolves_to_its_own_section() -> None:
    """Each key's dotted path names a section of that key, in the study's own package."""
    assert STUDIES == ("isolate", "deps", "knobs", "explain")
    for key, kind in STUDY_SECTIONS.items():
        s = section(key)
        assert s.key == key and issubclass(s.model, SectionDoc)
        assert type(s).__module__.startswith("vllm_bisect.report.")  # (StudySection)
        assert s.model.__module__ == kind.path.partition(":")[0]
        assert not s.model.__module__.startswith("vllm_bisect.report")


def test_a_study_document_is_written_as_given(tmp_path: Path) -> None:
    """The model adds no key and moves none: result.json reads as before the models."""
    for key, doc in (("isolate", ISOLATE), ("knobs", KNOBS)):
        model = section(key).model.model_validate(doc)
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
    assert lines == section("isolate").render(section_doc("isolate", ISOLATE)) + knobs_lines(KNOBS)
    assert section("knobs").render(section_doc("knobs", KNOBS)) == knobs_lines(KNOBS)
    assert "| `A` | `2` | bad | **yes** |" in lines


LOADED = """
import json, sys
from pathlib import Path
from vllm_bisect.report.render import SessionReport, html_report, markdown
from vllm_bisect.report.result import BisectReport
doc = {"first_bad": "c" * 40, "candidates": ["c" * 40], "good": "a" * 40, "bad": "c" * 40,
       "n_commits": 1, "probed": [], **json.loads(sys.argv[1])}
r = SessionReport(Path("."), BisectReport.model_validate(doc), "")
markdown(r), html_report(r)
print(sorted(m for m in sys.modules if m.split(".")[1:2] in (["isolate"], ["explain"])))
"""


def _loaded(studies: dict[str, Any]) -> list[str]:
    """The study modules a fresh interpreter has loaded after rendering both reports of a
    result with ``studies``."""
    out = subprocess.run([sys.executable, "-c", LOADED, json.dumps(studies)],
                         capture_output=True, text=True, check=True).stdout
    return list(ast.literal_eval(out))


def test_a_study_section_is_imported_only_for_a_result_that_has_it() -> None:
    assert _loaded({}) == []
    assert _loaded({"knobs": KNOBS}) == ["vllm_bisect.isolate", "vllm_bisect.isolate.report_section"]


def test_the_result_model_holds_the_studies_as_written() -> None:
    """No study has a field of the result model: result.json's study keys are read into its
    ``studies`` and written back at the top level, each document as it was."""
    from vllm_bisect.report.result import BisectReport

    assert not set(STUDIES) & set(BisectReport.model_fields)
    doc = {"first_bad": None, "candidates": [], "good": "a" * 40, "bad": "b" * 40,
           "n_commits": 1, "probed": [], "knobs": KNOBS, "isolate": ISOLATE, "explain": None}
    res = BisectReport.model_validate(doc)
    assert res.studies == {"knobs": KNOBS, "isolate": ISOLATE}
    out = json.loads(res.model_dump_json())
    assert "studies" not in out and "explain" not in out
    assert (out["isolate"], out["knobs"]) == (ISOLATE, KNOBS)
    assert [k for k in out if k in STUDIES] == ["isolate", "knobs"]
    assert BisectReport.model_validate_json(res.model_dump_json()) == res
