"""The regression form's fields as the reader knows them: the label GitHub renders as each
answer's ``### Label`` heading, the dropdown's and the checkboxes' keys (the words before
":"). ``regression.yml`` is the form itself, its symptom checkboxes written in by
``form_yaml()`` from each symptom's declaration (``Words.form``, in its module of
``symptoms/``; latency is triage's own); tests/triage/test_form.py checks the two agree."""

from __future__ import annotations

import json
import re
from enum import StrEnum
from importlib.resources import files

from vllm_bisect.triage.roles import SearchKind
from vllm_bisect.triage.symptoms import READ, Found, Prose

FORM_FILE = "regression.yml"
NO_RESPONSE = "_No response_"   # GitHub's rendering of an empty answer


class Field(StrEnum):
    """The form's fields by their ids in regression.yml."""

    GOOD = "last-good"
    BAD = "first-bad"
    SEARCH = "search"
    SYMPTOMS = "symptoms"
    MODEL = "model"
    SERVE = "serve-command"
    HARDWARE = "hardware"
    PROBE = "probe-command"
    DETAILS = "details"


LABELS: dict[Field, str] = {
    Field.GOOD: "Last good (fix search: last broken)",
    Field.BAD: "First bad (fix search: first fixed)",
    Field.SEARCH: "Search",
    Field.SYMPTOMS: "Symptoms",
    Field.MODEL: "Model",
    Field.SERVE: "Serve command",
    Field.HARDWARE: "Hardware",
    Field.PROBE: "Probe or benchmark command",
    Field.DETAILS: "What you saw",
}
# each field's placeholder in regression.yml: an example, never the reporter's answer (GitHub
# does not submit it; a body written by hand from the form may keep it)
PLACEHOLDERS: dict[Field, str] = {
    Field.GOOD: "v0.10.2",
    Field.BAD: "0.23.1rc1.dev601+ga16dbd5b8",
    Field.MODEL: "Qwen/Qwen3-8B",
    Field.SERVE: "VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve Qwen/Qwen3-8B --max-model-len 32768",
    Field.HARDWARE: "2x H100 80GB, TP=2",
    Field.PROBE: "vllm bench serve --model Qwen/Qwen3-8B --dataset-name random --num-prompts 200",
}
SHELL_FIELDS = (Field.SERVE, Field.PROBE)   # rendered in a ```shell block
# the dropdown's options and the symptom checkboxes, by the word(s) before ":"
SEARCH_OPTIONS: dict[str, SearchKind] = {"regression": SearchKind.REGRESSION,
                                         "fix": SearchKind.FIX}
SEARCH_TEXT: dict[SearchKind, str] = {SearchKind.REGRESSION: "regression: find the first bad commit",
                                      SearchKind.FIX: "fix: find the first fixed commit"}


def _key(label: str) -> str:
    return re.sub(r"\s+", " ", label).strip().lower()


def option_key(text: str) -> str:
    """The key of a dropdown answer or a checkbox label: its words before ":"."""
    return _key(text.split(":", 1)[0])


# the symptom checkboxes: each symptom's (its Words.form), in the registry's order, and latency
SYMPTOM_TEXT: dict[Found, str] = {
    **{s: w.form for s in READ if (w := s.info.words) is not None},
    Prose.LATENCY: "Latency: end-to-end request time"}
SYMPTOM_OPTIONS: dict[str, Found] = {option_key(text): f for f, text in SYMPTOM_TEXT.items()}
# where form_yaml() writes the checkboxes in regression.yml
CHECKBOXES = "        # the symptoms' checkboxes (form_yaml(): SYMPTOM_TEXT)\n"


# a heading names a field by its whole label or by the words before " (" ("### Last good")
HEADINGS: dict[str, Field] = {}
for _f, _label in LABELS.items():
    HEADINGS[_key(_label)] = _f
    HEADINGS.setdefault(_key(_label.split(" (")[0]), _f)


def field_of(heading: str) -> Field | None:
    """The field a heading names ("### Model" or "### Model:")."""
    return HEADINGS.get(_key(heading).rstrip(":").rstrip())


def form_yaml() -> str:
    """The form, as GitHub reads it from .github/ISSUE_TEMPLATE/ (its symptom checkboxes
    from the symptoms' declarations)."""
    text = files(__package__).joinpath(FORM_FILE).read_text(encoding="utf-8")
    return text.replace(CHECKBOXES, "".join(
        f"        - label: {json.dumps(label, ensure_ascii=False)}\n"
        for label in SYMPTOM_TEXT.values()))
