"""The text triage reads for a request: the issue, and the regression form corrected in a
comment (the bot's ready-to-edit reply, pasted back by the issue's author or a trusted person).

The latest answer of each field wins: the comment's form follows the issue's text (the reader
takes the last copy of the form, field by field), and an answer the issue changed after that
comment was posted (the reporter edited the issue instead) follows the comment's form again.
"""

from __future__ import annotations

from vllm_bisect.triage.form import LABELS, Field, FormBody, split_form
from vllm_bisect.triage.form.fields import NO_RESPONSE, SHELL_FIELDS
from vllm_bisect.triage.form.split import Answer


def holds_form(text: str) -> bool:
    return split_form(text.splitlines()) is not None


def _section(a: Answer) -> str:
    if a.field is Field.SYMPTOMS:
        text = "\n".join(f"- [X] {label}" for label, _ in a.checked)
    elif a.text and a.field in SHELL_FIELDS:
        text = f"```shell\n{a.text}\n```"
    else:
        text = a.text
    return f"### {LABELS[a.field]}\n\n{text or NO_RESPONSE}\n"


def _shown(a: Answer) -> tuple[str, tuple[str, ...]]:
    return a.text, tuple(label for label, _ in a.checked)


def changed_since(now: FormBody | None, then: FormBody | None) -> list[Answer]:
    """The answers of ``now`` that differ from (or are missing in) ``then``."""
    if now is None:
        return []
    return [a for f, a in now.answers.items()
            if then is None or f not in then.answers or _shown(then.answers[f]) != _shown(a)]


def request_text(issue_body: str, comment_form: str = "", issue_then: str = "",
                 max_chars: int | None = None) -> str:
    """The issue's text, then the latest form of a comment (the command's own, when it holds
    one), then the answers the issue changed since that comment: oldest to newest. Within
    ``max_chars`` (what triage reads), the issue's text is cut first: the correction is kept."""
    parts = [issue_body.rstrip()]
    if comment_form and holds_form(comment_form):
        parts.append(comment_form.strip())
        newer = changed_since(split_form(issue_body.splitlines()),
                              split_form(issue_then.splitlines()))
        if newer:
            parts.append("\n".join(_section(a) for a in newer).strip())
    if len(parts) == 1:
        return issue_body
    if max_chars is not None:
        room = max_chars - sum(len(p) + 2 for p in parts[1:]) - 1
        parts[0] = parts[0][:max(0, room)]
    return "\n\n".join(p for p in parts if p) + "\n"
