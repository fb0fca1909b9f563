"""Report sections that other packages add after the studies: the hook is one function of
the result document, Markdown lines out (report.md as is; report.html through the studies'
Markdown rendering). Today: ``explain`` (vllm_bisect.explain)."""

from __future__ import annotations

from typing import Any


def extra_sections(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if result.get("explain"):
        from vllm_bisect.explain.report import explain_lines

        out += explain_lines(result["explain"])
    return out
