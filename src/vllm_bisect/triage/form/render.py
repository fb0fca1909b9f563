"""A reading written back in the form's rendered shape: the bot's ready-to-edit reply. Pasted
into the issue or a comment (and corrected), it is read field by field, exactly, like a filed
form. It is lossless: what the spec is made of (the range, symptoms, model, serve command with
its flags, hardware with its TP, CUDA variant, architecture and platform, the benchmark, the
numbers the thresholds and max_tokens come from) reads back the same. An answer the bot only
guessed carries a mark (an HTML comment GitHub does not show): pasted back unedited it stays
a guess; edited, it is the reporter's answer."""

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
from vllm_bisect.triage.form.split import digest
from vllm_bisect.triage.values import Source, Triage

# the field each reading comes from (what -> field), to know which answers are only guessed
WHAT_FIELD = {"range.good": Field.GOOD, "range.bad": Field.BAD, "search": Field.SEARCH,
              "symptom": Field.SYMPTOMS, "model": Field.MODEL, "serve": Field.SERVE,
              "speculative": Field.SERVE, "hardware": Field.HARDWARE, "benchmark": Field.PROBE,
              "probe": Field.PROBE}


def _serve(t: Triage) -> str:
    """The serve command as read (flags already filtered), or "" when nothing of it was read
    (no serve line, no environment, no speculative config)."""
    if not (any(r.what == "serve args" for r in t.read) or t.env or t.speculative):
        return ""
    model = t.local_model or t.model
    words = [f"{k}={shlex.quote(v)}" for k, v in t.env.items()]
    words += ["vllm", "serve", shlex.quote(model or "<model>")]
    words += [shlex.quote(a) for a in t.serve_args]
    if t.speculative:
        words += ["--speculative-config", shlex.quote(json.dumps(t.speculative))]
    return " ".join(words)


def _hardware(t: Triage) -> str:
    gpu = t.hardware.get("gpu")
    if not gpu:
        return ""
    words = [f"{gpu}, TP={t.hardware.get('tensor_parallel', 1)}"]
    if t.hardware.get("variant") == "cu130":
        words.append("CUDA 13 (cu130)")
    if t.hardware.get("arch") == "aarch64":
        words.append("aarch64")
    if t.hardware.get("platform") == "rocm" and "rocm" not in gpu.lower():
        words.append("ROCm")
    return ", ".join(words)


def _details(t: Triage) -> str:
    """The form's "What you saw" as written; for free text, the numbers the spec's thresholds
    and max_tokens come from, in words the reader reads back the same."""
    if t.details:
        return t.details
    out = []
    itl = sorted(v for v in t.numbers.get("itl_ms", []) if v > 0)
    if len(itl) >= 2:
        out.append(f"ITL {itl[0]:g} ms -> {itl[-1]:g} ms.")
    tok = sorted(v for v in t.numbers.get("tok_s", []) if v > 0)
    if len(tok) >= 2:
        out.append(f"Throughput {tok[-1]:g} tok/s -> {tok[0]:g} tok/s.")
    if t.cap_tokens:
        out.append(f"Generations stop at {t.cap_tokens} tokens.")
    return " ".join(out)


def _answers(t: Triage) -> dict[Field, str]:
    return {
        Field.GOOD: t.good_label or t.good or "",
        Field.BAD: t.bad_label or t.bad or "",
        Field.SEARCH: SEARCH_TEXT[t.search],
        Field.MODEL: t.local_model or t.model or "",
        Field.SERVE: _serve(t),
        Field.HARDWARE: _hardware(t),
        Field.PROBE: t.benchmark or "",
        Field.DETAILS: _details(t),
    }


def _guessed(t: Triage) -> set[Field]:
    """The fields whose answer the bot only guessed (no reading of them is ``read``)."""
    read = {WHAT_FIELD.get(r.what.split(" ")[0]) for r in t.read if r.source is Source.READ}
    return {f for f in Field if f is not Field.DETAILS and f not in read}


def form_body(t: Triage) -> str:
    """``t`` as GitHub renders an issue filed with the regression form."""
    answers = _answers(t)
    guessed = _guessed(t)
    parts = []
    for f, label in LABELS.items():
        if f is Field.SYMPTOMS:
            ticked = [option for s, option in SYMPTOM_TEXT.items() if s.value in t.symptoms]
            text = "\n".join(f"- [{'X' if s.value in t.symptoms else ' '}] {option}"
                             for s, option in SYMPTOM_TEXT.items())
            shown = "\n".join(ticked)
        else:
            shown = answers[f]
            text = (f"```shell\n{shown}\n```" if shown and f in SHELL_FIELDS
                    else shown or NO_RESPONSE)
        if f in guessed and shown:
            text += f"\n<!-- vllm-bisect guessed: {digest(shown)} -->"
        parts.append(f"### {label}\n\n{text}\n")
    return "\n".join(parts)
