"""A form-rendered report: its answers override what the free-text reader guessed, field by
field, and each value says which it is (``Source.READ`` from a form field, ``Source.GUESSED``
from text). The free-text reader still runs on the body (without the form's frame) for what
the form left empty or could not hold exactly, and for the numbers in "What you saw"."""

from __future__ import annotations

import re

from vllm_bisect.triage.form.answers import form_model, form_ref
from vllm_bisect.triage.form.fields import (
    LABELS,
    NO_RESPONSE,
    PLACEHOLDERS,
    SEARCH_OPTIONS,
    SYMPTOM_OPTIONS,
    Field,
    option_key,
)
from vllm_bisect.triage.form.split import Answer, FormBody
from vllm_bisect.triage.parse import range_unknowns, settle_symptoms
from vllm_bisect.triage.roles import SearchKind
from vllm_bisect.triage.serving import GPU, TP, find_serving
from vllm_bisect.triage.values import Read, Source, Triage

END_HINT = {Field.GOOD: "Last good", Field.BAD: "First bad"}


def _is_example(a: Answer | None) -> bool:
    return (a is not None and a.field in PLACEHOLDERS and bool(a.text)
            and " ".join(a.text.split()) == PLACEHOLDERS[a.field])


def placeholders_left(form: FormBody) -> set[Field]:
    """The fields still holding the form's placeholder (its example): a body written from
    the form with its examples left in. A short answer that equals its example may well be
    the reporter's own (a real v0.10.2, Qwen/Qwen3-8B, "2x H100 80GB, TP=2"): the examples
    count as left in when three or more fields hold them, or a command field does (its
    example is one exact command line nobody runs by chance)."""
    left = {f for f, a in form.answers.items() if _is_example(a)}
    return left if len(left) >= 3 or left & {Field.SERVE, Field.PROBE} else set()


def free_text_view(form: FormBody, lines: list[str]) -> list[str]:
    """The body as the free-text reader sees it: the form's frame and any placeholder left in
    a field blanked (line numbers kept), each range end's answer led by what it is ("last
    good: v0.10.2")."""
    blank = set(form.scaffold)
    for left in placeholders_left(form):
        ans = form.answers[left]
        blank |= set(range(ans.line, ans.line + ans.text.count("\n") + 1))
    out = ["" if n in blank else line for n, line in enumerate(lines, 1)]
    fix = _search(form) is SearchKind.FIX
    for f, words in ((Field.GOOD, "last broken" if fix else "last good"),
                     (Field.BAD, "first fixed" if fix else "first bad")):
        a = form.answers.get(f)
        if a is not None and a.text and a.line <= len(out) and f not in placeholders_left(form):
            out[a.line - 1] = f"{words}: {out[a.line - 1].strip()}"
    return out


def _search(form: FormBody) -> SearchKind | None:
    a = form.answers.get(Field.SEARCH)
    return SEARCH_OPTIONS.get(option_key(a.text)) if a is not None and a.text else None


def _read(t: Triage, what: str, value: str, a: Answer, why: str = "",
          exact: bool = True) -> None:
    """A value from a field: read when it is the reporter's own answer, exactly; guessed when
    the field holds the bot's guess pasted back unedited, or ``exact`` is False (``why``)."""
    why = why or f"form field {LABELS[a.field]!r}"
    if a.unedited_guess:
        exact, why = False, (f"{why}; the bot's guess, pasted back unedited (edit the answer "
                             "to make it yours)")
    t.read.append(Read(what, value, a.line, why, Source.READ if exact else Source.GUESSED,
                       a.text.splitlines()[0][:200] if a.text else ""))


def _placeholder_left(t: Triage, form: FormBody, a: Answer | None) -> bool:
    if a is None or a.field not in placeholders_left(form):
        return False
    t.warnings.append(f"form field {LABELS[a.field]!r}: {a.text[:80]!r} is the form's "
                      "placeholder (its example, left in with others): not read")
    return True


def _drop(t: Triage, *prefixes: str) -> None:
    t.read = [r for r in t.read if not r.what.startswith(prefixes)]


def _not_exact(t: Triage, a: Answer, shape: str) -> None:
    t.warnings.append(f"form field {LABELS[a.field]!r}: {a.text[:80]!r} is not {shape}; the "
                      "value shown is guessed from the text (edit the field to one value)")


