"""The terminal's result table, from the one result model (no printing here)."""

from __future__ import annotations

from rich.table import Table

from vllm_bisect.models import Verdict
from vllm_bisect.report.result import BisectReport
from vllm_bisect.report.view import fmt, tokens
from vllm_bisect.text import short_subject

SUBJECT_WIDTH = 48   # a longer subject is cut before its (#PR), never inside it
STYLE = {Verdict.GOOD: "green", Verdict.BAD: "red", Verdict.SKIP: "yellow"}


def verdict_labels(search: str) -> dict[str, str]:
    """A fix search runs on old/new terms: good = has the problem, bad = fixed."""
    return {"good": "has the problem", "bad": "fixed"} if search == "fix" else {}


def result_table(result: BisectReport) -> Table:
    table = Table(title="vllm-bisect", show_lines=False)
    for col in ("#", "commit", "subject", "out tok", "ITL ms", "chunk ITL", "tok/chunk",
                "accept", "verdict"):
        left = col in ("commit", "subject", "verdict")
        table.add_column(col, justify="left" if left else "right", no_wrap=True,
                         overflow="ellipsis", max_width=SUBJECT_WIDTH if col == "subject" else None)
    labels = verdict_labels(result.search)
    first = "fixed" if result.search == "fix" else "bad"
    for p in result.judged():
        m = p.measurement
        mark = f" <- first {first}" if p.commit == result.first_bad else ""
        table.add_row("?" if p.index is None else str(p.index), p.commit[:12],
                      short_subject(p.subject or "", SUBJECT_WIDTH), tokens(m),
                      fmt(m.itl_ms if m else None), fmt(m.chunk_itl_ms if m else None),
                      fmt(m.tokens_per_chunk if m else None),
                      fmt(m.acceptance_length if m else None),
                      f"[{STYLE[p.verdict]}]{labels.get(p.verdict.value, p.verdict.value)}[/]"
                      f"{p.moved(labels)}{mark}")
    return table
