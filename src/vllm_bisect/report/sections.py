"""Report sections added after the culprit's studies: each a function of the result
document, Markdown lines out (report.md as is; report.html through the studies' Markdown
rendering). Today: the endpoints' environments (report.env_section) and ``explain``
(report.explain_section; the study, vllm_bisect.explain, only writes its document into
result.json)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.report.env_section import env_lines
from vllm_bisect.report.explain_section import explain_lines


def extra_sections(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if result.get("endpoint_env"):   # the endpoints' environments (bisect/endpoint_doc.py)
        out += env_lines(result["endpoint_env"], result.get("good"))
    if result.get("explain"):
        out += explain_lines(result["explain"])
    return out