def _range(t: Triage, form: FormBody) -> None:
    search = _search(form)
    if search is not None:
        t.search = search
        _drop(t, "search")
        _read(t, "search", "find the fix" if search is SearchKind.FIX else "regression",
              form.answers[Field.SEARCH])
    for f, attr, role in ((Field.GOOD, "good", "old"), (Field.BAD, "bad", "new")):
        a = form.answers.get(f)
        if a is None or not a.text or _placeholder_left(t, form, a):
            continue
        ref = form_ref(a.text)
        if ref is None:
            _not_exact(t, a, "one version, tag, commit, PR or nightly date")
            continue
        setattr(t, attr, ref.ref)
        setattr(t, attr + "_label", ref.label)
        t.candidates[role] = [ref.ref]
        if ref.image and ref.image not in t.images:
            t.images.append(ref.image)
        _drop(t, f"range.{attr}")
        term = t.old_term if attr == "good" else t.new_term
        _read(t, f"range.{attr} ({term})", ref.label, a)
        if ref.kind == "nightly":
            t.warnings.append(f"{attr} is a nightly date ({ref.label}): with --repo it becomes "
                              f"main's commit at the {'start' if attr == 'good' else 'end'} of "
                              "that day (UTC), so the range holds every commit that nightly "
                              "could have been built from")
    if t.search is SearchKind.REGRESSION and t.bad and t.bad.startswith("#") \
            and not (form.answers.get(Field.GOOD) and form.answers[Field.GOOD].text):
        t.good = t.good_label = None  # a culprit PR alone: its parent is the good end
        t.candidates["old"] = []
        _drop(t, "range.good")
    range_unknowns(t)


def _symptoms(t: Triage, form: FormBody) -> None:
    a = form.answers.get(Field.SYMPTOMS)
    if a is None:
        return
    found = [(SYMPTOM_OPTIONS.get(option_key(label)), label, n) for label, n in a.checked]
    for symptom, label, _ in found:
        if symptom is None:
            t.warnings.append(f"form field 'Symptoms': {label[:60]!r} is not one of the form's "
                              "options; not read")
    ticked = [(s, n) for s, _, n in found if s is not None]
    if not ticked:
        t.warnings.append("form field 'Symptoms': nothing ticked; the symptoms shown are "
                          "guessed from the text")
        return
    _drop(t, "symptom")
    t.unknowns = [u for u in t.unknowns if not u.startswith("symptom")]
    t.symptoms = list(dict.fromkeys(s.value for s, _ in ticked))
    for s, n in ticked:
        t.read.append(Read("symptom", s.value, n, "form field 'Symptoms': ticked" + (
            "; the bot's guess, pasted back unedited" if a.unedited_guess else ""),
            Source.GUESSED if a.unedited_guess else Source.READ,
            next(label for label, m in a.checked if m == n)))
    settle_symptoms(t)


def _model(t: Triage, form: FormBody) -> bool:
    a = form.answers.get(Field.MODEL)
    if a is None or not a.text or _placeholder_left(t, form, a):
        return False
    m = form_model(a.text)
    if m is None:
        _not_exact(t, a, "one Hugging Face id, local path or model name")
        return False
    t.unknowns = [u for u in t.unknowns if not u.startswith("model")]
    _drop(t, "model")
    t.model, t.local_model = m.model, m.local
    _read(t, "model", m.local or m.model or "", a)
    if m.local:
        t.unknowns.append(f"model: the report serves a local path ({m.local}); pass the Hugging "
                          "Face id or mount that path (serve.model)")
    elif m.org_less:
        t.unknowns.append(f"model: {m.model!r} is named without its org: pass the Hugging Face "
                          "id (serve.model)")
    return True


