"""The study sections of result.json: :data:`STUDY_SECTIONS`, the one list of study keys,
each naming where its :class:`~vllm_bisect.report.section.Section` (its document's model and
its render) lives, by dotted path in the study's own package. A study owns its section, as a
pytest plugin owns its part of the report; the report imports no study code: a section's
module is imported the first time a document under its key is validated or rendered (a
result.json without the key never loads it).

The report's study part: the sections before the offers (isolate, deps, knobs), the studies
offered (result.json's ``next_questions``), the endpoints' environments (report.env_section,
the bisect's own document), then the sections after them (explain). The studies only write
their documents (``report.render.write_section``)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_bisect.report.env_section import env_lines
from vllm_bisect.report.section import Section, SectionDoc, checked


@dataclass(frozen=True)
class SectionKind:
    """Where a study's section lives (``"package.module:NAME"``, NAME a :class:`Section`),
    and whether the report shows it after the offers and the endpoints' environments."""

    path: str
    after_endpoints: bool = False


STUDY_SECTIONS: dict[str, SectionKind] = {
    "isolate": SectionKind("vllm_bisect.isolate.report_section:ISOLATE"),
    "deps": SectionKind("vllm_bisect.isolate.report_section:DEPS"),
    "knobs": SectionKind("vllm_bisect.isolate.report_section:KNOBS"),
    "explain": SectionKind("vllm_bisect.explain.report_section:SECTION", after_endpoints=True),
}
STUDIES = tuple(STUDY_SECTIONS)   # result.json's study keys, in the report's order


@functools.cache
def _load(key: str) -> Section:
    module, _, name = STUDY_SECTIONS[key].path.partition(":")
    found: Section = getattr(importlib.import_module(module), name)
    if found.key != key:
        raise ValueError(f"{STUDY_SECTIONS[key].path} is the {found.key!r} section, "
                         f"registered as {key!r}")
    return found


def section(key: str) -> Section:
    """The section registered under ``key`` (its module imported now, once); ValueError
    naming the keys there are."""
    if key not in STUDY_SECTIONS:
        raise ValueError(f"no study section {key!r} (one of {', '.join(STUDIES)})")
    return _load(key)


def section_doc(key: str, doc: SectionDoc | Mapping[str, Any]) -> SectionDoc:
    """``doc`` validated as the document of the section ``key`` (see ``section.checked``)."""
    return checked(section(key), doc)


def _rendered(result: Mapping[str, Any], after_endpoints: bool) -> list[str]:
    return [line for key, kind in STUDY_SECTIONS.items()
            if kind.after_endpoints == after_endpoints and result.get(key)
            for line in section(key).render(section_doc(key, result[key]))]


def offer_lines(result: Mapping[str, Any]) -> list[str]:
    """The studies offered for the culprit (result.json's ``next_questions``, worked out by
    vllm_bisect.isolate.offers when the result was written), less those that have run."""
    offers = result.get("next_questions") or {}
    out = [f"- {line}" for study, line in offers.items() if study not in result]
    return ["", "Next questions:", *out] if out else []


def study_lines(result: Mapping[str, Any]) -> list[str]:
    """The report's study part of a session's result (the JSON document)."""
    out = _rendered(result, after_endpoints=False) + offer_lines(result)
    if result.get("endpoint_env"):   # the endpoints' environments (bisect/endpoint_doc.py)
        out += env_lines(result["endpoint_env"], result.get("good"))
    return out + _rendered(result, after_endpoints=True)
