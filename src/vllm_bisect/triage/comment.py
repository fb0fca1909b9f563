"""The bot's answer to a bare ``/bisect``: what triage read, from which line, what is unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_bisect.triage.parse import Triage


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:160]


def comment_markdown(t: Triage, compare: str | None = None, started: bool = True) -> str:
    """Markdown for an issue comment: the range and search kind, each value with the report
    line it came from, the warnings, and what the reporter still has to say."""
    fix = t.search.value == "fix"
    lines = ["## vllm-bisect: what I read from this issue", ""]
    if fix:
        lines.append("This reads as a **fix report**: I will look for the **first fixed commit** "
                     "(old = has the problem, new = fixed; `git bisect` terms inverted).")
    else:
        lines.append("This reads as a **regression report**: I will look for the **first bad "
                     "commit** (old = good, new = bad).")
    lines += ["", "| what | value | line | why |", "|---|---|---|---|"]
    for r in t.read:
        line = str(r.line) if r.line else "-"
        lines.append(f"| {_cell(r.what)} | `{_cell(r.value)}` | {line} | {_cell(r.why)} |")
    gpu = t.hardware.get("gpu")
    lines.append(f"| hardware | `{gpu or '?'}` TP={t.hardware.get('tensor_parallel', 1)} | - | "
                 f"{'named in the report' if gpu else 'not named'} |")
    if t.images:
        lines.append(f"| images | `{_cell(', '.join(t.images))}` | - | docker tags in the report |")
    if t.warnings:
        lines += ["", "**Warnings**", ""] + [f"- {w}" for w in t.warnings]
    if t.unknowns:
        lines += ["", "**Unknown** (reply `/bisect good=<ref> bad=<ref> [symptom=...] "
                  "[model=org/name]` to fill in)", ""] + [f"- {u}" for u in t.unknowns]
    if compare:
        lines += ["", "The report flips an environment variable between runs; an A/B at one "
                  "commit answers that without a bisect:", "", f"```\n{compare}\n```"]
    if started and t.good and t.bad:
        lines += ["", f"Starting: `{t.good[:12]}` ({t.old_term}) .. `{t.bad[:12]}` "
                  f"({t.new_term})."]
    return "\n".join(lines) + "\n"
