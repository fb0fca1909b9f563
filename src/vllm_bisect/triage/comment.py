"""The bot's first reply on a report: what triage read, each value marked ``read`` (a field
of the regression form, taken as written) or ``guessed`` (free text, by rules), with the
sentence it came from; what is unknown; and the reading in the form's shape, ready to edit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_bisect.triage.form.render import form_body
from vllm_bisect.triage.values import Source

if TYPE_CHECKING:
    from vllm_bisect.triage.values import Triage

FREE_TEXT = ("This issue is free text, so every value below is **guessed** by rules (on "
             "reports they had not seen, they read the good/bad pair right in 46% to 67%): "
             "please check each one against the sentence it came from.")
FORM = ("This issue uses the regression form: values marked **read** are its answers, taken "
        "as written; values marked **guessed** come from its free text.")
EDIT = ("**To correct it**, copy this, fix what is wrong, and either paste it into a comment "
        "under a first line `/bisect go`, or paste it at the end of the issue's text (or edit "
        "the form's answers in place) and comment `/bisect go`: the latest answer of each "
        "field wins, read exactly as written. An answer marked guessed (a hidden "
        "`vllm-bisect guessed` note) stays a guess until you edit it. The same shape is the "
        "repository's regression form (`vllm-bisect triage --form`).")


def without_form_reply(comment: str) -> str:
    """``comment`` without its ready-to-edit reply (for the acknowledgement of a queued job)."""
    return comment.split(f"\n\n{EDIT}", 1)[0].rstrip() + "\n"


def _cell(text: str, n: int = 160, code: bool = False) -> str:
    """Text for a table cell (``code``: inside a code span, where a backtick would end it)."""
    text = text.replace("|", "\\|").replace("\n", " ")[:n]
    return text.replace("`", "'") if code else text


def comment_markdown(t: Triage, compare: str | None = None, started: bool = True) -> str:
    """Markdown for an issue comment: the range and search kind, each value read or guessed
    with the line and sentence it came from, the warnings, what the reporter still has to
    say, and (when not started) a ready-to-edit reply in the form's shape."""
    fix = t.search.value == "fix"
    lines = ["## vllm-bisect: what I read from this issue", ""]
    if fix:
        lines.append("This reads as a **fix report**: I will look for the **first fixed commit** "
                     "(old = has the problem, new = fixed; `git bisect` terms inverted).")
    else:
        lines.append("This reads as a **regression report**: I will look for the **first bad "
                     "commit** (old = good, new = bad).")
    lines += ["", FORM if t.form else FREE_TEXT]
    lines += ["", "| what | value | how | line | from the sentence | why |",
              "|---|---|---|---|---|---|"]
    for r in t.read:
        how = "**read**" if r.source is Source.READ else "guessed"
        quote = f"“{_cell(r.quote, 200)}”" if r.quote else "-"
        lines.append(f"| {_cell(r.what)} | `{_cell(r.value, code=True)}` | {how} | {r.line or '-'} | "
                     f"{quote} | {_cell(r.why)} |")
    if not any(r.what == "hardware" for r in t.read):
        gpu = t.hardware.get("gpu")
        lines.append(f"| hardware | `{gpu or '?'}` TP={t.hardware.get('tensor_parallel', 1)} | "
                     f"guessed | - | - | {'named in the report' if gpu else 'not named'} |")
    if t.images:
        lines.append(f"| images | `{_cell(', '.join(t.images), code=True)}` | guessed | - | - | docker "
                     "tags in the report |")
    if t.warnings:
        lines += ["", "**Warnings**", ""] + [f"- {w}" for w in t.warnings]
    if t.unknowns:
        lines += ["", "**Unknown** (fill it in the form below, or reply `/bisect good=<ref> "
                  "bad=<ref> [symptom=...] [model=org/name]`)", ""] + [f"- {u}" for u in t.unknowns]
    if compare:
        lines += ["", "The report flips an environment variable between runs; an A/B at one "
                  "commit answers that without a bisect:", "", f"```\n{compare}\n```"]
    if started and t.good and t.bad:
        lines += ["", f"Starting: `{t.good[:12]}` ({t.old_term}) .. `{t.bad[:12]}` "
                  f"({t.new_term})."]
    elif not started:
        lines += ["", EDIT, "", "````markdown", form_body(t).rstrip(), "````"]
    return "\n".join(lines) + "\n"