def _how_run(t: Triage, form: FormBody, model_read: bool) -> None:
    """Serve command, hardware and probe command: each parsed on its own (shlex, never run)."""
    parts = {f: form.answers[f] for f in (Field.SERVE, Field.HARDWARE, Field.PROBE)
             if f in form.answers and form.answers[f].text
             and not _placeholder_left(t, form, form.answers[f])}
    if not parts:
        return
    texts = [parts[f].text if f in parts else "" for f in (Field.SERVE, Field.HARDWARE, Field.PROBE)]
    s = find_serving("\n".join(texts).splitlines())
    serve, hw, probe = parts.get(Field.SERVE), parts.get(Field.HARDWARE), parts.get(Field.PROBE)
    if serve is not None and s.serve_line is not None:
        _drop(t, "serve args", "speculative")
        t.serve_args, t.env, t.speculative = s.serve_args, s.env, s.speculative
        t.speculative_method_said = s.speculative_said
        _read(t, "serve args", " ".join(s.serve_args) or "(none)", serve,
              "form field 'Serve command' (--port, --host, --model and unsafe values dropped)")
        if s.speculative_why:   # read only from a --speculative-config the field gives
            _read(t, "speculative", str(s.speculative or "none"), serve, s.speculative_why
                  + ("" if s.speculative_exact else " (no --speculative-config in the field)"),
                  exact=s.speculative_exact)
        if not model_read and (s.model or s.local_model):
            t.unknowns = [u for u in t.unknowns if not u.startswith("model")]
            _drop(t, "model")
            t.model, t.local_model = s.model, s.local_model
            _read(t, "model", s.model or s.local_model or "", serve,
                  "the model of form field 'Serve command'")
    if hw is not None:
        _hardware(t, s.hardware, hw)
    if probe is not None:
        _drop(t, "benchmark")
        if s.bench_kind:
            t.benchmark = s.bench_command
            t.bench = ({"kind": s.bench_kind, "args": s.bench_args}
                       if s.bench_kind != "latency" else None)
            _read(t, "benchmark", s.bench_command or "", probe)
        else:
            t.benchmark, t.bench = probe.text.splitlines()[0][:300], None
            _read(t, "probe command", t.benchmark, probe, "form field 'Probe or benchmark "
                  "command' (not `vllm bench`: kept for people; the spec's probe measures)")


def _hardware(t: Triage, found: dict[str, object], hw: Answer) -> None:
    """The Hardware field as written (its GPU, its TP); the serve command's own tensor
    parallel size, when it differs, is what runs: said in a warning, never silently."""
    gpu = find_serving(hw.text.splitlines()).hardware.get("gpu") or re.sub(r"\s+", " ",
                                                                            hw.text)[:60]
    hw_tp = [int(next(g for g in m.groups() if g)) for m in TP.finditer(hw.text)]
    args = t.serve_args
    serve_tp = [int(args[i + 1]) for i, a in enumerate(args[:-1])
                if a == "--tensor-parallel-size" and args[i + 1].isdigit()]
    t.hardware = {**found, "gpu": gpu, "tensor_parallel": (serve_tp or hw_tp or [1])[0]}
    t.unknowns = [u for u in t.unknowns if not u.startswith("hardware")]
    t.warnings = [w for w in t.warnings if not w.startswith("tensor parallel:")]
    if serve_tp and hw_tp and serve_tp[0] != hw_tp[0]:
        t.warnings.append(f"tensor parallel: form field 'Hardware' says TP={hw_tp[0]} but "
                          f"'Serve command' runs --tensor-parallel-size {serve_tp[0]}: the spec "
                          "follows the serve command; check which one ran")
    gpus = {(g.group("gpu") or g.group("ascend") or "").upper() for g in GPU.finditer(hw.text)}
    several = [w for w, n in (("GPUs", len(gpus)), ("TP sizes", len(set(hw_tp)))) if n > 1]
    _read(t, "hardware", f"{gpu} TP={hw_tp[0]}" if hw_tp else gpu, hw,
          f"form field 'Hardware' names several {' and '.join(several)}: the first is a "
          "guess" if several else "", exact=not several)


def read_form(t: Triage, form: FormBody) -> None:
    """Override ``t`` (the free-text reading of the same body) with the form's answers."""
    t.form = True
    if (d := form.answers.get(Field.DETAILS)) is not None:
        t.details = d.text
    if len(form.copies) > 1:
        spans = ", ".join(f"lines {a}-{b}" for a, b in form.copies)
        t.warnings.append(f"the body holds the form {len(form.copies)} times ({spans}): each "
                          "field's latest answer is read; the earlier copies' answers are "
                          "superseded")
    _range(t, form)
    _symptoms(t, form)
    model_read = _model(t, form)
    _how_run(t, form, model_read)
    for f in (Field.GOOD, Field.BAD, Field.MODEL):
        a = form.answers.get(f)
        if a is not None and not a.text:
            t.warnings.append(f"form field {LABELS[f]!r} was left empty ({NO_RESPONSE}); "
                              "the value shown, if any, is guessed from the text")
