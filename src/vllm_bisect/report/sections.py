"""Report sections that studies add after the culprit's studies: each a function of the
result document, Markdown lines out (report.md as is; report.html through the studies'
Markdown rendering). Today: ``explain`` (rendered by report.explain_section; the study,
vllm_bisect.explain, only writes its document into result.json)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.report.explain_section import explain_lines


def extra_sections(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if result.get("explain"):
        out += explain_lines(result["explain"])
    return out
