"""One form answer, read exactly: a range end, a model. An answer that is not one of the
shapes below is not read (the caller falls back to the free-text reader and says so).

A range end is one of: a PR (``#12345`` or its URL), a nightly date (``nightly-2026-01-15``,
``2026-01-15``), a release, tag or dev version as the free-text reader spells it
(``0.10.2``, ``v0.10.2``, ``vllm==0.10.2``, ``0.23.1rc1.dev471+ge312c5cb2``,
``0.23.1rc1.dev471 (e312c5cb2)``, a commit URL, ``vllm/vllm-openai:v0.18.0``), a commit sha,
or one tag or branch name as written (``b9442``, ``releases/v0.18.0``, ``main``).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from vllm_bisect.triage.names import path_name
from vllm_bisect.triage.refs import find_mentions
from vllm_bisect.triage.roles import merge_points
from vllm_bisect.triage.serving import GENERIC_DIR, HUB_ID, NOT_MODEL_ORG

PR = re.compile(r"(?:PR\s{0,2})?#(?P<a>\d{1,7})|https://github\.com/[\w.-]{1,100}/[\w.-]{1,100}"
                r"/pull/(?P<b>\d{1,7})/?", re.IGNORECASE)
NIGHTLY_DATE = re.compile(r"(?:nightly[-\s]?)?(?P<date>\d{4}-\d{2}-\d{2})", re.IGNORECASE)
SHA = re.compile(r"[0-9a-f]{7,40}")
PRODUCT = re.compile(r"^(?:vllm(?:-ascend)?|sglang)(?:\s{0,2}(?:==|=|:)\s{0,2}|\s{1,2})",
                     re.IGNORECASE)
NAME = re.compile(r"[A-Za-z0-9][\w./+-]{0,100}")
HF_URL = re.compile(r"https://huggingface\.co/(?P<id>[\w.-]{1,100}/[\w.-]{1,120})/?")
LOCAL = re.compile(r"(?:/|\./|\.\./|~/|[A-Za-z]:\\)\S{0,500}")
MODEL_NAME = re.compile(r"[A-Za-z0-9][\w.:+-]{0,120}")
# answers that say there is no answer (or name a moving target): not a value
NON_ANSWERS = frozenset({"n/a", "na", "none", "no", "unknown", "not sure", "idk", "tbd", "?", "-",
                         "latest", "nightly", "the latest", "current", "newest", "all"})


@dataclass(frozen=True)
class RefAnswer:
    ref: str      # what the bisect uses: a sha, "v0.10.2", "#123", "nightly-2026-01-15", a name
    label: str    # as it is shown
    kind: str     # "pr", "nightly", "version", "sha", "name"
    image: str | None = None   # the docker image it was named by


@dataclass(frozen=True)
class ModelAnswer:
    model: str | None        # the hub id, or the name as written (org_less)
    local: str | None        # a path served
    org_less: bool = False


def _clean(text: str) -> str:
    text = text.strip().strip("`'\"").strip()
    return "" if text.lower().rstrip(".") in NON_ANSWERS else text


def form_ref(answer: str) -> RefAnswer | None:
    """The range end an answer names, or None when it is not exactly one."""
    text = _clean(answer)
    if not text or "\n" in text:
        return None
    if m := PR.fullmatch(text):
        n = m.group("a") or m.group("b")
        return RefAnswer(f"#{n}", f"#{n}", "pr")
    if m := NIGHTLY_DATE.fullmatch(text):
        try:
            day = dt.date.fromisoformat(m.group("date"))
        except ValueError:
            return None
        return RefAnswer(f"nightly-{day.isoformat()}", f"nightly {day.isoformat()}", "nightly")
    product = PRODUCT.match(text)
    rest = text[product.end():] if product else text
    line = "vllm " + rest   # in this field a bare "0.9" is vLLM's version, as "vllm 0.9" is
    mentions = find_mentions([line])
    # "0.9.0 (1a2b3c4)" ends in ")"; "0.11.0rc1.dev32+gc6e156a02.d20251020": a build date
    close = {"version+sha": r"\s*[)）]?\s*", "+g": r"(?:\.d\d{8})?\s*"}.get(
        mentions[0].how if mentions else "", r"\s*")
    if (len(mentions) == 1 and mentions[0].start == 5
            and re.fullmatch(close, line[mentions[0].end:])):
        points = merge_points(mentions)
        if len(points) == 1:
            p = points[0]
            return RefAnswer(p.ref, p.label, "sha" if p.version is None else "version",
                             mentions[0].image)
    if not product and SHA.fullmatch(text) and (len(text) == 40 or re.search(r"[a-f]", text)):
        return RefAnswer(text, text, "sha")
    if not product and NAME.fullmatch(text) and not text.isdigit():
        return RefAnswer(text, text, "name")
    return None


def form_model(answer: str) -> ModelAnswer | None:
    """The model an answer names: a hub id (or its huggingface.co URL), a local path, or one
    name as written; None for anything else."""
    text = _clean(answer)
    if not text or "\n" in text:
        return None
    if m := HF_URL.fullmatch(text):
        text = m.group("id")
    if LOCAL.fullmatch(text):
        return ModelAnswer(path_name(text), text)
    if HUB_ID.fullmatch(text):
        org = text.split("/")[0]
        if GENERIC_DIR.match(org):
            return ModelAnswer(path_name(text), text)  # "models/Qwen3-8B": a folder
        if not NOT_MODEL_ORG.match(org):
            return ModelAnswer(text, None)
    if MODEL_NAME.fullmatch(text):
        return ModelAnswer(text, None, org_less=True)
    return None
