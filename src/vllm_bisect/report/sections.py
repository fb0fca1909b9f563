"""The registered study sections of result.json (``SECTIONS``: key -> :class:`Section`,
each a key, its document's model and its render) and the report's study part rendered
from them: isolate, deps and knobs (report.isolate_section), the studies offered, the
endpoints' environments (report.env_section), then ``explain`` (report.explain_section).
The studies only write their documents (``report.render.write_section``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_bisect.report.env_section import env_lines
from vllm_bisect.report.explain_section import explain_lines
from vllm_bisect.report.isolate_section import deps_lines, isolate_lines, knobs_lines, offer_lines
from vllm_bisect.report.section import Section, SectionDoc, StudySection, checked
from vllm_bisect.report.section_docs import DepsDoc, ExplainDoc, IsolateDoc, KnobsDoc

SECTIONS: dict[str, Section] = {s.key: s for s in (
    StudySection("isolate", IsolateDoc, isolate_lines),
    StudySection("deps", DepsDoc, deps_lines),
    StudySection("knobs", KnobsDoc, knobs_lines),
    StudySection("explain", ExplainDoc, explain_lines),
)}
_BEFORE_OFFERS = ("isolate", "deps", "knobs")  # then the offers, the endpoints, explain


def section(key: str) -> Section:
    """The section registered under ``key``; ValueError naming the keys there are."""
    if key not in SECTIONS:
        raise ValueError(f"no study section {key!r} (one of {', '.join(SECTIONS)})")
    return SECTIONS[key]


def section_doc(key: str, doc: SectionDoc | Mapping[str, Any]) -> SectionDoc:
    """``doc`` validated as the document of the section ``key`` (see ``section.checked``)."""
    return checked(section(key), doc)


def _rendered(result: dict[str, Any], key: str) -> list[str]:
    if not result.get(key):
        return []
    return SECTIONS[key].render(section_doc(key, result[key]))


def study_lines(result: dict[str, Any]) -> list[str]:
    """The report's study part of a session's result (the JSON document)."""
    out = [line for key in _BEFORE_OFFERS for line in _rendered(result, key)]
    out += offer_lines(result)
    if result.get("endpoint_env"):   # the endpoints' environments (bisect/endpoint_doc.py)
        out += env_lines(result["endpoint_env"], result.get("good"))
    return out + _rendered(result, "explain")

