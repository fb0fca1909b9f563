"""A reading written back in the form's rendered shape: the bot's ready-to-edit reply. Pasted
into the issue (and corrected), it is read field by field, exactly, like a filed form."""

from __future__ import annotations

import json
import shlex

from vllm_bisect.triage.form.fields import (
    LABELS,
    NO_RESPONSE,
    SEARCH_TEXT,
    SHELL_FIELDS,
    SYMPTOM_TEXT,
    Field,
)
from vllm_bisect.triage.values import Triage


def _serve(t: Triage) -> str:
    """The serve command as read (flags already filtered), or "" when none was read."""
    if not any(r.what == "serve args" for r in t.read):
        return ""
    model = t.local_model or t.model
    words = [f"{k}={shlex.quote(v)}" for k, v in t.env.items()]
    words += ["vllm", "serve", shlex.quote(model or "<model>")]
    words += [shlex.quote(a) for a in t.serve_args]
    if t.speculative:
        words += ["--speculative-config", shlex.quote(json.dumps(t.speculative))]
    return " ".join(words)


def _answers(t: Triage) -> dict[Field, str]:
    gpu = t.hardware.get("gpu")
    tp = t.hardware.get("tensor_parallel", 1)
    return {
        Field.GOOD: t.good_label or t.good or "",
        Field.BAD: t.bad_label or t.bad or "",
        Field.SEARCH: SEARCH_TEXT[t.search],
        Field.MODEL: t.local_model or t.model or "",
        Field.SERVE: _serve(t),
        Field.HARDWARE: f"{gpu}, TP={tp}" if gpu else "",
        Field.PROBE: t.benchmark or "",
        Field.DETAILS: "",
    }


def form_body(t: Triage) -> str:
    """``t`` as GitHub renders an issue filed with the regression form."""
    answers = _answers(t)
    parts = []
    for f, label in LABELS.items():
        if f is Field.SYMPTOMS:
            text = "\n".join(f"- [{'X' if s.value in t.symptoms else ' '}] {option}"
                             for s, option in SYMPTOM_TEXT.items())
        else:
            value = answers[f]
            text = (f"```shell\n{value}\n```" if value and f in SHELL_FIELDS
                    else value or NO_RESPONSE)
        parts.append(f"### {label}\n\n{text}\n")
    return "\n".join(parts)
